"""Checkpoint files: Hub repo id or local folder -> folder; safetensors loading with clear errors."""

from __future__ import annotations

import re
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file
from torch import nn

# Files the model needs (the speech tokenizer's encoder weights live in the same file).
REQUIRED_FILES = (
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "vocab.json",
    "merges.txt",
    "tokenizer_config.json",
    "speech_tokenizer/config.json",
    "speech_tokenizer/model.safetensors",
)
DOWNLOAD_PATTERNS = [*REQUIRED_FILES, "preprocessor_config.json", "speech_tokenizer/*.json"]
_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


class CheckpointError(ValueError):
    """A checkpoint file is unreadable or does not match the model."""


def resolve_checkpoint(name_or_path: str | Path) -> Path:
    """Local folder as-is; otherwise a Hub repo id, downloaded (needed files only, with progress)."""
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        return check_files(path)
    text = str(name_or_path)
    if path.exists() or not _REPO_ID.match(text) or text.startswith((".", "/", "~")):
        raise FileNotFoundError(f"checkpoint folder not found: {name_or_path}")
    from huggingface_hub import snapshot_download  # network only when a repo id is given

    try:
        folder = snapshot_download(repo_id=text, allow_patterns=DOWNLOAD_PATTERNS)
    except Exception as error:  # the hub raises many types; keep the cause attached
        raise FileNotFoundError(
            f"{text!r} is not a local folder and could not be downloaded from the Hub: {error}"
        ) from error
    return check_files(Path(folder))


def check_files(folder: Path) -> Path:
    missing = [name for name in REQUIRED_FILES if not (folder / name).is_file()]
    if missing:
        raise FileNotFoundError(f"checkpoint {folder} is missing: {', '.join(missing)}")
    return folder


def load_safetensors(path: Path) -> dict[str, torch.Tensor]:
    if not path.is_file():
        raise FileNotFoundError(f"missing checkpoint file: {path}")
    try:
        return load_file(str(path), device="cpu")
    except (SafetensorError, OSError, ValueError, RuntimeError) as error:
        raise CheckpointError(
            f"{path}: corrupt or unreadable safetensors file ({error})"
        ) from error


def split_prefix(state: dict[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    """Entries under `prefix` with the prefix removed."""
    return {key[len(prefix) :]: value for key, value in state.items() if key.startswith(prefix)}


def load_strict(module: nn.Module, state: dict[str, torch.Tensor], where: str) -> None:
    """Copy `state` into `module`, casting to its dtype; every key and shape must match."""
    expected = module.state_dict()
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    if missing or unexpected:
        raise CheckpointError(
            f"{where}: state dict mismatch; missing {_preview(missing)}, "
            f"unexpected {_preview(unexpected)}"
        )
    for key, target in expected.items():
        if tuple(state[key].shape) != tuple(target.shape):
            raise CheckpointError(
                f"{where}: '{key}' has shape {tuple(state[key].shape)}, "
                f"the config implies {tuple(target.shape)}"
            )
    with torch.no_grad():
        for key, target in expected.items():
            target.copy_(state[key])


def _preview(keys: list[str], limit: int = 5) -> str:
    if not keys:
        return "none"
    more = f" (+{len(keys) - limit} more)" if len(keys) > limit else ""
    return ", ".join(keys[:limit]) + more


# ---------------------------------------------------------------- model parts
def _materialize(module: nn.Module, device: str | torch.device, dtype: torch.dtype) -> nn.Module:
    """Allocate a meta-built module's tensors (uninitialized) directly in `dtype` on `device`."""
    return module._apply(
        lambda t: torch.empty(
            t.shape, device=device, dtype=dtype if t.is_floating_point() else t.dtype
        )
    )


def _new_talker(config, device: str | torch.device, dtype: torch.dtype):
    from .talker import Talker

    with torch.device("meta"):
        talker = Talker(config.talker)
    _materialize(talker, device, dtype)
    talker.init_rope()
    return talker


def random_init_(module: nn.Module, seed: int, std: float = 0.02) -> None:
    """In-place init: weights ~ N(0, std), biases 0, norm weights 1 (cheap, no Python loops
    over elements)."""
    generator = torch.Generator(device="cpu").manual_seed(seed)
    with torch.no_grad():
        for name, param in module.named_parameters():
            if name.endswith("norm.weight") or name.endswith("layernorm.weight"):
                param.fill_(1.0)
            elif name.endswith(".bias"):
                param.zero_()
            elif param.device.type == "cpu":
                param.normal_(0.0, std, generator=generator)
            else:
                param.copy_(torch.randn(param.shape, generator=generator).mul_(std))


def build_talker(config, device: str | torch.device, dtype: torch.dtype, seed: int = 0):
    """Talker (with code predictor) of the config's real size, random weights."""
    talker = _new_talker(config, device, dtype)
    random_init_(talker, seed)
    return talker


def load_talker(config, state: dict[str, torch.Tensor], device, dtype: torch.dtype):
    """Talker from the `talker.`-prefixed part of model.safetensors (strict)."""
    allowed = ("talker.", "speaker_encoder.")
    stray = sorted(key for key in state if not key.startswith(allowed))
    if stray:
        raise CheckpointError(f"model.safetensors: unexpected keys {_preview(stray)}")
    talker = _new_talker(config, device, dtype)
    load_strict(talker, split_prefix(state, "talker."), "model.safetensors (talker)")
    return talker


def load_speaker_encoder(config, state: dict[str, torch.Tensor], device, dtype: torch.dtype):
    from .speaker_encoder import SpeakerEncoder, SpeakerEncoderConfig

    weights = split_prefix(state, "speaker_encoder.")
    if not weights:
        raise CheckpointError("model.safetensors has no speaker_encoder.* tensors (Base model?)")
    encoder_config = SpeakerEncoderConfig.from_dict(config.speaker_encoder)
    try:
        return SpeakerEncoder.from_state_dict(encoder_config, weights, device=device, dtype=dtype)
    except ValueError as error:
        raise CheckpointError(f"model.safetensors (speaker encoder): {error}") from error


def random_speaker_encoder(config, device, dtype: torch.dtype, seed: int = 0):
    """Speaker encoder of the config's size with random weights (benchmarks)."""
    from .speaker_encoder import SpeakerEncoder, SpeakerEncoderConfig

    torch.manual_seed(seed)
    encoder = SpeakerEncoder(SpeakerEncoderConfig.from_dict(config.speaker_encoder))
    return encoder.to(device=device, dtype=dtype).eval()


def random_speech_tokenizer(folder: Path, device, dtype: torch.dtype, seed: int = 0):
    """Codec built from speech_tokenizer/config.json with random weights (benchmarks)."""
    from .codec.config import load_speech_tokenizer_config
    from .codec.speech_tokenizer import SpeechTokenizer

    config = load_speech_tokenizer_config(folder)
    return SpeechTokenizer.from_config(config, device=device, dtype=dtype, seed=seed)


def load_speech_tokenizer(folder: Path, device, dtype: torch.dtype):
    from .codec.speech_tokenizer import SpeechTokenizer

    return SpeechTokenizer.from_folder(folder, device=device, dtype=dtype)
