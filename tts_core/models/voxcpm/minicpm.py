"""MiniCPM-4 stacks of VoxCPM2 (spec voxcpm2.md sections 3 and 7), built from the shared Qwen3
blocks (`tts_core.models.qwen3_tts.layers`: RMSNorm, GQA attention without q/k norm, SwiGLU,
static KV cache, RoPE table with LongRoPE factors).

What differs from a Qwen3 layer lives here: no q/k norm, the optional muP residual scale
`scale_depth / sqrt(num_layers)`, optional RoPE (`residual_lm` has none), bidirectional
prefill for LocEnc / LocDiT. Keys follow the checkpoint (`layers.N.self_attn.q_proj`, `norm`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from ..qwen3_tts.config import DecoderStackConfig
from ..qwen3_tts.layers import Attention, KVCache, RMSNorm, RotaryTable, SwiGLU
from .config import MiniCPMConfig


@dataclass(frozen=True)
class StackSpec:
    """One MiniCPM stack: `lm_config` with the fields the official code overrides per stack."""

    hidden_size: int
    intermediate_size: int
    num_attention_heads: int
    num_key_value_heads: int
    num_hidden_layers: int
    head_dim: int
    rms_norm_eps: float
    use_rope: bool
    residual_scale: float  # scale_depth / sqrt(layers) with use_mup, else 1

    @classmethod
    def derive(
        cls,
        lm: MiniCPMConfig,
        *,
        hidden: int | None = None,
        ffn: int | None = None,
        heads: int | None = None,
        layers: int | None = None,
        head_dim: int | None = None,
        use_rope: bool = True,
    ) -> StackSpec:
        layers = layers or lm.num_hidden_layers
        return cls(
            hidden_size=hidden or lm.hidden_size,
            intermediate_size=ffn or lm.intermediate_size,
            num_attention_heads=heads or lm.num_attention_heads,
            num_key_value_heads=lm.num_key_value_heads,  # inherited by every stack
            num_hidden_layers=layers,
            head_dim=head_dim or lm.head_dim,
            rms_norm_eps=lm.rms_norm_eps,
            use_rope=use_rope,
            residual_scale=lm.scale_depth / math.sqrt(layers) if lm.use_mup else 1.0,
        )

    def attention_config(self, rope_theta: float, max_len: int) -> DecoderStackConfig:
        return DecoderStackConfig(
            hidden_size=self.hidden_size,
            num_hidden_layers=self.num_hidden_layers,
            num_attention_heads=self.num_attention_heads,
            num_key_value_heads=self.num_key_value_heads,
            head_dim=self.head_dim,
            intermediate_size=self.intermediate_size,
            rms_norm_eps=self.rms_norm_eps,
            rope_theta=rope_theta,
            max_position_embeddings=max_len,
        )


def longrope_table(lm: MiniCPMConfig, head_dim: int, max_len: int) -> RotaryTable:
    """MiniCPM LongRoPE: long factors when max_position_embeddings exceeds the original
    length, else short; cos/sin scaled by sqrt(1 + ln(max/orig) / ln(orig))."""
    scaling = lm.rope_scaling
    original = scaling.original_max_position_embeddings
    factors = scaling.long_factor if lm.max_position_embeddings > original else scaling.short_factor
    scale = math.sqrt(1 + math.log(lm.max_position_embeddings / original) / math.log(original))
    return RotaryTable(head_dim, lm.rope_theta, max_len, ext_factors=factors, scale=scale)


class MiniCPMRMSNorm(RMSNorm):
    """The shared RMSNorm (float32 statistics for float32 and lower), except that a float64
    model keeps float64 statistics, so the float64 parity runs are exact (tests only)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype != torch.float64:
            return super().forward(x)
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


class MiniCPMLayer(nn.Module):
    def __init__(self, spec: StackSpec, attention_cfg: DecoderStackConfig) -> None:
        super().__init__()
        self.input_layernorm = MiniCPMRMSNorm(spec.hidden_size, spec.rms_norm_eps)
        self.self_attn = Attention(attention_cfg, qk_norm=False)
        self.post_attention_layernorm = MiniCPMRMSNorm(spec.hidden_size, spec.rms_norm_eps)
        self.mlp = SwiGLU(spec.hidden_size, spec.intermediate_size)
        self.residual_scale = spec.residual_scale

    def forward(
        self, x: torch.Tensor, rope, cache: KVCache | None, start: int, causal: bool
    ) -> torch.Tensor:
        h = self.self_attn(self.input_layernorm(x), rope, cache, start, causal=causal)
        x = x + (h * self.residual_scale if self.residual_scale != 1.0 else h)
        h = self.mlp(self.post_attention_layernorm(x))
        return x + (h * self.residual_scale if self.residual_scale != 1.0 else h)


class MiniCPMStack(nn.Module):
    """`layers` + final `norm` (+ `embed_tokens` when `vocab_size` > 0).

    `forward(x, caches, start, causal)` runs positions [start, start+T) and returns the
    final-norm hidden states; with `caches` None it is a cache-free (bidirectional) pass."""

    def __init__(
        self, spec: StackSpec, lm: MiniCPMConfig, max_len: int, vocab_size: int = 0
    ) -> None:
        super().__init__()
        self.spec = spec
        attention_cfg = spec.attention_config(lm.rope_theta, max_len)
        if vocab_size > 0:
            self.embed_tokens = nn.Embedding(vocab_size, spec.hidden_size)
        self.layers = nn.ModuleList(
            MiniCPMLayer(spec, attention_cfg) for _ in range(spec.num_hidden_layers)
        )
        self.norm = MiniCPMRMSNorm(spec.hidden_size, spec.rms_norm_eps)
        self.rope = longrope_table(lm, spec.head_dim, max_len) if spec.use_rope else None
        self.max_len = max_len

    def new_caches(
        self, dtype: torch.dtype, device: torch.device, positions: int | None = None
    ) -> list[KVCache]:
        """Per-layer caches for `positions` (at most, and by default, max_len): a request
        allocates what its prompt and length cap can fill, not the whole 8192."""
        s = self.spec
        size = self.max_len if positions is None else min(int(positions), self.max_len)
        return [
            KVCache(1, s.num_key_value_heads, size, s.head_dim, dtype, device) for _ in self.layers
        ]

    def forward(
        self,
        x: torch.Tensor,
        caches: list[KVCache] | None = None,
        start: int = 0,
        causal: bool = True,
    ) -> torch.Tensor:
        steps = x.shape[1]
        if start + steps > self.max_len:
            raise RuntimeError(f"KV cache is full: position {start + steps} > {self.max_len}")
        rope = None if self.rope is None else self.rope.window(start, steps, x.dtype)
        for i, layer in enumerate(self.layers):
            x = layer(x, rope, None if caches is None else caches[i], start, causal)
        return self.norm(x)
