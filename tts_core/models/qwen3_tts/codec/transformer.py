"""The decoder's pre-transformer: RMSNorm, sliding-window causal attention with RoPE, SwiGLU.

A full pass uses positions 0..T-1 as the official code. A streaming step joins the new frames to
the `KVWindow` of the last sliding_window - 1 frames (keys stored before RoPE) and rotates the
whole window with positions local to the step; RoPE scores depend only on position differences,
so this equals the full pass while keeping the angles small on arbitrarily long streams.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .config import CodecDecoderConfig
from .streaming import KVWindow


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # float32 for bf16/fp16/float32 inputs, as the official; float64 stays float64, so a
        # float64 run has no float32 rounding left (the exactness checks in tests/qwen3 need it).
        dtype = x.dtype
        x = x.to(torch.promote_types(dtype, torch.float32))
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


class LayerScale(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.full((dim,), 0.01))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.scale * x


def rope_tables(
    inv_freq: torch.Tensor, length: int, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin for positions 0..length-1: (length, D), computed in float32 as the official
    (float64 when the model runs in float64, so exactness checks are not limited by fp32 angles)."""
    angle_dtype = torch.float64 if dtype == torch.float64 else torch.float32
    positions = torch.arange(length, device=inv_freq.device, dtype=angle_dtype)
    freqs = positions[:, None] * inv_freq[None, :].to(angle_dtype)
    angles = torch.cat([freqs, freqs], dim=-1)
    return angles.cos().to(dtype), angles.sin().to(dtype)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate-half RoPE on (B, H, T, D) with cos/sin (T, D)."""
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


def sliding_window_mask(queries: int, keys: int, window: int, device: torch.device) -> torch.Tensor:
    """(queries, keys) bool; the last query is the last key; each sees itself + window-1 before."""
    query_pos = torch.arange(keys - queries, keys, device=device)[:, None]
    key_pos = torch.arange(keys, device=device)[None, :]
    return (key_pos <= query_pos) & (key_pos > query_pos - window)


class Attention(nn.Module):
    def __init__(self, cfg: CodecDecoderConfig) -> None:
        super().__init__()
        bias = cfg.attention_bias
        self.heads, self.kv_heads, self.head_dim = (
            cfg.num_attention_heads,
            cfg.num_key_value_heads,
            cfg.head_dim,
        )
        self.window = cfg.sliding_window
        self.q_proj = nn.Linear(cfg.hidden_size, self.heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(cfg.hidden_size, self.kv_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(cfg.hidden_size, self.kv_heads * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(self.heads * self.head_dim, cfg.hidden_size, bias=bias)
        inv_freq = 1.0 / (
            cfg.rope_theta
            ** (torch.arange(0, self.head_dim, 2, dtype=torch.int64).float() / self.head_dim)
        )
        # Kept out of the buffers so a cast of the module to bf16 never degrades it.
        self.inv_freq_fp32 = inv_freq

    def forward(self, x: torch.Tensor, cache: KVWindow | None = None) -> torch.Tensor:
        batch, steps, _ = x.shape  # (B, t, hidden)
        q = self.q_proj(x).view(batch, steps, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(batch, steps, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(batch, steps, self.kv_heads, self.head_dim).transpose(1, 2)
        if cache is not None:
            k, v, _ = cache.extend(k, v)  # (B, H_kv, cached + t, D), un-rotated
        total = k.shape[2]
        cos, sin = rope_tables(self.inv_freq_fp32.to(x.device), total, x.dtype)
        q = rotate(q, cos[total - steps :], sin[total - steps :])
        k = rotate(k, cos, sin)
        if self.kv_heads != self.heads:
            k = k.repeat_interleave(self.heads // self.kv_heads, dim=1)
            v = v.repeat_interleave(self.heads // self.kv_heads, dim=1)
        mask = sliding_window_mask(steps, total, self.window, x.device)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # (B, H, t, D)
        return self.o_proj(out.transpose(1, 2).reshape(batch, steps, -1))


class SwiGLU(nn.Module):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(dim, hidden, bias=False)
        self.up_proj = nn.Linear(dim, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class TransformerLayer(nn.Module):
    def __init__(self, cfg: CodecDecoderConfig) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = Attention(cfg)
        self.self_attn_layer_scale = LayerScale(cfg.hidden_size)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = SwiGLU(cfg.hidden_size, cfg.intermediate_size)
        self.mlp_layer_scale = LayerScale(cfg.hidden_size)

    def forward(self, x: torch.Tensor, cache: KVWindow | None = None) -> torch.Tensor:
        x = x + self.self_attn_layer_scale(self.self_attn(self.input_layernorm(x), cache))
        return x + self.mlp_layer_scale(self.mlp(self.post_attention_layernorm(x)))


class PreTransformer(nn.Module):
    """(B, T, latent) -> input_proj -> layers -> RMSNorm -> output_proj -> (B, T, latent)."""

    def __init__(self, cfg: CodecDecoderConfig) -> None:
        super().__init__()
        self.input_proj = nn.Linear(cfg.latent_dim, cfg.hidden_size)
        self.layers = nn.ModuleList(TransformerLayer(cfg) for _ in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.output_proj = nn.Linear(cfg.hidden_size, cfg.latent_dim)

    def forward(self, x: torch.Tensor, caches: list[KVWindow] | None = None) -> torch.Tensor:
        x = self.input_proj(x)
        for index, layer in enumerate(self.layers):
            x = layer(x, None if caches is None else caches[index])
        return self.output_proj(self.norm(x))
