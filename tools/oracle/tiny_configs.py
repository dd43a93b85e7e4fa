"""Tiny-checkpoint configs: the released JSON files with only their size fields shrunk.

Every key of the released JSON is kept (same nesting, same order); only widths, depths and
window sizes change, so a loader tested on these files is tested on the real schema. The
speaker-encoder widths are the one addition: the release leaves them to the class defaults
(ECAPA 512/1536 channels, several MB), so the tiny configs write them out explicitly with
the official `Qwen3TTSSpeakerEncoderConfig` argument names.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from pathlib import Path

REFERENCE = Path(__file__).resolve().parents[2] / "assets/checkpoints/Qwen3-TTS-12Hz-0.6B-Base"
COPIED_FILES = (
    "generation_config.json",
    "preprocessor_config.json",
    "tokenizer_config.json",
    "vocab.json",
    "merges.txt",
)
# ModelScope metadata (76 B in the release); no loader reads it. Stand-in content.
SPEECH_TOKENIZER_CONFIGURATION = {
    "framework": "pytorch",
    "task": "audio-tokenizer",
    "allow_remote": True,
}


@dataclass(frozen=True)
class TinySpec:
    """Sizes of one tiny checkpoint (talker, code predictor, speaker encoder, codec windows)."""

    name: str
    model_size: str  # "0b6" / "1b7": what the checkpoint imitates
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    text_hidden: int
    cp_hidden: int
    cp_layers: int
    cp_heads: int
    cp_kv_heads: int
    cp_head_dim: int
    cp_intermediate: int
    spk_channels: int
    decoder_sliding_window: int
    encoder_sliding_window: int
    seed: int


TINY_A = TinySpec(
    name="qwen3-tiny-a",
    model_size="0b6",
    hidden=16,
    layers=2,
    heads=4,
    kv_heads=2,
    head_dim=16,
    intermediate=48,
    text_hidden=4,
    cp_hidden=16,
    cp_layers=2,
    cp_heads=4,
    cp_kv_heads=2,
    cp_head_dim=16,
    cp_intermediate=48,
    spk_channels=32,
    decoder_sliding_window=72,
    encoder_sliding_window=250,
    seed=1234,
)
TINY_B = TinySpec(
    name="qwen3-tiny-b",
    model_size="1b7",
    hidden=24,
    layers=3,
    heads=2,
    kv_heads=1,
    head_dim=8,
    intermediate=40,
    text_hidden=4,
    cp_hidden=16,
    cp_layers=1,
    cp_heads=4,
    cp_kv_heads=4,
    cp_head_dim=8,
    cp_intermediate=32,
    spk_channels=16,
    decoder_sliding_window=8,
    encoder_sliding_window=16,
    seed=5678,
)
SPECS = {spec.name: spec for spec in (TINY_A, TINY_B)}


def _load(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def _mrope_section(head_dim: int) -> list[int]:
    # Three sections summing to head_dim / 2 (released: [24, 20, 20] for 128).
    half = head_dim // 2
    rest = half // 3
    return [half - 2 * rest, rest, rest]


def model_config(spec: TinySpec) -> dict:
    """Top-level config.json for `spec`, from the released 0.6B-Base file."""
    cfg = copy.deepcopy(_load(REFERENCE / "config.json"))
    cfg["tts_model_size"] = spec.model_size
    spk = cfg["speaker_encoder_config"]
    spk["enc_dim"] = spec.hidden
    c = spec.spk_channels
    spk.update(
        enc_channels=[c, c, c, c, 3 * c], enc_attention_channels=c // 2, enc_se_channels=c // 2
    )
    talker = cfg["talker_config"]
    talker.update(
        hidden_size=spec.hidden,
        num_hidden_layers=spec.layers,
        num_attention_heads=spec.heads,
        num_key_value_heads=spec.kv_heads,
        head_dim=spec.head_dim,
        intermediate_size=spec.intermediate,
        text_hidden_size=spec.text_hidden,
    )
    talker["rope_scaling"]["mrope_section"] = _mrope_section(spec.head_dim)
    cp = talker["code_predictor_config"]
    cp.update(
        hidden_size=spec.cp_hidden,
        num_hidden_layers=spec.cp_layers,
        num_attention_heads=spec.cp_heads,
        num_key_value_heads=spec.cp_kv_heads,
        head_dim=spec.cp_head_dim,
        intermediate_size=spec.cp_intermediate,
        layer_types=["full_attention"] * spec.cp_layers,
    )
    return cfg


def speech_tokenizer_config(spec: TinySpec) -> dict:
    """speech_tokenizer/config.json: shrunk widths; both tiny checkpoints share the weights."""
    cfg = copy.deepcopy(_load(REFERENCE / "speech_tokenizer" / "config.json"))
    dec = cfg["decoder_config"]
    dec.update(
        latent_dim=32,
        codebook_dim=8,
        decoder_dim=64,
        hidden_size=32,
        intermediate_size=64,
        head_dim=8,
        num_attention_heads=4,
        num_key_value_heads=4,
        num_hidden_layers=2,
        semantic_codebook_size=4096,
        vector_quantization_hidden_dimension=8,
        sliding_window=spec.decoder_sliding_window,
    )
    enc = cfg["encoder_config"]
    # 16-d codebooks, 16 quantizers: in fewer dimensions every RVQ stage removes most of the
    # residual, so deep stages would pick codes from float rounding noise.
    enc.update(
        codebook_dim=16,
        head_dim=8,
        hidden_size=32,
        intermediate_size=64,
        num_attention_heads=4,
        num_key_value_heads=4,
        num_filters=4,
        num_hidden_layers=2,
        num_quantizers=16,
        upsample_groups=32,
        vector_quantization_hidden_dimension=16,
        sliding_window=spec.encoder_sliding_window,
    )
    return cfg


def speech_tokenizer_preprocessor() -> dict:
    return _load(REFERENCE / "speech_tokenizer" / "preprocessor_config.json")


def write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


ADDED_KEYS = {
    "speaker_encoder_config.enc_channels",
    "speaker_encoder_config.enc_attention_channels",
    "speaker_encoder_config.enc_se_channels",
}


def schema_differences(released: dict, tiny: dict, prefix: str = "") -> list[str]:
    """Keys present in one JSON but not the other (dotted paths), minus ADDED_KEYS."""
    out = []
    for key in sorted(set(released) | set(tiny)):
        path = f"{prefix}{key}"
        if key not in tiny or (key not in released and path not in ADDED_KEYS):
            out.append(path)
        elif isinstance(released.get(key), dict) and isinstance(tiny[key], dict):
            out += schema_differences(released[key], tiny[key], f"{path}.")
    return out
