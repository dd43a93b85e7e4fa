"""TADA's configs, read from the released folders' config.json files (config_json.Fields).

* `LMConfig`: the model folder's `config.json` (hume-tada's `TadaConfig(LlamaConfig)`): the Llama
  3 backbone's sizes and RoPE scaling, and TADA's own fields (acoustic_dim, num_time_classes,
  shift_acoustic, head_layers, head_ffn_ratio, bottleneck_dim, acoustic_mean/std). The official
  class defaults fill a missing TADA field.
* `CodecStackConfig`: the codec's `decoder/config.json` or `encoder/config.json`; `save_pretrained`
  writes only the fields that differ from the class attributes, so a missing field takes the
  official class attribute (DecoderConfig / EncoderConfig, copied below).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from ..config_json import Fields, read_json_object


class TadaConfigError(ValueError):
    """A TADA config.json is missing a field or holds a wrong value."""


@dataclass(frozen=True)
class Llama3Rope:
    """`rope_scaling` of rope_type "llama3" (Llama 3.2: factor 32, 1, 4, 8192)."""

    factor: float
    low_freq_factor: float
    high_freq_factor: float
    original_max_position_embeddings: int


@dataclass(frozen=True)
class LMConfig:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    rope_scaling: Llama3Rope | None
    tie_word_embeddings: bool
    acoustic_dim: int = 512
    num_time_classes: int = 1024
    shift_acoustic: int = 5
    head_layers: int = 4
    head_ffn_ratio: float = 3.0
    bottleneck_dim: int | None = None
    acoustic_mean: float = 0.0
    acoustic_std: float = 1.5

    @property
    def num_time_bits(self) -> int:
        """Bits of one Gray-coded duration: ceil(log2(num_time_classes)) (10 for 1024)."""
        return math.ceil(math.log2(self.num_time_classes))

    @property
    def latent_size(self) -> int:
        """The flow head's vector: acoustic features, then two Gray-coded durations."""
        return self.acoustic_dim + 2 * self.num_time_bits

    @property
    def head_hidden(self) -> int:
        return self.hidden_size if self.bottleneck_dim is None else self.bottleneck_dim

    @classmethod
    def from_folder(cls, folder: Path) -> LMConfig:
        path = Path(folder) / "config.json"
        f = Fields(read_json_object(path, TadaConfigError), str(path), TadaConfigError)
        if f.text("diffusion_head_type", "vibevoice") != "vibevoice":
            raise TadaConfigError(f"{path}: only the 'vibevoice' flow head exists in hume-tada")
        heads = f.integer("num_attention_heads")
        hidden = f.integer("hidden_size")
        scaling = f.get("rope_scaling", None)
        rope = None
        if scaling is not None:
            s = Fields(scaling, f"{path}.rope_scaling", TadaConfigError)
            kind = s.text("rope_type", s.get("type", "default"))
            if kind != "llama3":
                raise TadaConfigError(f"{path}: rope_scaling type {kind!r} (expected 'llama3')")
            rope = Llama3Rope(
                s.number("factor"),
                s.number("low_freq_factor"),
                s.number("high_freq_factor"),
                s.integer("original_max_position_embeddings"),
            )
        return cls(
            vocab_size=f.integer("vocab_size"),
            hidden_size=hidden,
            intermediate_size=f.integer("intermediate_size"),
            num_hidden_layers=f.integer("num_hidden_layers"),
            num_attention_heads=heads,
            num_key_value_heads=f.integer("num_key_value_heads", heads),
            head_dim=f.get("head_dim", None) or hidden // heads,
            rms_norm_eps=f.number("rms_norm_eps", 1e-6),
            rope_theta=f.number("rope_theta", 10000.0),
            rope_scaling=rope,
            tie_word_embeddings=f.flag("tie_word_embeddings", False),
            acoustic_dim=f.integer("acoustic_dim", 512),
            num_time_classes=f.integer("num_time_classes", 1024),
            shift_acoustic=f.integer("shift_acoustic", 5, minimum=0),
            head_layers=f.integer("head_layers", 4),
            head_ffn_ratio=f.number("head_ffn_ratio", 3.0),
            bottleneck_dim=f.optional_integer("bottleneck_dim"),
            acoustic_mean=f.number("acoustic_mean", 0.0),
            acoustic_std=f.number("acoustic_std", 1.5),
        )


@dataclass(frozen=True)
class CodecStackConfig:
    """hume-tada's DecoderConfig / EncoderConfig (the class attributes are the defaults)."""

    embed_dim: int = 512
    hidden_dim: int = 1024
    num_attn_layers: int = 6
    num_attn_heads: int = 8
    attn_dim_feedforward: int = 4096
    wav_decoder_channels: int = 1536  # decoder only
    strides: tuple[int, ...] = (4, 4, 5, 6)  # decoder (4, 4, 5, 6); encoder (6, 5, 4, 4)
    block_attention: str = "v2"
    std: float = 0.5  # encoder only: the N(0, std^2) noise at token frames
    acoustic_mean: float = 0.0  # encoder only
    acoustic_std: float = 1.5  # encoder only

    @classmethod
    def from_folder(cls, folder: Path, part: str) -> CodecStackConfig:
        """`part` "decoder" or "encoder": the subfolder, and its official strides."""
        path = Path(folder) / "config.json"
        f = Fields(read_json_object(path, TadaConfigError), str(path), TadaConfigError)
        strides = (4, 4, 5, 6) if part == "decoder" else (6, 5, 4, 4)
        config = cls(
            embed_dim=f.integer("embed_dim", 512),
            hidden_dim=f.integer("hidden_dim", 1024),
            num_attn_layers=f.integer("num_attn_layers", 6),
            num_attn_heads=f.integer("num_attn_heads", 8),
            attn_dim_feedforward=f.integer("attn_dim_feedforward", 4096),
            wav_decoder_channels=f.integer("wav_decoder_channels", 1536),
            strides=f.integers("strides", list(strides)),
            block_attention=f.text("block_attention", "v2"),
            std=f.number("std", 0.5),
            acoustic_mean=f.number("acoustic_mean", 0.0),
            acoustic_std=f.number("acoustic_std", 1.5),
        )
        if config.block_attention != "v2":
            raise TadaConfigError(
                f"{path}: block_attention {config.block_attention!r} "
                "(the released codec uses 'v2', the only one built here)"
            )
        if config.hidden_dim % config.num_attn_heads:
            raise TadaConfigError(f"{path}: hidden_dim not divisible by num_attn_heads")
        return config
