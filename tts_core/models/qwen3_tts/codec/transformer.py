"""The decoder's pre-transformer: pre-norm layers of sliding-window causal attention with RoPE and
a SwiGLU MLP, each branch scaled by a LayerScale (blocks from tts_core/models/layers.py).

A full pass uses positions 0..T-1 as the official code. A streaming step joins the new frames to
the `KVWindow` of the last sliding_window - 1 frames (keys stored before RoPE) and rotates the
whole window with positions local to the step; RoPE scores depend only on position differences,
so this equals the full pass while keeping the angles small on arbitrarily long streams.
"""

from __future__ import annotations

import torch
from torch import nn

from ...layers import (
    Attention,
    LayerScale,
    RMSNorm,
    SwiGLU,
    apply_rope,
    inverse_frequencies,
    rope_cos_sin,
)
from ...streaming_state import KVWindow
from .config import CodecDecoderConfig


def sliding_window_mask(queries: int, keys: int, window: int, device: torch.device) -> torch.Tensor:
    """(queries, keys) bool; the last query is the last key; each sees itself + window-1 before."""
    query_pos = torch.arange(keys - queries, keys, device=device)[:, None]
    key_pos = torch.arange(keys, device=device)[None, :]
    return (key_pos <= query_pos) & (key_pos > query_pos - window)


class SlidingWindowAttention(Attention):
    """Causal attention over the last `sliding_window` frames (itself included); in a streaming
    step the earlier frames' keys and values come from the layer's KVWindow."""

    def __init__(self, cfg: CodecDecoderConfig) -> None:
        super().__init__(
            cfg.hidden_size,
            cfg.num_attention_heads,
            cfg.num_key_value_heads,
            cfg.head_dim,
            bias=cfg.attention_bias,
        )
        self.window = cfg.sliding_window

    def forward(
        self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor], cache: KVWindow | None
    ) -> torch.Tensor:
        """x (B, t, hidden); rope: cos, sin (cached + t, D) for the window's local positions."""
        steps = x.shape[1]
        q, k, v = self.qkv(x)  # un-rotated
        if cache is not None:
            k, v, _ = cache.extend(k, v)  # (B, H_kv, cached + t, D)
        total = k.shape[2]
        cos, sin = rope
        q = apply_rope(q, cos[total - steps :], sin[total - steps :])
        k = apply_rope(k, cos, sin)
        return self.attend(q, k, v, sliding_window_mask(steps, total, self.window, x.device))


class TransformerLayer(nn.Module):
    def __init__(self, cfg: CodecDecoderConfig) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = SlidingWindowAttention(cfg)
        self.self_attn_layer_scale = LayerScale(cfg.hidden_size)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = SwiGLU(cfg.hidden_size, cfg.intermediate_size)
        self.mlp_layer_scale = LayerScale(cfg.hidden_size)

    def forward(
        self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor], cache: KVWindow | None
    ) -> torch.Tensor:
        x = x + self.self_attn_layer_scale(self.self_attn(self.input_layernorm(x), rope, cache))
        return x + self.mlp_layer_scale(self.mlp(self.post_attention_layernorm(x)))


class PreTransformer(nn.Module):
    """(B, T, latent) -> input_proj -> layers -> RMSNorm -> output_proj -> (B, T, latent)."""

    def __init__(self, cfg: CodecDecoderConfig) -> None:
        super().__init__()
        self.input_proj = nn.Linear(cfg.latent_dim, cfg.hidden_size)
        self.layers = nn.ModuleList(TransformerLayer(cfg) for _ in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.output_proj = nn.Linear(cfg.hidden_size, cfg.latent_dim)
        # Kept out of the buffers so a cast of the module to bf16 never degrades it.
        self.inv_freq_fp32 = inverse_frequencies(cfg.head_dim, cfg.rope_theta)

    def forward(self, x: torch.Tensor, caches: list[KVWindow] | None = None) -> torch.Tensor:
        # Every layer's window holds the same frames, so one table serves all layers.
        cached = 0 if caches is None else caches[0].length
        rope = rope_cos_sin(self.inv_freq_fp32.to(x.device), cached + x.shape[1], x.dtype)
        x = self.input_proj(x)
        for index, layer in enumerate(self.layers):
            x = layer(x, rope, None if caches is None else caches[index])
        return self.output_proj(self.norm(x))
