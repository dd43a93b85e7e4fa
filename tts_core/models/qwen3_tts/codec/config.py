"""Configuration of the 12 Hz speech tokenizer, read from `speech_tokenizer/config.json`.

Every value comes from the JSON: the official Python classes have defaults that do not match the
released checkpoint (decoder hidden 1024 / FFN 3072 instead of 512 / 1024), so a missing field is an
error here, never a silent default.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...config_json import Fields, read_json_object


class CodecConfigError(ValueError):
    """The speech-tokenizer config is missing, unreadable or malformed."""


@dataclass(frozen=True)
class CodecDecoderConfig:
    """`decoder_config`: RVQ decode -> pre_conv -> sliding-window transformer -> upsamplers."""

    codebook_size: int
    codebook_dim: int  # RVQ input/output width; codebook vectors are codebook_dim // 2 wide
    num_quantizers: int
    num_semantic_quantizers: int
    latent_dim: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    sliding_window: int
    rope_theta: float
    rms_norm_eps: float
    hidden_act: str
    attention_bias: bool
    upsampling_ratios: tuple[int, ...]
    upsample_rates: tuple[int, ...]
    decoder_dim: int

    @property
    def vector_dim(self) -> int:
        # The official quantizer is built with dimension=codebook_dim // 2.
        return self.codebook_dim // 2

    @property
    def samples_per_frame(self) -> int:
        return math.prod(self.upsampling_ratios) * math.prod(self.upsample_rates)

    def validate(self) -> None:
        if self.hidden_act != "silu":
            raise CodecConfigError(
                f"decoder_config.hidden_act: only 'silu' is supported, got {self.hidden_act!r}"
            )
        if self.num_attention_heads % self.num_key_value_heads:
            raise CodecConfigError(
                "decoder_config: num_attention_heads must be a multiple of num_key_value_heads"
            )
        if not 0 < self.num_semantic_quantizers < self.num_quantizers:
            raise CodecConfigError(
                "decoder_config: need 0 < num_semantic_quantizers < num_quantizers"
            )
        if self.decoder_dim % 2 ** len(self.upsample_rates):
            raise CodecConfigError(
                "decoder_config: decoder_dim must halve cleanly at every upsample rate"
            )
        if self.sliding_window < 1:
            raise CodecConfigError("decoder_config.sliding_window must be >= 1")


@dataclass(frozen=True)
class MimiEncoderConfig:
    """`encoder_config`: a Mimi (HF `MimiConfig`) encoder half."""

    sampling_rate: int
    frame_rate: float  # JSON key `_frame_rate`
    audio_channels: int
    num_filters: int
    kernel_size: int
    residual_kernel_size: int
    last_kernel_size: int
    num_residual_layers: int
    compress: int
    dilation_growth_rate: int
    upsampling_ratios: tuple[int, ...]
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    hidden_act: str
    norm_eps: float
    rope_theta: float
    sliding_window: int
    num_quantizers: int
    num_semantic_quantizers: int
    codebook_size: int
    codebook_dim: int
    vector_quantization_hidden_dimension: int
    pad_mode: str
    use_causal_conv: bool
    use_conv_shortcut: bool
    attention_bias: bool

    @property
    def seanet_rate(self) -> int:
        """Frame rate after the SEANet strides (Mimi's `encodec_frame_rate`)."""
        return math.ceil(self.sampling_rate / math.prod(self.upsampling_ratios))

    @property
    def downsample_kernel(self) -> int:
        # MimiModel: kernel 2 * int(encodec_frame_rate / frame_rate), stride 2.
        return 2 * int(self.seanet_rate / self.frame_rate)

    def validate(self) -> None:
        checks = [
            (self.hidden_act == "gelu", f"hidden_act must be 'gelu', got {self.hidden_act!r}"),
            (self.audio_channels == 1, "only mono (audio_channels 1) is supported"),
            (self.use_causal_conv, "only causal convs (use_causal_conv true) are supported"),
            (not self.use_conv_shortcut, "use_conv_shortcut true is not supported"),
            (self.pad_mode in ("constant", "replicate"), f"unsupported pad_mode {self.pad_mode!r}"),
            (self.seanet_rate != self.frame_rate, "a downsample stage is required (12.5 Hz codes)"),
            (0 < self.num_semantic_quantizers < self.num_quantizers, "bad num_semantic_quantizers"),
            (
                self.codebook_dim == self.vector_quantization_hidden_dimension,
                "codebook_dim must equal vector_quantization_hidden_dimension",
            ),
            (
                self.vector_quantization_hidden_dimension != self.hidden_size,
                "RVQ without input/output projections is not supported",
            ),
        ]
        for ok, message in checks:
            if not ok:
                raise CodecConfigError(f"encoder_config: {message}")


@dataclass(frozen=True)
class SpeechTokenizerConfig:
    decoder: CodecDecoderConfig
    encoder: MimiEncoderConfig
    encoder_valid_num_quantizers: int
    input_sample_rate: int
    output_sample_rate: int
    encode_downsample_rate: int
    decode_upsample_rate: int

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> SpeechTokenizerConfig:
        top = Fields(raw, "speech_tokenizer config", CodecConfigError)
        decoder = Fields(top.get("decoder_config"), "decoder_config", CodecConfigError)
        encoder = Fields(top.get("encoder_config"), "encoder_config", CodecConfigError)
        config = cls(
            decoder=decoder.dataclass(CodecDecoderConfig),
            encoder=encoder.dataclass(MimiEncoderConfig, {"frame_rate": "_frame_rate"}),
            encoder_valid_num_quantizers=top.integer("encoder_valid_num_quantizers"),
            input_sample_rate=top.integer("input_sample_rate"),
            output_sample_rate=top.integer("output_sample_rate"),
            encode_downsample_rate=top.integer("encode_downsample_rate"),
            decode_upsample_rate=top.integer("decode_upsample_rate"),
        )
        config.decoder.validate()
        config.encoder.validate()
        config.validate()
        return config

    def validate(self) -> None:
        if self.decode_upsample_rate != self.decoder.samples_per_frame:
            raise CodecConfigError(
                f"decode_upsample_rate {self.decode_upsample_rate} != decoder upsampling product "
                f"{self.decoder.samples_per_frame}"
            )
        if self.encoder_valid_num_quantizers != self.decoder.num_quantizers:
            raise CodecConfigError("encoder_valid_num_quantizers must equal decoder num_quantizers")
        if self.encoder_valid_num_quantizers > self.encoder.num_quantizers:
            raise CodecConfigError("encoder_valid_num_quantizers exceeds encoder num_quantizers")
        if self.encoder.sampling_rate != self.input_sample_rate:
            raise CodecConfigError("encoder sampling_rate must equal input_sample_rate")


def load_speech_tokenizer_config(folder: str | Path) -> SpeechTokenizerConfig:
    """Read `config.json` (and check `preprocessor_config.json` if present) in `folder`."""
    folder = Path(folder)
    path = folder / "config.json"
    if not path.is_file():
        raise FileNotFoundError(f"speech tokenizer config not found: {path}")
    config = SpeechTokenizerConfig.from_dict(read_json_object(path, CodecConfigError))
    _check_preprocessor(folder / "preprocessor_config.json", config)
    return config


def _check_preprocessor(path: Path, config: SpeechTokenizerConfig) -> None:
    if not path.is_file():
        return
    raw = read_json_object(path, CodecConfigError)
    rate = raw.get("sampling_rate")
    if rate is not None and rate != config.input_sample_rate:
        raise CodecConfigError(
            f"{path}: sampling_rate {rate} != input_sample_rate {config.input_sample_rate}"
        )
    if raw.get("feature_size", 1) != 1:
        raise CodecConfigError(f"{path}: only mono feature_size 1 is supported")
