"""SpeechTokenizer: the 12 Hz codec folder (`speech_tokenizer/`) as one object.

encode: mono audio at any rate -> (R, 16) codes, R = ceil(n_24k / 1920), as the official wrapper
(librosa's resampling to 24 kHz, ours: audio.analysis.resample; Mimi encoder, first 16 codebooks).
decode: (T, 16) codes -> (T * 1920,) waveform in [-1, 1], one exact full pass.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import nn

from ....audio.analysis import resample
from ...state_check import mismatches, shapes_of
from .config import SpeechTokenizerConfig, load_speech_tokenizer_config
from .decoder import CodecDecoder
from .encoder import MimiEncoder
from .int8 import choose_decoder_format as int8_format

WEIGHTS_FILE = "model.safetensors"


class CodecCheckpointError(RuntimeError):
    """The codec weights are missing, unreadable or do not match the config."""


class SpeechTokenizer(nn.Module):
    def __init__(self, config: SpeechTokenizerConfig) -> None:
        super().__init__()
        self.config = config
        self.decoder = CodecDecoder(config.decoder)
        self.encoder = MimiEncoder(config.encoder)

    @property
    def sample_rate(self) -> int:
        return self.config.output_sample_rate

    @property
    def samples_per_frame(self) -> int:
        return self.config.decode_upsample_rate

    @property
    def num_quantizers(self) -> int:
        return self.config.encoder_valid_num_quantizers

    @classmethod
    def from_folder(
        cls,
        folder: str | Path,
        device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.float32,
    ) -> SpeechTokenizer:
        """Load `config.json` and `model.safetensors` (strict: every key, every shape)."""
        folder = Path(folder)
        if not folder.is_dir():
            raise FileNotFoundError(f"speech tokenizer folder not found: {folder}")
        config = load_speech_tokenizer_config(folder)
        model = cls(config)
        model.load_state_dict(read_weights(folder / WEIGHTS_FILE, model.state_dict()))
        return model.finish(device, dtype)

    @classmethod
    def from_config(
        cls,
        config: SpeechTokenizerConfig,
        device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.float32,
        seed: int = 0,
    ) -> SpeechTokenizer:
        """Random weights with the configured geometry (benchmarks; nothing is read from disk)."""
        model = cls(config)
        model.decoder = CodecDecoder.from_config(config.decoder, seed=seed)
        return model.finish(device, dtype)

    def finish(self, device: str | torch.device, dtype: torch.dtype) -> SpeechTokenizer:
        self.to(device=device)
        self.decoder.refresh_derived()  # from the loaded weights; set_dtype rounds them once
        self.decoder.set_dtype(dtype)
        self.encoder.to(dtype=dtype)
        self.encoder.refresh_derived()
        return self.eval()

    @property
    def decoder_dtype(self) -> torch.dtype:
        return self.decoder.dtype

    def set_decoder_dtype(self, dtype: torch.dtype) -> SpeechTokenizer:
        """Run only the decoder (codes -> audio) in `dtype`, e.g. torch.bfloat16 on a CPU with
        AVX512_BF16; returns self. The encoder (reference clip -> codes) keeps its dtype, so a
        float32 encoder still gives exact reference codes. `decode` and `decoder.decode_step`
        still return float32 audio; decoder states follow the new dtype (see CodecDecoder.set_dtype
        for the precision notes)."""
        self.decoder.set_dtype(dtype)
        return self

    def choose_decoder_format(self, native_bf16: str | None, int8: bool = True) -> str:
        """`auto`'s decoder format on a float32 CPU model (int8.choose_decoder_format: bfloat16
        with native bf16, int8 on VNNI where its audio holds the gate, else float32), its CPU
        kernels built for the streaming chunks; returns the choice in words. Call it before any
        voice caches a decoder state."""
        before = (self.decoder.dtype, self.decoder.weight_format)
        self.decoder, choice = int8_format(self.decoder, native_bf16, int8)
        if (self.decoder.dtype, self.decoder.weight_format) != before:
            self.decoder.warm_up()
        return choice

    @torch.inference_mode()
    def encode(self, audio: np.ndarray, sample_rate: int) -> torch.LongTensor:
        """Mono float audio at `sample_rate` -> codes (R, 16) int64 on the CPU."""
        wave = prepare_audio(audio, sample_rate, self.config.input_sample_rate)
        weight = self.encoder.downsample.conv.weight
        samples = torch.from_numpy(wave).to(device=weight.device, dtype=weight.dtype)
        codes = self.encoder(samples[None, None], self.num_quantizers)  # (1, 16, frames)
        frames = -(-wave.shape[0] // self.config.encode_downsample_rate)
        return codes[0, :, :frames].transpose(0, 1).contiguous().cpu()

    @torch.inference_mode()
    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        """Codes (T, 16) -> float32 waveform (T * samples_per_frame,) on the CPU, in [-1, 1]."""
        if codes.dim() != 2 or codes.shape[1] != self.num_quantizers:
            raise ValueError(f"expected codes (T, {self.num_quantizers}), got {tuple(codes.shape)}")
        wav = self.decoder(codes.to(self.decoder.device).transpose(0, 1)[None])  # (1, 1, T * spf)
        return wav[0, 0].float().cpu()


def prepare_audio(audio: np.ndarray, sample_rate: int, target_rate: int) -> np.ndarray:
    """Validate, downmix (mean over the last axis, as the official) and resample as the
    official's librosa.resample does (audio.analysis.resample)."""
    audio = np.asarray(audio)
    if audio.ndim == 2:
        audio = audio.mean(axis=-1)
    if audio.ndim != 1:
        raise ValueError(f"expected mono audio (n,) or (n, channels), got shape {audio.shape}")
    if audio.size == 0:
        raise ValueError("audio is empty")
    if not isinstance(sample_rate, int | np.integer) or sample_rate <= 0:
        raise ValueError(f"sample_rate must be a positive int, got {sample_rate!r}")
    audio = audio.astype(np.float32)
    if not np.isfinite(audio).all():
        raise ValueError("audio contains NaN or infinite samples")
    if int(sample_rate) != target_rate:
        audio = resample(audio, int(sample_rate), target_rate)
    return np.ascontiguousarray(audio, dtype=np.float32)


def read_weights(path: Path, expected: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Read a safetensors file and check it has exactly the expected keys and shapes."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    if not path.is_file():
        raise FileNotFoundError(f"codec weights not found: {path}")
    try:
        weights = load_file(str(path))
    except (SafetensorError, OSError, ValueError, RuntimeError) as error:
        raise CodecCheckpointError(
            f"cannot read {path} (corrupt or not safetensors): {error}"
        ) from error
    problems = mismatches(shapes_of(expected), shapes_of(weights))
    if problems:
        raise CodecCheckpointError(f"{path}: state dict mismatch; " + "; ".join(problems))
    return weights
