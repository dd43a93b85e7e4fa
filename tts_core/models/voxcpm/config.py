"""Configuration dataclasses read from a VoxCPM2 checkpoint's `config.json`.

The official package parses the file with pydantic (`VoxCPMConfig`): unknown keys are ignored
and missing optional keys take the pydantic defaults. We do the same with the same defaults
(spec voxcpm2.md section 3), and refuse values our code cannot run instead of guessing. Every
dimension, rate and layer count comes from the file; nothing here assumes the released sizes.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ARCHITECTURE = "voxcpm2"
SUPPORTED_COND_TYPES = ("scale_bias", "scale_bias_init")  # same math: x * scale + bias


class ConfigError(ValueError):
    """config.json is missing a field or holds a value we cannot run."""


def _require(section: dict[str, Any], key: str, where: str) -> Any:
    if key not in section:
        raise ConfigError(f"{where}: required field '{key}' is missing")
    return section[key]


def _int(section: dict[str, Any], key: str, where: str, default: int | None = None) -> int:
    value = section.get(key, default) if default is not None else _require(section, key, where)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError(f"{where}: '{key}' must be a positive integer, got {value!r}")
    return value


def _opt_int(section: dict[str, Any], key: str, where: str) -> int | None:
    return None if section.get(key) is None else _int(section, key, where)


def _bool(section: dict[str, Any], key: str, where: str, default: bool) -> bool:
    value = section.get(key, default)
    if not isinstance(value, bool):
        raise ConfigError(f"{where}: '{key}' must be true or false, got {value!r}")
    return value


def _float(section: dict[str, Any], key: str, where: str, default: float | None = None) -> float:
    value = section.get(key, default) if default is not None else _require(section, key, where)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{where}: '{key}' must be a number, got {value!r}")
    return float(value)


def _int_list(section: dict[str, Any], key: str, where: str, default: list[int]) -> tuple[int, ...]:
    value = section.get(key, default)
    if not isinstance(value, list) or not value:
        raise ConfigError(f"{where}: '{key}' must be a non-empty list, got {value!r}")
    return tuple(_int({key: v}, key, where) for v in value)


def _float_list(section: dict[str, Any], key: str, where: str) -> tuple[float, ...]:
    value = _require(section, key, where)
    if not isinstance(value, list):
        raise ConfigError(f"{where}: '{key}' must be a list, got {type(value).__name__}")
    return tuple(_float({key: v}, key, where) for v in value)


@dataclass(frozen=True)
class RopeScaling:
    """LongRoPE factors (`lm_config.rope_scaling`), inherited by every stack that has RoPE."""

    type: str
    long_factor: tuple[float, ...]
    short_factor: tuple[float, ...]
    original_max_position_embeddings: int

    @classmethod
    def from_dict(cls, section: Any, where: str) -> RopeScaling:
        if not isinstance(section, dict):
            raise ConfigError(f"{where}: must be an object, got {section!r}")
        return cls(
            type=str(_require(section, "type", where)),
            long_factor=_float_list(section, "long_factor", where),
            short_factor=_float_list(section, "short_factor", where),
            original_max_position_embeddings=_int(
                section, "original_max_position_embeddings", where
            ),
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
    def from_dict(cls, section: dict[str, Any], where: str = "lm_config") -> MiniCPMConfig:
        hidden = _int(section, "hidden_size", where)
        heads = _int(section, "num_attention_heads", where)
        kv_heads = _int(section, "num_key_value_heads", where)
        if heads % kv_heads:
            raise ConfigError(f"{where}: {heads} attention heads not divisible by {kv_heads}")
        head_dim = _opt_int(section, "kv_channels", where) or hidden // heads
        vocab = _require(section, "vocab_size", where)
        if isinstance(vocab, bool) or not isinstance(vocab, int) or vocab < 0:
            raise ConfigError(f"{where}: 'vocab_size' must be an integer >= 0, got {vocab!r}")
        return cls(
            hidden_size=hidden,
            intermediate_size=_int(section, "intermediate_size", where),
            num_attention_heads=heads,
            num_key_value_heads=kv_heads,
            num_hidden_layers=_int(section, "num_hidden_layers", where),
            head_dim=head_dim,
            rms_norm_eps=_float(section, "rms_norm_eps", where),
            rope_theta=_float(section, "rope_theta", where),
            max_position_embeddings=_int(section, "max_position_embeddings", where),
            rope_scaling=RopeScaling.from_dict(
                _require(section, "rope_scaling", where), f"{where}.rope_scaling"
            ),
            vocab_size=vocab,
            use_mup=_bool(section, "use_mup", where, True),  # pydantic default: True
            scale_emb=_float(section, "scale_emb", where),
            scale_depth=_float(section, "scale_depth", where),
            dim_model_base=_int(section, "dim_model_base", where),
            bos_token_id=int(_require(section, "bos_token_id", where)),
            eos_token_id=int(_require(section, "eos_token_id", where)),
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
    def from_dict(cls, section: dict[str, Any], where: str) -> LocalStackConfig:
        hidden = _int(section, "hidden_dim", where, 1024)
        heads = _int(section, "num_heads", where, 16)
        return cls(
            hidden_dim=hidden,
            ffn_dim=_int(section, "ffn_dim", where, 4096),
            num_heads=heads,
            num_layers=_int(section, "num_layers", where, 4),
            head_dim=_opt_int(section, "kv_channels", where) or hidden // heads,
        )


@dataclass(frozen=True)
class DitConfig:
    stack: LocalStackConfig
    mean_mode: bool  # pydantic field `dit_mean_mode`; the release's "mean_mode" key is ignored
    solver: str
    inference_cfg_rate: float

    @classmethod
    def from_dict(cls, section: dict[str, Any], where: str = "dit_config") -> DitConfig:
        cfm = _require(section, "cfm_config", where)
        if not isinstance(cfm, dict):
            raise ConfigError(f"{where}.cfm_config: must be an object")
        solver = str(cfm.get("solver", "euler"))
        if solver != "euler":
            raise ConfigError(f"{where}.cfm_config: unsupported solver {solver!r} (only 'euler')")
        return cls(
            stack=LocalStackConfig.from_dict(section, where),
            mean_mode=_bool(section, "dit_mean_mode", where, False),
            solver=solver,
            inference_cfg_rate=_float(cfm, "inference_cfg_rate", f"{where}.cfm_config", 1.0),
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
    def from_dict(cls, section: dict[str, Any], where: str = "audio_vae_config") -> AudioVAEConfig:
        d = cls()
        if _bool(section, "use_noise_block", where, False):
            raise ConfigError(f"{where}: use_noise_block=true draws random noise; not supported")
        if _bool(section, "cond_out_layer", where, False):
            raise ConfigError(f"{where}: cond_out_layer=true is not supported")
        cond_type = section.get("cond_type", "scale_bias")
        if cond_type not in SUPPORTED_COND_TYPES:
            raise ConfigError(f"{where}: unsupported cond_type {cond_type!r}")
        encoder_dim = _int(section, "encoder_dim", where, d.encoder_dim)
        encoder_rates = _int_list(section, "encoder_rates", where, list(d.encoder_rates))
        latent = section.get("latent_dim", d.latent_dim)
        latent_dim = (
            encoder_dim * 2 ** len(encoder_rates)  # the official fallback for null
            if latent is None
            else _int(section, "latent_dim", where)
        )
        decoder_dim = _int(section, "decoder_dim", where, d.decoder_dim)
        decoder_rates = _int_list(section, "decoder_rates", where, list(d.decoder_rates))
        if decoder_dim % 2 ** len(decoder_rates):
            raise ConfigError(
                f"{where}: decoder_dim {decoder_dim} must be divisible by 2^{len(decoder_rates)}"
            )
        boundaries = section.get("sr_bin_boundaries", list(d.sr_bin_boundaries or ()))
        return cls(
            encoder_dim=encoder_dim,
            encoder_rates=encoder_rates,
            latent_dim=latent_dim,
            decoder_dim=decoder_dim,
            decoder_rates=decoder_rates,
            depthwise=_bool(section, "depthwise", where, d.depthwise),
            sample_rate=_int(section, "sample_rate", where, d.sample_rate),
            out_sample_rate=_int(section, "out_sample_rate", where, d.out_sample_rate),
            sr_bin_boundaries=None
            if boundaries is None
            else _int_list({"b": boundaries}, "b", f"{where}.sr_bin_boundaries", []),
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
        arch = str(data.get("architecture", "voxcpm")).lower()  # official default: v1
        if arch != ARCHITECTURE:
            raise ConfigError(f"config.json: architecture {arch!r} is not {ARCHITECTURE!r}")
        for key in ("lm_config", "encoder_config", "dit_config"):
            if not isinstance(_require(data, key, "config.json"), dict):
                raise ConfigError(f"config.json: '{key}' must be an object")
        vae_section = data.get("audio_vae_config")
        vae = AudioVAEConfig.from_dict(vae_section) if vae_section else AudioVAEConfig()
        feat_dim = _int(data, "feat_dim", "config.json", 64)
        if vae.latent_dim != feat_dim:
            raise ConfigError(
                f"config.json: feat_dim {feat_dim} != audio_vae_config.latent_dim {vae.latent_dim}"
            )
        return cls(
            lm=MiniCPMConfig.from_dict(data["lm_config"]),
            patch_size=_int(data, "patch_size", "config.json", 4),
            feat_dim=feat_dim,
            residual_lm_num_layers=_int(data, "residual_lm_num_layers", "config.json", 8),
            residual_lm_no_rope=_bool(data, "residual_lm_no_rope", "config.json", False),
            scalar_quantization_latent_dim=_int(
                data, "scalar_quantization_latent_dim", "config.json", 512
            ),
            scalar_quantization_scale=_int(data, "scalar_quantization_scale", "config.json", 9),
            encoder=LocalStackConfig.from_dict(data["encoder_config"], "encoder_config"),
            dit=DitConfig.from_dict(data["dit_config"]),
            audio_vae=vae,
            max_length=_int(data, "max_length", "config.json", 8192),
            dtype=str(data.get("dtype", "bfloat16")),
        )

    @classmethod
    def from_folder(cls, folder: str | Path) -> VoxCPM2Config:
        path = Path(folder) / "config.json"
        if not path.is_file():
            raise ConfigError(f"{path}: not found")
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{path}: not valid JSON ({exc})") from exc
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: top level must be an object")
        return cls.from_dict(data)
