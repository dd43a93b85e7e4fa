"""Configuration dataclasses read from a VoxCPM2 checkpoint's `config.json`.

The official package parses the file with pydantic (`VoxCPMConfig`): unknown keys are ignored
and missing optional keys take the pydantic defaults. We do the same with the same defaults
(spec voxcpm2.md section 3), and refuse values our code cannot run instead of guessing. Every
dimension, rate and layer count comes from the file; nothing here assumes the released sizes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config_json import Fields, read_json_object

ARCHITECTURE = "voxcpm2"
SUPPORTED_COND_TYPES = ("scale_bias", "scale_bias_init")  # same math: x * scale + bias


class ConfigError(ValueError):
    """config.json is missing a field or holds a value we cannot run."""


@dataclass(frozen=True)
class RopeScaling:
    """LongRoPE factors (`lm_config.rope_scaling`), inherited by every stack that has RoPE."""

    type: str
    long_factor: tuple[float, ...]
    short_factor: tuple[float, ...]
    original_max_position_embeddings: int

    @classmethod
    def from_dict(cls, section: Any, where: str = "lm_config.rope_scaling") -> RopeScaling:
        f = Fields(section, where, ConfigError)
        return cls(
            type=f.text("type"),
            long_factor=f.numbers("long_factor"),
            short_factor=f.numbers("short_factor"),
            original_max_position_embeddings=f.integer("original_max_position_embeddings"),
        )


@dataclass(frozen=True)
class MiniCPMConfig:
    """`lm_config` (official MiniCPM4Config): the text-semantic LM; the other stacks copy it."""

    hidden_size: int
    intermediate_size: int
    num_attention_heads: int
    num_key_value_heads: int
    num_hidden_layers: int
    head_dim: int  # kv_channels, or hidden_size // num_attention_heads when null
    rms_norm_eps: float
    rope_theta: float
    max_position_embeddings: int
    rope_scaling: RopeScaling
    vocab_size: int
    use_mup: bool
    scale_emb: float
    scale_depth: float
    dim_model_base: int
    bos_token_id: int
    eos_token_id: int

    @classmethod
    def from_dict(cls, section: Any, where: str = "lm_config") -> MiniCPMConfig:
        f = Fields(section, where, ConfigError)
        hidden = f.integer("hidden_size")
        heads = f.integer("num_attention_heads")
        kv_heads = f.integer("num_key_value_heads")
        if heads % kv_heads:
            raise ConfigError(f"{f.where}: {heads} attention heads not divisible by {kv_heads}")
        return cls(
            hidden_size=hidden,
            intermediate_size=f.integer("intermediate_size"),
            num_attention_heads=heads,
            num_key_value_heads=kv_heads,
            num_hidden_layers=f.integer("num_hidden_layers"),
            head_dim=f.optional_integer("kv_channels") or hidden // heads,
            rms_norm_eps=f.number("rms_norm_eps"),
            rope_theta=f.number("rope_theta"),
            max_position_embeddings=f.integer("max_position_embeddings"),
            rope_scaling=RopeScaling.from_dict(f.get("rope_scaling"), f"{f.where}.rope_scaling"),
            vocab_size=f.integer("vocab_size", minimum=0),
            use_mup=f.flag("use_mup", True),  # pydantic default: True
            scale_emb=f.number("scale_emb"),
            scale_depth=f.number("scale_depth"),
            dim_model_base=f.integer("dim_model_base"),
            bos_token_id=f.integer("bos_token_id", minimum=0),
            eos_token_id=f.integer("eos_token_id", minimum=0),
        )


@dataclass(frozen=True)
class LocalStackConfig:
    """`encoder_config` (LocEnc) or `dit_config` (LocDiT) geometry; the rest is lm_config's."""

    hidden_dim: int
    ffn_dim: int
    num_heads: int
    num_layers: int
    head_dim: int  # kv_channels, or hidden_dim // num_heads when null

    @classmethod
    def from_dict(cls, section: Any, where: str) -> LocalStackConfig:
        f = Fields(section, where, ConfigError)
        hidden = f.integer("hidden_dim", 1024)
        heads = f.integer("num_heads", 16)
        return cls(
            hidden_dim=hidden,
            ffn_dim=f.integer("ffn_dim", 4096),
            num_heads=heads,
            num_layers=f.integer("num_layers", 4),
            head_dim=f.optional_integer("kv_channels") or hidden // heads,
        )


@dataclass(frozen=True)
class DitConfig:
    stack: LocalStackConfig
    mean_mode: bool  # pydantic field `dit_mean_mode`; the release's "mean_mode" key is ignored
    solver: str
    inference_cfg_rate: float

    @classmethod
    def from_dict(cls, section: Any, where: str = "dit_config") -> DitConfig:
        f = Fields(section, where, ConfigError)
        cfm = f.section("cfm_config")
        solver = cfm.text("solver", "euler")
        if solver != "euler":
            raise ConfigError(f"{cfm.where}: unsupported solver {solver!r} (only 'euler')")
        return cls(
            stack=LocalStackConfig.from_dict(section, where),
            mean_mode=f.flag("dit_mean_mode", False),
            solver=solver,
            inference_cfg_rate=cfm.number("inference_cfg_rate", 1.0),
        )


