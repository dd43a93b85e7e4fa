"""Strict loading of TADA's released folders (HumeAI/tada-1b or -3b-ml, HumeAI/tada-codec):
every tensor through the shared streamed loader (models/checkpoint.py), every key and shape
checked before anything is copied.

The only keys skipped are the codec attention's derived buffers (`CODEC_DERIVED_BUFFERS`:
`rope_freqs` and the (L, L) `_precomputed_mask`, persistent buffers of the official
LocalSelfAttention computed from constants; the mask is used only when no mask is passed, which
neither the encoder nor the decoder does). A tied model (Llama 3.2 1B: tie_word_embeddings) has
no `lm_head.weight` in its file, as `save_pretrained` writes it; `TadaLM` then reads the
embedding table.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from ..checkpoint import _Renamed, load_safetensors, load_strict
from .config import CodecStackConfig

WEIGHTS = "model.safetensors"
MODEL_FILES = ("config.json", WEIGHTS)
TOKENIZER_FILES = ("tokenizer.json",)
CODEC_FILES = tuple(
    f"{part}/{name}"
    for part in ("encoder", "decoder", "aligner")
    for name in ("config.json", WEIGHTS)
)
# the official tokenizer_name default (TadaForCausalLM.from_pretrained, AlignerConfig): gated
DEFAULT_TOKENIZER = "meta-llama/Llama-3.2-1B"


def resolve_folders(
    model: str | Path, codec: str | Path, tokenizer: str | Path | None = None
) -> tuple[Path, Path, Path]:
    """Hub ids or local folders -> (model, codec, tokenizer) folders, each checked for its files
    (models/checkpoint.resolve_checkpoint: the shared errors for no network, an unknown or
    gated repo, a missing file). The tokenizer is the model folder's tokenizer.json when it has
    one, else `tokenizer` (default the official meta-llama/Llama-3.2-1B, gated on the Hub)."""
    from ..checkpoint import resolve_checkpoint

    model_dir = resolve_checkpoint(
        model, MODEL_FILES, (*MODEL_FILES, *TOKENIZER_FILES, "tokenizer_config.json")
    )
    codec_dir = resolve_checkpoint(codec, CODEC_FILES, (*CODEC_FILES, "aligner/*.json"))
    if tokenizer is None and (model_dir / TOKENIZER_FILES[0]).is_file():
        return model_dir, codec_dir, model_dir
    tokenizer_dir = resolve_checkpoint(tokenizer or DEFAULT_TOKENIZER, TOKENIZER_FILES)
    return model_dir, codec_dir, tokenizer_dir


CODEC_DERIVED_BUFFERS = ("self_attn.rope_freqs", "self_attn._precomputed_mask")


def load_module(module: nn.Module, folder: Path, dropped_endings: tuple[str, ...] = ()) -> None:
    """Fill `module` strictly from `folder/model.safetensors` (less keys ending in
    `dropped_endings`) and set eval mode."""
    path = Path(folder) / WEIGHTS
    with load_safetensors(path) as file:
        kept = {key: key for key in file.shapes if not key.endswith(dropped_endings)}
        load_strict(module, _Renamed(file, kept), str(path))
    module.eval()


def load_decoder(codec: Path, dtype: torch.dtype = torch.float32):
    """The codec folder's `decoder/` as our TadaDecoder (weight norm folded, RoPE rows laid out
    for rotate-half)."""
    from .codec import TadaDecoder

    folder = Path(codec) / "decoder"
    decoder = TadaDecoder(CodecStackConfig.from_folder(folder, "decoder"))
    load_module(decoder, folder, CODEC_DERIVED_BUFFERS)
    return decoder.after_load().to(dtype)


def load_lm(model: Path, dtype: torch.dtype = torch.float32):
    """The model folder (HumeAI/tada-1b-like) as our TadaLM."""
    from .config import LMConfig
    from .lm import TadaLM

    lm = TadaLM(LMConfig.from_folder(model))
    load_module(lm, model)
    return lm.to(dtype)


def load_encoder(codec: Path, dtype: torch.dtype = torch.float32):
    """The codec folder's `encoder/` as our TadaEncoder; the wav encoder's base width (64 in the
    release, a constant of the official constructor) is read from its first conv's shape."""
    from safetensors import safe_open

    from .codec import TadaEncoder

    folder = Path(codec) / "encoder"
    with safe_open(str(folder / WEIGHTS), framework="pt") as file:
        first = "wav_encoder.block.0.parametrizations.weight.original1"
        width = file.get_slice(first).get_shape()[0] if first in file.keys() else 64
    encoder = TadaEncoder(CodecStackConfig.from_folder(folder, "encoder"), width)
    load_module(encoder, folder, CODEC_DERIVED_BUFFERS)
    return encoder.after_load().to(dtype)


def load_aligner(codec: Path, vocab: int, dtype: torch.dtype = torch.float32):
    """The codec folder's `aligner/` as our TadaAligner (`vocab`: the tokenizer's length, as
    the official sets the CTC head's size). The wav2vec2 config comes from
    `aligner/encoder_config.json` (the tiny checkpoints); the release fetches it from the Hub,
    which this loader does not do yet: a folder without it raises, naming the file."""
    from .aligner import WAV2VEC2_CONFIG, TadaAligner, Wav2Vec2Config

    folder = Path(codec) / "aligner"
    config_path = folder / WAV2VEC2_CONFIG
    if not config_path.is_file():
        raise FileNotFoundError(
            f"{config_path}: the aligner's wav2vec2 config (the release "
            "reads facebook/wav2vec2-large's config.json) is required"
        )
    aligner = TadaAligner(Wav2Vec2Config.from_file(config_path), vocab)
    load_module(aligner, folder)
    return aligner.after_load().to(dtype)
