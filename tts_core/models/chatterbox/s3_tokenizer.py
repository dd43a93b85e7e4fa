"""S3 speech tokenizer (S3TokenizerV2 "speech_tokenizer_v2_25hz" inside s3gen_meanflow's
`tokenizer.*`; spec chatterbox.md 5): 16 kHz audio -> 128-band log-mel (100 Hz) -> two
stride-2 convs (25 Hz) -> pre-LN blocks of RoPE attention + FSMN memory -> FSQ (8 dims x 3
levels) -> tokens 0..6560. One unpadded clip of at most 30 s (the official's short path)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..layers import apply_rope
from .config import S3TokSizes

N_FFT, HOP, N_MELS = 400, 160, 128
ROPE_DIM, ROPE_LEN = 64, 2048  # precompute_freqs_cis(64, 1024 * 2): the head dim must be 64
FSMN_KERNEL = 31
FSQ_SCALE = 0.9990000128746033
MAX_FRAMES = 3000  # 30 s: longer clips take the official's sliding-window path (not here)


def rope_table(length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin (T, 64) as the official builds them (torch.polar of float32 angles, doubled)."""
    freqs = 1.0 / (10000.0 ** (torch.arange(0, ROPE_DIM, 2)[: ROPE_DIM // 2].float() / ROPE_DIM))
    angles = torch.outer(torch.arange(ROPE_LEN), freqs).float()[:length]
    cis = torch.polar(torch.ones_like(angles), angles)
    real = torch.view_as_real(torch.cat((cis, cis), dim=-1))  # (T, 64, 2)
    return real[..., 0], real[..., 1]


class FSMNAttention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.query = nn.Linear(dim, dim)
        self.key = nn.Linear(dim, dim, bias=False)
        self.value = nn.Linear(dim, dim)
        self.out = nn.Linear(dim, dim)
        self.fsmn_block = nn.Conv1d(dim, dim, FSMN_KERNEL, groups=dim, bias=False)

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        batch, steps, dim = x.shape
        scale = (dim // self.heads) ** -0.25  # on q and on k
        q, k, v = (
            proj(x).view(batch, steps, self.heads, -1)
            for proj in (self.query, self.key, self.value)
        )
        cos, sin = (t[None, :, None, :].to(x.device, x.dtype) for t in rope)  # (1, T, 1, 64)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        flat_v = v.reshape(batch, steps, -1)
        pad = (FSMN_KERNEL - 1) // 2
        memory = self.fsmn_block(F.pad(flat_v.transpose(1, 2), (pad, FSMN_KERNEL - 1 - pad)))
        memory = memory.transpose(1, 2) + flat_v  # (B, T, C)
        scores = (q.permute(0, 2, 1, 3) * scale) @ (k.permute(0, 2, 3, 1) * scale)  # (B, H, T, T)
        weights = F.softmax(scores.float(), dim=-1).to(q.dtype)
        out = (weights @ v.permute(0, 2, 1, 3)).permute(0, 2, 1, 3).flatten(start_dim=2)
        return self.out(out) + memory


class Block(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.attn = FSMNAttention(dim, heads)
        self.attn_ln = nn.LayerNorm(dim, eps=1e-5)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
        self.mlp_ln = nn.LayerNorm(dim, eps=1e-5)

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        x = x + self.attn(self.attn_ln(x), rope)
        return x + self.mlp(self.mlp_ln(x))


class Encoder(nn.Module):
    def __init__(self, sizes: S3TokSizes) -> None:
        super().__init__()
        dim = sizes.n_audio_state
        if dim // sizes.n_audio_head != ROPE_DIM:
            raise ValueError(f"S3 tokenizer head dim {dim // sizes.n_audio_head} != {ROPE_DIM}")
        self.conv1 = nn.Conv1d(N_MELS, dim, 3, stride=2, padding=1)
        self.conv2 = nn.Conv1d(dim, dim, 3, stride=2, padding=1)
        self.blocks = nn.ModuleList(
            Block(dim, sizes.n_audio_head) for _ in range(sizes.n_audio_layer)
        )

    def forward(self, mel: torch.Tensor) -> torch.Tensor:  # (B, 128, T) -> (B, T/4, C)
        x = F.gelu(self.conv2(F.gelu(self.conv1(mel)))).permute(0, 2, 1)
        rope = rope_table(x.shape[1])
        for block in self.blocks:
            x = block(x, rope)
        return x


class Codebook(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.project_down = nn.Linear(dim, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, T, C) -> (B, T) int
        h = (self.project_down(x).float().tanh() * FSQ_SCALE).round() + 1  # each in {0, 1, 2}
        powers = torch.pow(3, torch.arange(8, device=x.device, dtype=h.dtype))
        return torch.sum(h * powers, dim=-1).int()


class Quantizer(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self._codebook = Codebook(dim)


class S3Tokenizer(nn.Module):
    def __init__(self, sizes: S3TokSizes) -> None:
        super().__init__()
        self.register_buffer("_mel_filters", torch.empty(N_MELS, N_FFT // 2 + 1))
        self.register_buffer("window", torch.empty(N_FFT))
        self.encoder = Encoder(sizes)
        self.quantizer = Quantizer(sizes.n_audio_state)

    def log_mel(self, wav16k: torch.Tensor) -> torch.Tensor:
        """(1, S) -> (1, 128, S/160) Whisper-style log-mel (the checkpoint's filters/window)."""
        spec = torch.stft(wav16k, N_FFT, HOP, window=self.window, return_complex=True)
        power = spec[..., :-1].abs() ** 2
        log_spec = torch.clamp(self._mel_filters @ power, min=1e-10).log10()
        log_spec = torch.maximum(log_spec, log_spec.max() - 8.0)
        return (log_spec + 4.0) / 4.0

    @torch.inference_mode()
    def forward(self, wav16k: torch.Tensor, max_tokens: int | None = None) -> torch.Tensor:
        """(S,) or (1, S) float32 16 kHz -> (1, T) int64 tokens (25 Hz), at most max_tokens."""
        mel = self.log_mel(wav16k.reshape(1, -1).to(self.window.device))
        if max_tokens is not None:
            mel = mel[..., : 4 * max_tokens]
        if mel.shape[-1] > MAX_FRAMES:
            raise ValueError(f"S3 tokenizer input of {mel.shape[-1]} frames > {MAX_FRAMES} (30 s)")
        return self.quantizer._codebook(self.encoder(mel)).long()