@dataclass(frozen=True)
class AudioVAEConfig:
    """`audio_vae_config` (official AudioVAEConfig of audio_vae_v2.py, same defaults)."""

    encoder_dim: int = 128
    encoder_rates: tuple[int, ...] = (2, 5, 8, 8)
    latent_dim: int = 64
    decoder_dim: int = 2048
    decoder_rates: tuple[int, ...] = (8, 6, 5, 2, 2, 2)
    depthwise: bool = True
    sample_rate: int = 16000  # encoder input rate
    out_sample_rate: int = 48000  # decoder output rate, also its sample-rate condition
    sr_bin_boundaries: tuple[int, ...] | None = (20000, 30000, 40000)

    @property
    def hop_length(self) -> int:
        """Input samples per latent frame (encoder)."""
        return math.prod(self.encoder_rates)

    @property
    def decode_hop_length(self) -> int:
        """Output samples per latent frame (decoder): 1920 for the release."""
        return math.prod(self.decoder_rates)

    @classmethod
    def from_dict(cls, section: Any, where: str = "audio_vae_config") -> AudioVAEConfig:
        f = Fields(section, where, ConfigError)
        d = cls()
        if f.flag("use_noise_block", False):
            raise ConfigError(f"{f.where}: use_noise_block=true draws random noise; not supported")
        if f.flag("cond_out_layer", False):
            raise ConfigError(f"{f.where}: cond_out_layer=true is not supported")
        cond_type = f.get("cond_type", "scale_bias")
        if cond_type not in SUPPORTED_COND_TYPES:
            raise ConfigError(f"{f.where}: unsupported cond_type {cond_type!r}")
        encoder_dim = f.integer("encoder_dim", d.encoder_dim)
        encoder_rates = f.integers("encoder_rates", d.encoder_rates)
        latent_dim = (
            encoder_dim * 2 ** len(encoder_rates)  # the official fallback for null
            if f.get("latent_dim", d.latent_dim) is None
            else f.integer("latent_dim", d.latent_dim)
        )
        decoder_dim = f.integer("decoder_dim", d.decoder_dim)
        decoder_rates = f.integers("decoder_rates", d.decoder_rates)
        if decoder_dim % 2 ** len(decoder_rates):
            raise ConfigError(
                f"{f.where}: decoder_dim {decoder_dim} must be divisible by 2^{len(decoder_rates)}"
            )
        no_buckets = "sr_bin_boundaries" in f and f.get("sr_bin_boundaries") is None
        return cls(
            encoder_dim=encoder_dim,
            encoder_rates=encoder_rates,
            latent_dim=latent_dim,
            decoder_dim=decoder_dim,
            decoder_rates=decoder_rates,
            depthwise=f.flag("depthwise", d.depthwise),
            sample_rate=f.integer("sample_rate", d.sample_rate),
            out_sample_rate=f.integer("out_sample_rate", d.out_sample_rate),
            sr_bin_boundaries=None
            if no_buckets
            else f.integers("sr_bin_boundaries", d.sr_bin_boundaries),
        )


@dataclass(frozen=True)
class VoxCPM2Config:
    lm: MiniCPMConfig
    patch_size: int
    feat_dim: int
    residual_lm_num_layers: int
    residual_lm_no_rope: bool
    scalar_quantization_latent_dim: int
    scalar_quantization_scale: int
    encoder: LocalStackConfig
    dit: DitConfig
    audio_vae: AudioVAEConfig
    max_length: int
    dtype: str  # "bfloat16" in the release; parity work runs float32 (the VAE always does)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> VoxCPM2Config:
        f = Fields(data, "config.json", ConfigError)
        arch = f.text("architecture", "voxcpm").lower()  # official default: v1
        if arch != ARCHITECTURE:
            raise ConfigError(f"config.json: architecture {arch!r} is not {ARCHITECTURE!r}")
        vae_section = f.get("audio_vae_config", None)
        vae = AudioVAEConfig.from_dict(vae_section) if vae_section else AudioVAEConfig()
        feat_dim = f.integer("feat_dim", 64)
        if vae.latent_dim != feat_dim:
            raise ConfigError(
                f"config.json: feat_dim {feat_dim} != audio_vae_config.latent_dim {vae.latent_dim}"
            )
        return cls(
            lm=MiniCPMConfig.from_dict(f.get("lm_config")),
            patch_size=f.integer("patch_size", 4),
            feat_dim=feat_dim,
            residual_lm_num_layers=f.integer("residual_lm_num_layers", 8),
            residual_lm_no_rope=f.flag("residual_lm_no_rope", False),
            scalar_quantization_latent_dim=f.integer("scalar_quantization_latent_dim", 512),
            scalar_quantization_scale=f.integer("scalar_quantization_scale", 9),
            encoder=LocalStackConfig.from_dict(f.get("encoder_config"), "encoder_config"),
            dit=DitConfig.from_dict(f.get("dit_config")),
            audio_vae=vae,
            max_length=f.integer("max_length", 8192),
            dtype=f.text("dtype", "bfloat16"),
        )

    @classmethod
    def from_folder(cls, folder: str | Path) -> VoxCPM2Config:
        return cls.from_dict(read_json_object(Path(folder) / "config.json", ConfigError))
