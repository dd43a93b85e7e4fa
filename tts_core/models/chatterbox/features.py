"""Signal front ends of S3Gen's `embed_ref` (spec chatterbox.md 3, 7, 8): the 24 kHz prompt
log-mel, torchaudio's sinc resampler (24 -> 16 kHz for CAMPPlus and the S3 tokenizer; in
tts_core/audio/sinc.py) and torchaudio's Kaldi fbank (CAMPPlus features), with their op order
and dtypes: torchaudio is not needed at run time."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ...audio.analysis import mel_filters
from ...audio.sinc import resample, sinc_kernel

MEL_FFT, MEL_HOP, MELS, MEL_FMAX = 1920, 480, 80, 8000
_sinc_kernel = sinc_kernel  # (the resampler moved to tts_core/audio/sinc.py; names kept)
__all__ = ["kaldi_fbank", "prompt_mel", "resample"]


def prompt_mel(wav24k: torch.Tensor) -> torch.Tensor:
    """s3gen.utils.mel.mel_spectrogram: (1, S) -> (1, S/480, 80) log-mel (reflect pad 720,
    Hann 1920 periodic, |STFT| with 1e-9, Slaney mel 0-8 kHz, log(clamp 1e-5))."""
    basis = torch.from_numpy(mel_filters(24000, MEL_FFT, MELS, fmin=0, fmax=MEL_FMAX))  # librosa's
    pad = (MEL_FFT - MEL_HOP) // 2
    y = F.pad(wav24k.unsqueeze(1), (pad, pad), mode="reflect").squeeze(1)
    spec = torch.view_as_real(
        torch.stft(
            y,
            MEL_FFT,
            hop_length=MEL_HOP,
            win_length=MEL_FFT,
            window=torch.hann_window(MEL_FFT),
            center=False,
            pad_mode="reflect",
            normalized=False,
            onesided=True,
            return_complex=True,
        )
    )
    spec = torch.sqrt(spec.pow(2).sum(-1) + 1e-9)
    spec = torch.matmul(basis, spec)
    return torch.log(torch.clamp(spec, min=1e-5) * 1).transpose(1, 2)


# -------------------------------------------------------------------------------- Kaldi fbank
FBANK_SHIFT, FBANK_SIZE, FBANK_PADDED = 160, 400, 512  # 10 ms / 25 ms at 16 kHz, next pow 2
FBANK_BINS, PREEMPH, LOW_HZ = 80, 0.97, 20.0
EPSILON = torch.tensor(torch.finfo(torch.float).eps)


def _mel_banks() -> torch.Tensor:
    """get_mel_banks(80, 512, 16000, 20, 0 -> 8000, no VTLN): (80, 256)."""

    def mel(freq):
        return 1127.0 * math.log(1.0 + freq / 700.0)

    low, high = mel(LOW_HZ), mel(8000.0)
    delta = (high - low) / (FBANK_BINS + 1)
    index = torch.arange(FBANK_BINS).unsqueeze(1)
    left, center, right = (
        low + index * delta,
        low + (index + 1.0) * delta,
        low + (index + 2.0) * delta,
    )
    freqs = 1127.0 * (1.0 + (16000 / FBANK_PADDED) * torch.arange(FBANK_PADDED / 2) / 700.0).log()
    freqs = freqs.unsqueeze(0)
    up, down = (freqs - left) / (center - left), (right - freqs) / (right - center)
    return torch.max(torch.zeros(1), torch.min(up, down))


def kaldi_fbank(wav16k: torch.Tensor) -> torch.Tensor:
    """torchaudio.compliance.kaldi.fbank(wav[None], num_mel_bins=80), defaults otherwise
    (povey window, pre-emphasis 0.97, DC removal, snip_edges, no dither): (S,) -> (T, 80)."""
    frames = 1 + (wav16k.shape[0] - FBANK_SIZE) // FBANK_SHIFT
    strided = wav16k.as_strided(
        (frames, FBANK_SIZE), (FBANK_SHIFT * wav16k.stride(0), wav16k.stride(0))
    )
    strided = strided - torch.mean(strided, dim=1).unsqueeze(1)
    shifted = F.pad(strided.unsqueeze(0), (1, 0), mode="replicate").squeeze(0)
    strided = strided - PREEMPH * shifted[:, :-1]
    window = torch.hann_window(FBANK_SIZE, periodic=False, dtype=wav16k.dtype).pow(0.85)
    strided = F.pad(
        (strided * window.unsqueeze(0)).unsqueeze(0),
        (0, FBANK_PADDED - FBANK_SIZE),
        mode="constant",
        value=0,
    ).squeeze(0)
    spectrum = torch.fft.rfft(strided).abs().pow(2.0)
    banks = F.pad(_mel_banks().to(dtype=wav16k.dtype), (0, 1), mode="constant", value=0)
    return torch.max(torch.mm(spectrum, banks.T), EPSILON.to(wav16k.dtype)).log()
