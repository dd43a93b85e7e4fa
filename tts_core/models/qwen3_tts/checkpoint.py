"""Qwen3-TTS's checkpoint: its files, and its modules built on the generic loader
(tts_core/models/checkpoint.py: folder or Hub repo id, safetensors streamed tensor by tensor,
no state dict held; the codec decoder is allocated float32 first, see load_speech_tokenizer).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import torch
from torch import nn

from .. import checkpoint as generic
from ..checkpoint import (  # re-exported: this model's loaders and tests use them by this path
    STREAM_WINDOW_BYTES,
    CheckpointError,
    Required,
    SafetensorsFile,
    TensorSource,
    _fill,
    _materialize,
    _preview,
    _Renamed,
    _storage_free_build,
    as_source,
    check_files,
    check_strict,
    load_strict,
    under,
)
from ..state_check import mismatches, shapes_of

__all__ = [
    "STREAM_WINDOW_BYTES",
    "CheckpointError",
    "SafetensorsFile",
    "_storage_free_build",
    "check_files",
    "load_strict",
    "resolve_checkpoint",
]

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


def resolve_checkpoint(
    name_or_path: str | Path,
    required: Required = REQUIRED_FILES,
    patterns: Sequence[str] | None = None,
) -> Path:
    """models.checkpoint.resolve_checkpoint with Qwen3-TTS's files as the default (and its
    download patterns: the required files plus the processor and tokenizer configs)."""
    if patterns is None and required is REQUIRED_FILES:
        patterns = DOWNLOAD_PATTERNS
    return generic.resolve_checkpoint(name_or_path, required, patterns)


def _meta_talker(config):
    """The talker (with code predictor) built storage-free on the meta device."""
    from .talker import Talker

    with torch.device("meta"):
        return Talker(config.talker)


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
    talker = _materialize(_meta_talker(config), device, dtype)
    talker.init_rope()
    random_init_(talker, seed)
    return talker


_TALKER_WHERE = "model.safetensors (talker)"


def check_model_weights(config, state: Mapping[str, torch.Tensor] | TensorSource) -> None:
    """Every check load_talker and load_speaker_encoder make, in their order, on names and
    shapes only: no tensor data is read and no weight memory allocated."""
    source = _talker_weights(state)
    check_strict(_meta_talker(config), source, _TALKER_WHERE)
    if config.tts_model_type == "base":
        _checked_speaker_encoder(config, state)
    else:
        _no_speaker_encoder(config, state)


def _talker_weights(state: Mapping[str, torch.Tensor] | TensorSource) -> TensorSource:
    """The `talker.` part; any other key is an error except, in a Base checkpoint, the
    speaker encoder's (the official builds it for `tts_model_type` "base" only)."""
    source = as_source(state)
    allowed = ("talker.", "speaker_encoder.")
    stray = sorted(key for key in source.shapes if not key.startswith(allowed))
    if stray:
        raise CheckpointError(f"model.safetensors: unexpected keys {_preview(stray)}")
    return under(source, "talker.")


def _no_speaker_encoder(config, state: Mapping[str, torch.Tensor] | TensorSource) -> None:
    """A CustomVoice / VoiceDesign checkpoint holds no speaker encoder (strict keys)."""
    stray = sorted(under(state, "speaker_encoder.").shapes)
    if stray:
        raise CheckpointError(
            f"model.safetensors: unexpected speaker_encoder.* keys in a "
            f"{config.tts_model_type!r} checkpoint (only 'base' has a speaker encoder): "
            f"{_preview(['speaker_encoder.' + k for k in stray])}"
        )


