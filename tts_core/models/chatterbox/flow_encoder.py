"""S3Gen's token encoder `flow.encoder` (UpsampleConformerEncoder, spec chatterbox.md 8.2):
Linear+LN embed with espnet relative positions, a 3-token pre-lookahead conv, conformer blocks
(rel-pos MHA + SiLU FFN), x2 nearest upsampling with a causal conv, then the same again at 50 Hz.
Attention is bidirectional over the whole prompt + generated sequence, so this runs on one
unpadded utterance (the official is batch 1). Attribute names are the checkpoint's.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .config import LOOKAHEAD, EncoderSizes

UP_BLOCKS = 4  # up_encoders: fixed by the code
BLOCK_LN_EPS = 1e-12  # norm_mha / norm_ff (ConformerEncoderLayer)
LN_EPS = 1e-5  # embed / after_norm


def rel_positions(length: int, dim: int) -> torch.Tensor:
    """EspnetRelPositionalEncoding's table for relative offsets length-1 .. -(length-1):
    (1, 2L-1, dim), sin in even channels, cos in odd (float32, the official's op order)."""
    position = torch.arange(0, length, dtype=torch.float32).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32) * -(math.log(10000.0) / dim))
    positive = torch.zeros(length, dim)
    negative = torch.zeros(length, dim)
    positive[:, 0::2] = torch.sin(position * div_term)
    positive[:, 1::2] = torch.cos(position * div_term)
    negative[:, 0::2] = torch.sin(-1 * position * div_term)
    negative[:, 1::2] = torch.cos(-1 * position * div_term)
    return torch.cat([torch.flip(positive, [0]), negative[1:]], dim=0).unsqueeze(0)


class LinearEmbed(nn.Module):
    """`embed` / `up_embed`: Linear -> LayerNorm, then x * sqrt(dim) and the rel-pos table."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.out = nn.Sequential(nn.Linear(dim, dim), nn.LayerNorm(dim, eps=LN_EPS))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        dim = x.shape[-1]
        pos = rel_positions(x.shape[1], dim).to(device=x.device, dtype=x.dtype)
        return self.out(x) * math.sqrt(dim), pos


class RelPositionAttention(nn.Module):
    """Transformer-XL attention: scores = ((q+u) k^T + shift((q+v) p^T)) / sqrt(d)."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads, self.d_k = heads, dim // heads
        self.linear_q = nn.Linear(dim, dim)
        self.linear_k = nn.Linear(dim, dim)
        self.linear_v = nn.Linear(dim, dim)
        self.linear_out = nn.Linear(dim, dim)
        self.linear_pos = nn.Linear(dim, dim, bias=False)
        self.pos_bias_u = nn.Parameter(torch.empty(heads, self.d_k))
        self.pos_bias_v = nn.Parameter(torch.empty(heads, self.d_k))

    @staticmethod
    def rel_shift(x: torch.Tensor) -> torch.Tensor:
        """(B, H, T, 2T-1) scores per relative offset -> (B, H, T, T) per key (espnet trick)."""
        b, h, t, p = x.shape
        padded = torch.cat([x.new_zeros(b, h, t, 1), x], dim=-1).view(b, h, p + 1, t)
        return padded[:, :, 1:].view_as(x)[:, :, :, : p // 2 + 1]

    def forward(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        batch, steps, dim = x.shape
        q, k, v = (
            proj(x).view(batch, -1, self.heads, self.d_k)
            for proj in (self.linear_q, self.linear_k, self.linear_v)
        )
        k, v = k.transpose(1, 2), v.transpose(1, 2)  # (B, H, T, d)
        p = self.linear_pos(pos).view(pos.shape[0], -1, self.heads, self.d_k).transpose(1, 2)
        ac = torch.matmul((q + self.pos_bias_u).transpose(1, 2), k.transpose(-2, -1))
        bd = self.rel_shift(
            torch.matmul((q + self.pos_bias_v).transpose(1, 2), p.transpose(-2, -1))
        )
        scores = (ac + bd) / math.sqrt(self.d_k)  # (B, H, T, T)
        out = torch.matmul(torch.softmax(scores, dim=-1), v)  # (B, H, T, d)
        return self.linear_out(out.transpose(1, 2).contiguous().view(batch, -1, dim))


class FeedForward(nn.Module):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.w_1 = nn.Linear(dim, hidden)
        self.w_2 = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w_2(F.silu(self.w_1(x)))


class ConformerLayer(nn.Module):
    """Pre-LN: x + MHA(LN(x)), then x + FFN(LN(x)) (no macaron, no conv module)."""

    def __init__(self, sizes: EncoderSizes) -> None:
        super().__init__()
        dim = sizes.size
        self.self_attn = RelPositionAttention(dim, sizes.heads)
        self.feed_forward = FeedForward(dim, sizes.linear_units)
        self.norm_mha = nn.LayerNorm(dim, eps=BLOCK_LN_EPS)
        self.norm_ff = nn.LayerNorm(dim, eps=BLOCK_LN_EPS)

    def forward(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attn(self.norm_mha(x), pos)
        return x + self.feed_forward(self.norm_ff(x))


class PreLookahead(nn.Module):
    """x + conv2(causal pad 2)(leaky_relu(conv1(x right-padded by 3))): each token sees 3 ahead."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv1d(dim, dim, LOOKAHEAD + 1)
        self.conv2 = nn.Conv1d(dim, dim, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, T, C)
        h = F.pad(x.transpose(1, 2).contiguous(), (0, LOOKAHEAD))
        h = self.conv2(F.pad(F.leaky_relu(self.conv1(h)), (2, 0)))
        return h.transpose(1, 2).contiguous() + x


class Upsample(nn.Module):
    """Nearest x2, left-pad 4, Conv1d k5 (Upsample1D, stride 2)."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.conv = nn.Conv1d(dim, dim, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, C, T) -> (B, C, 2T)
        return self.conv(F.pad(F.interpolate(x, scale_factor=2.0, mode="nearest"), (4, 0)))


class UpsampleConformerEncoder(nn.Module):
    def __init__(self, sizes: EncoderSizes) -> None:
        super().__init__()
        dim = sizes.size
        self.embed = LinearEmbed(dim)
        self.pre_lookahead_layer = PreLookahead(dim)
        self.encoders = nn.ModuleList(ConformerLayer(sizes) for _ in range(sizes.num_blocks))
        self.up_layer = Upsample(dim)
        self.up_embed = LinearEmbed(dim)
        self.up_encoders = nn.ModuleList(ConformerLayer(sizes) for _ in range(UP_BLOCKS))
        self.after_norm = nn.LayerNorm(dim, eps=LN_EPS)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Token embeddings (B, T, C) of one unpadded utterance -> (B, 2T, C)."""
        x, pos = self.embed(x)
        x = self.pre_lookahead_layer(x)
        for layer in self.encoders:
            x = layer(x, pos)
        x = self.up_layer(x.transpose(1, 2).contiguous()).transpose(1, 2).contiguous()
        x, pos = self.up_embed(x)
        for layer in self.up_encoders:
            x = layer(x, pos)
        return self.after_norm(x)
