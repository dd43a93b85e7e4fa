"""VoiceEncoder (`ve.safetensors`; spec chatterbox.md 6): 16 kHz clip -> 256-d speaker
embedding for T3. Front end as the official: librosa's trim (20 dB) and a 40-band power mel
(numpy float32, librosa's STFT and filters: ours in audio.analysis, equal bit for bit, with no
numba to compile), 160-frame partials every 77 frames, a 3-layer LSTM, ReLU(proj(last hidden)),
L2-normalised per partial, averaged, normalised again."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ...audio.analysis import mel_filters, stft_magnitude, trim
from .config import S3_RATE, SPEAKER_EMBED

N_MELS, N_FFT, HOP = 40, 400, 160
PARTIAL_FRAMES = 160
FRAME_STEP = int(np.round((S3_RATE / 1.3) / PARTIAL_FRAMES))  # rate 1.3 -> 77 frames
MIN_COVERAGE = 0.8
TRIM_TOP_DB = 20
BATCH = 32


def mel_frames(wav16k: np.ndarray) -> np.ndarray:
    """(S,) float32 -> (T, 40) float32 amplitude-power mel of the trimmed clip."""
    wav = trim(wav16k, top_db=TRIM_TOP_DB)[0]  # librosa.effects.trim's
    spec = stft_magnitude(
        wav, n_fft=N_FFT, hop_length=HOP, win_length=N_FFT, center=True, pad_mode="reflect"
    )  # np.abs(librosa.stft(...)), same arguments
    spec **= 2.0
    basis = mel_filters(S3_RATE, N_FFT, N_MELS, fmin=0, fmax=8000)  # librosa.filters.mel's
    return np.dot(basis, spec).T


def partial_count(n_frames: int) -> tuple[int, int]:
    """get_num_wins: (partials, padded length) for a clip of n_frames mel frames."""
    n_wins, remainder = divmod(max(n_frames - PARTIAL_FRAMES + FRAME_STEP, 0), FRAME_STEP)
    if n_wins == 0 or (remainder + (PARTIAL_FRAMES - FRAME_STEP)) / PARTIAL_FRAMES >= MIN_COVERAGE:
        n_wins += 1
    return n_wins, PARTIAL_FRAMES + FRAME_STEP * (n_wins - 1)


class VoiceEncoder(nn.Module):
    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.lstm = nn.LSTM(N_MELS, hidden, num_layers=3, batch_first=True)
        self.proj = nn.Linear(hidden, SPEAKER_EMBED)
        self.similarity_weight = nn.Parameter(torch.empty(1))  # training only; in the file
        self.similarity_bias = nn.Parameter(torch.empty(1))

    def forward(self, partials: torch.Tensor) -> torch.Tensor:
        """(P, 160, 40) -> (P, 256) L2-normalised partial embeddings."""
        _, (hidden, _) = self.lstm(partials)
        raw = F.relu(self.proj(hidden[-1]))
        return raw / torch.linalg.norm(raw, dim=1, keepdim=True)

    @torch.inference_mode()
    def embed(self, wav16k: np.ndarray) -> torch.Tensor:
        """(S,) float32 16 kHz -> (1, 256) speaker embedding."""
        mel = torch.from_numpy(mel_frames(wav16k))  # (T, 40)
        n_partials, target = partial_count(mel.shape[0])
        if target > mel.shape[0]:
            mel = torch.cat([mel, torch.zeros(target - mel.shape[0], N_MELS, dtype=mel.dtype)])
        partials = torch.stack(
            [mel[i * FRAME_STEP : i * FRAME_STEP + PARTIAL_FRAMES] for i in range(n_partials)]
        )
        device = self.proj.weight.device
        chunks = partials.to(device).chunk(-(-n_partials // BATCH))  # the official batch_size 32
        embeds = torch.cat([self(chunk) for chunk in chunks]).cpu()
        raw = torch.mean(embeds, dim=0)[None]
        return raw / torch.linalg.norm(raw, dim=1, keepdim=True)