def load_talker(
    config,
    state: Mapping[str, torch.Tensor] | TensorSource,
    device,
    dtype,
    drop: Callable[[nn.Module], None] | None = None,
):
    """Talker from the `talker.`-prefixed part of model.safetensors (strict), streamed when
    `state` is an open SafetensorsFile.

    `drop` is called on the storage-free talker once every key and shape has been checked,
    before any weight is allocated: the modules it takes out are neither allocated nor read
    (quant/store.py: the float projections a saved int8 model replaces)."""
    source = _talker_weights(state)
    talker = _meta_talker(config)
    check_strict(talker, source, _TALKER_WHERE)
    if drop is not None:
        drop(talker)
    _materialize(talker, device, dtype)
    talker.init_rope()
    _fill(talker, source)
    return talker


def _checked_speaker_encoder(config, state: Mapping[str, torch.Tensor] | TensorSource):
    """(storage-free encoder, its weights): the checks and messages of
    `SpeakerEncoder.from_state_dict`, on names and shapes."""
    from .speaker_encoder import SpeakerEncoder, SpeakerEncoderConfig

    source = under(state, "speaker_encoder.")
    if not source.shapes:
        raise CheckpointError("model.safetensors has no speaker_encoder.* tensors (Base model?)")
    encoder_config = SpeakerEncoderConfig.from_dict(config.speaker_encoder)
    with _storage_free_build():
        encoder = SpeakerEncoder(encoder_config)
    # from_state_dict strips a further `speaker_encoder.` prefix from the keys; so does this.
    source = _Renamed(source, {key.removeprefix("speaker_encoder."): key for key in source.shapes})
    problems = mismatches(shapes_of(encoder.state_dict()), source.shapes)
    if problems:
        raise CheckpointError(
            "model.safetensors (speaker encoder): speaker encoder weights do not match the "
            "config: " + "; ".join(problems)
        )
    return encoder, source


def load_speaker_encoder(
    config, state: Mapping[str, torch.Tensor] | TensorSource, device, dtype: torch.dtype
):
    """Speaker encoder from the `speaker_encoder.` part of model.safetensors (as
    `SpeakerEncoder.from_state_dict`, but built storage-free and streamed); None for a
    CustomVoice / VoiceDesign checkpoint, which has none."""
    if config.tts_model_type != "base":
        _no_speaker_encoder(config, state)
        return None
    encoder, source = _checked_speaker_encoder(config, state)
    _materialize(encoder, device, dtype)
    _fill(encoder, source)
    return encoder.eval()


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
    """Codec from `speech_tokenizer/` (config.json + model.safetensors), streamed: the checks,
    errors and result (bit for bit) of `SpeechTokenizer.from_folder`, without its whole-file
    state dict and its float32 copy of the encoder."""
    from .codec.config import load_speech_tokenizer_config
    from .codec.speech_tokenizer import WEIGHTS_FILE, CodecCheckpointError, SpeechTokenizer

    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"speech tokenizer folder not found: {folder}")
    config = load_speech_tokenizer_config(folder)
    with _storage_free_build():
        model = SpeechTokenizer(config)
    path = folder / WEIGHTS_FILE
    if not path.is_file():
        raise FileNotFoundError(f"codec weights not found: {path}")
    with SafetensorsFile(
        path,
        corrupt=lambda error: CodecCheckpointError(
            f"cannot read {path} (corrupt or not safetensors): {error}"
        ),
    ) as weights:
        problems = mismatches(shapes_of(model.state_dict()), weights.shapes)
        if problems:
            raise CodecCheckpointError(f"{path}: state dict mismatch; " + "; ".join(problems))
        # Each part is allocated in the dtype from_folder holds it in when it calls `finish`:
        # the decoder wide (the default dtype its constructor uses: `finish` derives the
        # effective codebooks and SnakeBeta exps from the wide weights, then rounds each once,
        # converting tensor by tensor), the encoder directly in `dtype` (`finish` casts it
        # before deriving). from_pretrained loads the codec first, while little else is
        # resident, so the wide decoder does not raise the peak.
        _materialize(model, device, dtype)
        _materialize(model.decoder, device, torch.get_default_dtype())
        _fill(model, weights)
    return model.finish(device, dtype)  # derived (non-persistent) buffers, then the dtype
