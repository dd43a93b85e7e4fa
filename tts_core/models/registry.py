"""Which model a checkpoint holds, from its config.json alone (no weights read), or for a
Chatterbox release (no config.json) from its T3 file's name.

`detect_architecture(name_or_path)` reads config.json of a local folder, or downloads only
config.json for a Hub repo id (the Qwen3 loader's mechanism: same errors for no network, an
unknown repo or a missing file); a repo without config.json is asked for its file list.
`load_model` and the backend loader dispatch on it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .config_json import one_read, read_json_object

QWEN3_TTS = "qwen3_tts"  # Qwen3-TTS 12 Hz: config.json "model_type"
VOXCPM2 = "voxcpm2"  # VoxCPM2: config.json "architecture"
ARCHITECTURES = (QWEN3_TTS, VOXCPM2)
REMOTE = "remote"  # not a checkpoint: an http(s)://HOST:PORT/v1 server (backends/remote.py)
CHATTERBOX_TURBO = "chatterbox_turbo"  # no config.json: t3_turbo_v1 (or Nano's t3_nano_v1)
CHATTERBOX_ENGLISH = "chatterbox_english"  # no config.json: a folder with t3_cfg.safetensors
CONFIG_FILE = "config.json"
# a Chatterbox release has no config.json: its T3 weights' file name says which model it is
CHATTERBOX_T3_FILES = {
    "t3_turbo_v1.safetensors": CHATTERBOX_TURBO,
    "t3_nano_v1.safetensors": CHATTERBOX_TURBO,  # Nano: Turbo with GPT-2 small (HEAD only)
    "t3_cfg.safetensors": CHATTERBOX_ENGLISH,
}


class UnknownArchitectureError(ValueError):
    """config.json names a model this engine does not implement."""


def architecture_of(config: dict[str, Any], source: str = CONFIG_FILE) -> str:
    """QWEN3_TTS or VOXCPM2; UnknownArchitectureError naming what the file says otherwise."""
    if "architecture" in config:  # VoxCPM's key ("voxcpm" for 1/1.5, "voxcpm2")
        if config["architecture"] == VOXCPM2:
            return VOXCPM2
        found = f"architecture {config['architecture']!r}"
    elif config.get("model_type") == QWEN3_TTS:
        return QWEN3_TTS
    else:
        found = f"model_type {config.get('model_type')!r} and no 'architecture'"
    raise UnknownArchitectureError(
        f"{source} names {found}; this engine runs Qwen3-TTS 12 Hz "
        f"(model_type {QWEN3_TTS!r}) and VoxCPM2 (architecture {VOXCPM2!r})"
    )


def is_remote(name_or_path: str | Path) -> bool:
    """An http(s) URL: a server to speak through, nothing to read or download."""
    return str(name_or_path).lower().startswith(("http://", "https://"))


def detect_architecture(name_or_path: str | Path) -> str:
    """QWEN3_TTS or VOXCPM2 for a local folder or Hub repo id (only config.json is read or
    downloaded); CHATTERBOX_TURBO or CHATTERBOX_ENGLISH for a folder or repo in a Chatterbox
    release layout (no config.json: its T3 file names the model, `CHATTERBOX_T3_FILES`; a repo is
    asked for its file list only when it has no config.json); REMOTE for an http(s) URL
    (nothing is fetched here)."""
    if is_remote(name_or_path):
        return REMOTE
    from .checkpoint import check_files, resolve_checkpoint

    local = Path(name_or_path).expanduser().is_dir()
    folder = resolve_checkpoint(name_or_path, required=(), patterns=(CONFIG_FILE,))
    if not (folder / CONFIG_FILE).exists():
        names = [path.name for path in folder.iterdir()] if local else _hub_files(name_or_path)
        found = _chatterbox_layout(names)
        if found is not None:
            return found
    check_files(folder, (CONFIG_FILE,))  # the shared loader's "missing: config.json"
    config = read_json_object(folder / CONFIG_FILE, UnknownArchitectureError)
    return architecture_of(config, f"config.json of {name_or_path}")


def _chatterbox_layout(names: list[str]) -> str | None:
    """The Chatterbox model whose T3 file is among `names` (the release has no config.json)."""
    present = set(names)
    return next((arch for name, arch in CHATTERBOX_T3_FILES.items() if name in present), None)


def _hub_files(repo_id: str | Path) -> list[str]:
    """The file names of a Hub repo ([] where they cannot be listed: the caller's config.json
    error then stands, with its reason: no network, no such repo)."""
    from huggingface_hub import list_repo_files  # network only for a repo id

    try:
        return list(list_repo_files(str(repo_id)))
    except Exception:  # the hub raises many types; the config.json error already says why
        return []


QWEN3_ONLY_DEFAULTS = {
    "compile": False,
    "cuda_graphs": "auto",
    "decoder_dtype": None,
    "warm_chunks": (2, 6),
}


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
    read once): Qwen3TTSModel (every argument as `qwen3_tts.model.load_model`), VoxCPMModel or a
    Chatterbox model (device and dtype; dtype None = float32; Turbo takes quantize too: T3 int8,
    chatterbox/quant.py). The other arguments are Qwen3-TTS options: for VoxCPM2 they must keep
    their defaults (quantize may be None, "none" or "auto", which keeps the float weights: there
    is no int8 VoxCPM2), else a ValueError says which."""
    options = {"compile": compile, "cuda_graphs": cuda_graphs, "quantize": quantize,
               "decoder_dtype": decoder_dtype, "warm_chunks": warm_chunks}  # fmt: skip
    with one_read():  # config.json read once for the dispatch and the model's own configs
        return _dispatch(name_or_path, device, dtype, options)


def _dispatch(name_or_path: str | Path, device: str, dtype: Any, options: dict[str, Any]) -> Any:
    import torch

    dtype = torch.float32 if dtype is None else dtype
    architecture = detect_architecture(name_or_path)
    if architecture == CHATTERBOX_TURBO:  # float32; quantize: T3 int8 (chatterbox/quant.py)
        from .chatterbox.model import ChatterboxTurboModel

        return ChatterboxTurboModel.from_pretrained(name_or_path, device=device, dtype=dtype,
                                                    quantize=options["quantize"])  # fmt: skip
    if architecture == CHATTERBOX_ENGLISH:  # the original English model: float32 too
        from .chatterbox.english import ChatterboxEnglishModel

        return ChatterboxEnglishModel.from_pretrained(name_or_path, device=device, dtype=dtype)
    if architecture == QWEN3_TTS:
        from .qwen3_tts.model import load_model as load_qwen3

        return load_qwen3(name_or_path, device, dtype, **options)
    quantize = options.pop("quantize")
    given = {**options, "warm_chunks": tuple(options["warm_chunks"])}
    if given["cuda_graphs"] in (None, False, "off"):  # no graphs to turn off: as the default
        given["cuda_graphs"] = "auto"
    refused = [f"{name}={value!r}" for name, value in given.items()
               if value != QWEN3_ONLY_DEFAULTS[name]]  # fmt: skip
    if quantize is not None and str(quantize).lower() not in ("none", "auto"):
        refused.append(f"quantize={quantize!r}")
    if refused:
        raise ValueError(
            f"{name_or_path} is a VoxCPM2 checkpoint; {', '.join(refused)} only applies to "
            "Qwen3-TTS (VoxCPM2 takes device and dtype)"
        )
    from .voxcpm.model import VoxCPMModel

    return VoxCPMModel.from_pretrained(name_or_path, device=device, dtype=dtype)
