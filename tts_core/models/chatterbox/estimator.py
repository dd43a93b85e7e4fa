"""The CFM velocity network `flow.decoder.estimator` (ConditionalDecoder with one channel level,
causal convs, meanflow time mixer; spec chatterbox.md 8.4). x (B, 80, T), mask (B, 1, T), mu,
spks, cond -> velocity (B, 80, T). Transformer blocks attend bidirectionally with an additive
mask bias (0 valid, -1e10 padded), passed to SDPA as the official diffusers processor passes it.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .config import MELS, DecoderSizes

IN_CHANNELS = 320  # x, mu, spks, cond: 4 x 80
MASK_BIAS = -1.0e10


class CausalConv1d(nn.Conv1d):
    """Conv1d left-padded by kernel-1 (no look-ahead)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(F.pad(x, (self.kernel_size[0] - 1, 0)))


class ChannelNorm(nn.LayerNorm):
    """LayerNorm over channels of a (B, C, T) tensor (the official Transpose-LN-Transpose)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x.transpose(1, 2)).transpose(1, 2)


class CausalBlock1D(nn.Module):
    """mish(LN(causal_conv3(x * mask))) * mask; `block.{0,2}` are the checkpoint's indices."""

    def __init__(self, dim: int, dim_out: int) -> None:
        super().__init__()
        conv, norm = CausalConv1d(dim, dim_out, 3), ChannelNorm(dim_out)
        self.block = nn.Sequential(conv, nn.Identity(), norm, nn.Identity(), nn.Mish())

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.block(x * mask) * mask


