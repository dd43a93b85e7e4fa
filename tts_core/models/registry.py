"""Which model a checkpoint holds, from its config.json alone (no weights read), or for a
release without config.json (Chatterbox) from its files' names: the rules are the specs' in
MODEL_SPECS (specs.py), the one list of models.

`detect_architecture(name_or_path)` reads config.json of a local folder, or downloads only
config.json for a Hub repo id (the Qwen3 loader's mechanism: same errors for no network, an
unknown repo or a missing file); a repo without config.json is asked for its file list.
`load_model` and the backend loader dispatch on it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .config_json import one_read, read_json_object
from .specs import model_specs, spec_of

# the ids of MODEL_SPECS (specs.py), named for the callers and tests that compare with them
QWEN3_TTS = "qwen3_tts"  # Qwen3-TTS 12 Hz: config.json "model_type"
VOXCPM2 = "voxcpm2"  # VoxCPM2: config.json "architecture"
CHATTERBOX_TURBO = "chatterbox_turbo"  # no config.json: t3_turbo_v1 (or Nano's t3_nano_v1)
CHATTERBOX_ENGLISH = "chatterbox_english"  # no config.json: a folder with t3_cfg.safetensors
REMOTE = "remote"  # not a checkpoint: an http(s)://HOST:PORT/v1 server (backends/remote.py)
CONFIG_FILE = "config.json"


def architectures() -> tuple[str, ...]:
    """Every model id detect_architecture may return for a checkpoint (MODEL_SPECS' order)."""
    return tuple(spec.architecture for spec in model_specs())


class UnknownArchitectureError(ValueError):
    """config.json names a model this engine does not implement."""


def architecture_of(config: dict[str, Any], source: str = CONFIG_FILE) -> str:
    """The id of the model whose spec matches `config`; UnknownArchitectureError naming what
    the file says otherwise, and what each model's config.json says."""
    found = next((spec for spec in model_specs() if spec.matches_config(config)), None)
    if found is not None:
        return found.architecture
    keyed = [spec for spec in model_specs() if spec.config is not None]
    keys = dict.fromkeys(spec.config[0] for spec in keyed)
    said = " and ".join(f"{key} {config[key]!r}" for key in keys if key in config)
    expected = " and ".join(f"{spec.title} ({spec.config[0]} {spec.config[1]!r})" for spec in keyed)
    raise UnknownArchitectureError(
        f"{source} names {said or 'none of ' + ', '.join(map(repr, keys))}; this engine runs "
        f"{expected}"
    )


def is_remote(name_or_path: str | Path) -> bool:
    """An http(s) URL: a server to speak through, nothing to read or download."""
    return str(name_or_path).lower().startswith(("http://", "https://"))


def detect_architecture(name_or_path: str | Path) -> str:
    """The architecture id of the spec (MODEL_SPECS) matching a local folder or Hub repo id:
    by its config.json (only that file is read or downloaded), or where there is none by its
    file names (a Chatterbox release: its T3 file names the model; a repo is asked for its file
    list only then); REMOTE for an http(s) URL (nothing is fetched here)."""
    if is_remote(name_or_path):
        return REMOTE
    from .checkpoint import check_files, resolve_checkpoint

    local = Path(name_or_path).expanduser().is_dir()
    folder = resolve_checkpoint(name_or_path, required=(), patterns=(CONFIG_FILE,))
    if not (folder / CONFIG_FILE).exists():
        names = [path.name for path in folder.iterdir()] if local else _hub_files(name_or_path)
        found = _layout_without_config(names)
        if found is not None:
            return found
    check_files(folder, (CONFIG_FILE,))  # the shared loader's "missing: config.json"
    config = read_json_object(folder / CONFIG_FILE, UnknownArchitectureError)
    return architecture_of(config, f"config.json of {name_or_path}")


def _layout_without_config(names: list[str]) -> str | None:
    """The model whose spec names a file among `names` (releases without config.json)."""
    present = set(names)
    return next((spec.architecture for spec in model_specs() if present & set(spec.files)), None)


def _hub_files(repo_id: str | Path) -> list[str]:
    """The file names of a Hub repo ([] where they cannot be listed: the caller's config.json
    error then stands, with its reason: no network, no such repo)."""
    from huggingface_hub import list_repo_files  # network only for a repo id

    try:
        return list(list_repo_files(str(repo_id)))
    except Exception:  # the hub raises many types; the config.json error already says why
        return []


def load_model(
    name_or_path: str | Path,
    device: str = "cpu",
    dtype: Any = None,
    compile: bool = False,
    cuda_graphs: bool | str | None = "auto",
    quantize: str | None = None,
    decoder_dtype: Any = None,
    warm_chunks: tuple[int, ...] = (2, 6),
) -> Any:
    """Hub repo id or local folder -> a ready model, chosen by `detect_architecture` (config.json
    read once) and built by its spec's loader: Qwen3TTSModel (every argument as
    `qwen3_tts.model.load_model`), VoxCPMModel or a Chatterbox model (device and dtype; dtype
    None = float32; Turbo takes quantize too: T3 int8, chatterbox/quant.py). An option a model's
    loader does not take (`ModelSpec.model_options`) must keep its default (quantize may be
    None, "none" or "auto", which keeps the float weights), else a ValueError says which."""
    options = {
        "compile": compile,
        "cuda_graphs": cuda_graphs,
        "quantize": quantize,
        "decoder_dtype": decoder_dtype,
        "warm_chunks": warm_chunks,
    }
    with one_read():  # config.json read once for the dispatch and the model's own configs
        return _dispatch(name_or_path, device, dtype, options)


def _dispatch(name_or_path: str | Path, device: str, dtype: Any, options: dict[str, Any]) -> Any:
    import torch

    dtype = torch.float32 if dtype is None else dtype
    spec = spec_of(detect_architecture(name_or_path))
    return spec.load_model(name_or_path, device, dtype, options)