class CausalResnetBlock1D(nn.Module):
    def __init__(self, dim: int, dim_out: int, time_dim: int) -> None:
        super().__init__()
        self.mlp = nn.Sequential(nn.Mish(), nn.Linear(time_dim, dim_out))
        self.block1 = CausalBlock1D(dim, dim_out)
        self.block2 = CausalBlock1D(dim_out, dim_out)
        self.res_conv = nn.Conv1d(dim, dim_out, 1)

    def forward(self, x: torch.Tensor, mask: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        h = self.block1(x, mask)
        h += self.mlp(t).unsqueeze(-1)
        return self.block2(h, mask) + self.res_conv(x * mask)


class SelfAttention(nn.Module):
    """diffusers Attention (AttnProcessor2_0): to_q/k/v without bias, to_out.0 with bias."""

    def __init__(self, dim: int, heads: int, head_dim: int) -> None:
        super().__init__()
        self.heads, inner = heads, heads * head_dim
        self.to_q = nn.Linear(dim, inner, bias=False)
        self.to_k = nn.Linear(dim, inner, bias=False)
        self.to_v = nn.Linear(dim, inner, bias=False)
        self.to_out = nn.ModuleList([nn.Linear(inner, dim)])

    def forward(self, x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        """x (B, T, C), bias (B, heads, 1, T) additive."""
        batch = x.shape[0]
        q, k, v = (
            proj(x).view(batch, -1, self.heads, proj.out_features // self.heads).transpose(1, 2)
            for proj in (self.to_q, self.to_k, self.to_v)
        )
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=bias, dropout_p=0.0, is_causal=False
        )
        return self.to_out[0](out.transpose(1, 2).reshape(batch, -1, q.shape[1] * q.shape[3]))


class GELUProj(nn.Module):
    def __init__(self, dim: int, inner: int) -> None:
        super().__init__()
        self.proj = nn.Linear(dim, inner)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.proj(x))


class FeedForward(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.net = nn.ModuleList([GELUProj(dim, 4 * dim), nn.Identity(), nn.Linear(4 * dim, dim)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net[2](self.net[0](x))


class TransformerBlock(nn.Module):
    """BasicTransformerBlock, layer_norm type: x + attn1(norm1(x)), x + ff(norm3(x))."""

    def __init__(self, sizes: DecoderSizes) -> None:
        super().__init__()
        dim = sizes.channels
        self.norm1 = nn.LayerNorm(dim)
        self.attn1 = SelfAttention(dim, sizes.heads, sizes.head_dim)
        self.norm3 = nn.LayerNorm(dim)
        self.ff = FeedForward(dim)

    def forward(self, x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        x = self.attn1(self.norm1(x), bias) + x
        return self.ff(self.norm3(x)) + x


def time_embedding(t: torch.Tensor, dim: int = IN_CHANNELS) -> torch.Tensor:
    """SinusoidalPosEmb: [sin | cos](1000 t exp(-i ln(10000) / (dim/2 - 1))), t (B,) -> (B, dim)."""
    half = dim // 2
    freqs = torch.exp(torch.arange(half, device=t.device).float() * -(math.log(10000) / (half - 1)))
    arg = 1000 * t.unsqueeze(1) * freqs.unsqueeze(0)
    return torch.cat((arg.sin(), arg.cos()), dim=-1)


class TimeMLP(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.linear_1 = nn.Linear(IN_CHANNELS, dim)
        self.linear_2 = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear_2(F.silu(self.linear_1(x)))


class Stage(nn.ModuleList):
    """[resnet, transformer blocks(, conv)] as the checkpoint's `down_blocks.0.{0,1,2}`."""

    def __init__(self, dim_in: int, sizes: DecoderSizes, time_dim: int, conv: bool) -> None:
        blocks = nn.ModuleList(TransformerBlock(sizes) for _ in range(sizes.n_blocks))
        parts = [CausalResnetBlock1D(dim_in, sizes.channels, time_dim), blocks]
        if conv:
            parts.append(CausalConv1d(sizes.channels, sizes.channels, 3))
        super().__init__(parts)

    def run(self, x: torch.Tensor, mask: torch.Tensor, t: torch.Tensor, bias: torch.Tensor):
        x = self[0](x, mask, t).transpose(1, 2).contiguous()  # (B, T, C)
        for block in self[1]:
            x = block(x, bias)
        return x.transpose(1, 2).contiguous()  # (B, C, T)


class ConditionalDecoder(nn.Module):
    def __init__(self, sizes: DecoderSizes, meanflow: bool = True) -> None:
        """meanflow (Turbo): the end time r embedded too and mixed in (`time_embed_mixer`)."""
        super().__init__()
        ch, time_dim = sizes.channels, 4 * sizes.channels
        self.time_mlp = TimeMLP(time_dim)
        self.down_blocks = nn.ModuleList([Stage(IN_CHANNELS, sizes, time_dim, conv=True)])
        self.mid_blocks = nn.ModuleList(
            Stage(ch, sizes, time_dim, conv=False) for _ in range(sizes.mid_blocks)
        )
        self.up_blocks = nn.ModuleList([Stage(2 * ch, sizes, time_dim, conv=True)])
        self.final_block = CausalBlock1D(ch, ch)
        self.final_proj = nn.Conv1d(ch, MELS, 1)
        self.time_embed_mixer = nn.Linear(2 * time_dim, time_dim, bias=False) if meanflow else None

    def forward(self, x, mask, mu, t, spks, cond, r=None) -> torch.Tensor:
        """x, mu, cond (B, 80, T); mask (B, 1, T); spks (B, 80); t, r (B,) -> (B, 80, T).
        r: meanflow only (None for the regular CFM)."""
        t_emb = self.time_mlp(time_embedding(t).to(t.dtype))
        if self.time_embed_mixer is not None:
            r_emb = self.time_mlp(time_embedding(r).to(t.dtype))
            t_emb = self.time_embed_mixer(torch.cat([t_emb, r_emb], dim=1))
        spks = spks[:, :, None].expand(-1, -1, x.shape[-1])
        x = torch.cat([x, mu, spks, cond], dim=1)  # (B, 320, T)
        heads = self.down_blocks[0][1][0].attn1.heads
        # (B, heads, 1, T): diffusers repeats the (B, 1, T) bias per head.
        bias = ((1.0 - mask.to(x.dtype)) * MASK_BIAS).repeat_interleave(heads, dim=0)
        bias = bias.view(x.shape[0], heads, -1, bias.shape[-1])
        down = self.down_blocks[0]
        skip = down.run(x, mask, t_emb, bias)
        x = down[2](skip * mask)
        for stage in self.mid_blocks:
            x = stage.run(x, mask, t_emb, bias)
        up = self.up_blocks[0]
        x = up.run(torch.cat([x[:, :, : skip.shape[-1]], skip], dim=1), mask, t_emb, bias)
        x = up[2](x * mask)
        x = self.final_block(x, mask)
        return self.final_proj(x * mask) * mask
