"""MiniCPM-4 stacks of VoxCPM2 (spec voxcpm2.md sections 3 and 7), built on the shared
transformer blocks (`tts_core.models.layers`: DecoderStack of RMSNorm, GQA attention, SwiGLU,
static KV cache; RoPE table with LongRoPE factors).

What differs from a Qwen3 stack is set here: no q/k norm, the optional muP residual scale
`scale_depth / sqrt(num_layers)`, optional RoPE (`residual_lm` has none), bidirectional
prefill for LocEnc / LocDiT. Keys follow the checkpoint (`layers.N.self_attn.q_proj`, `norm`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from ..layers import DecoderStack, KVCache, Requests, RotaryTable, Span
from .config import LocalStackConfig, MiniCPMConfig


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

    @classmethod
    def local(cls, lm: MiniCPMConfig, stack: LocalStackConfig) -> StackSpec:
        """LocEnc's or LocDiT's stack: its own geometry, the rest of lm_config's."""
        return cls.derive(
            lm,
            hidden=stack.hidden_dim,
            ffn=stack.ffn_dim,
            heads=stack.num_heads,
            layers=stack.num_layers,
            head_dim=stack.head_dim,
        )


def longrope_table(lm: MiniCPMConfig, head_dim: int, max_len: int) -> RotaryTable:
    """MiniCPM LongRoPE: long factors when max_position_embeddings exceeds the original
    length, else short; cos/sin scaled by sqrt(1 + ln(max/orig) / ln(orig))."""
    scaling = lm.rope_scaling
    original = scaling.original_max_position_embeddings
    factors = scaling.long_factor if lm.max_position_embeddings > original else scaling.short_factor
    scale = math.sqrt(1 + math.log(lm.max_position_embeddings / original) / math.log(original))
    return RotaryTable(head_dim, lm.rope_theta, max_len, ext_factors=factors, scale=scale)


class MiniCPMStack(DecoderStack):
    """`layers` + final `norm` (+ `embed_tokens` when `vocab_size` > 0) and the stack's RoPE.

    `run(x, caches, start, causal)` runs positions [start, start+T) and returns the
    final-norm hidden states; with `caches` None it is a cache-free (bidirectional) pass."""

    def __init__(
        self, spec: StackSpec, lm: MiniCPMConfig, max_len: int, vocab_size: int = 0
    ) -> None:
        super().__init__(spec, qk_norm=False, residual_scale=spec.residual_scale)
        if vocab_size > 0:
            self.embed_tokens = nn.Embedding(vocab_size, spec.hidden_size)
        self.rope = longrope_table(lm, spec.head_dim, max_len) if spec.use_rope else None
        self.max_len = max_len

    def request_caches(
        self, dtype: torch.dtype, device: torch.device, positions: int | None = None
    ) -> list[KVCache]:
        """Per-layer caches for one request of `positions` (at most, and by default, max_len):
        a request allocates what its prompt and length cap can fill, not the whole 8192."""
        size = self.max_len if positions is None else min(int(positions), self.max_len)
        return self.new_caches(1, size, dtype, device)

    def run(
        self,
        x: torch.Tensor,
        caches: list[KVCache] | None = None,
        start: int = 0,
        causal: bool = True,
    ) -> torch.Tensor:
        """x (B, T, H) at positions [start, start+T) -> final-norm hidden (B, T, H): the one
        forward over a `Span` context (caches None: cache-free; causal False: bidirectional)."""
        steps = x.shape[1]
        if start + steps > self.max_len:
            raise RuntimeError(f"KV cache is full: position {start + steps} > {self.max_len}")
        return self(x, Span(caches, start, causal), self.rope)

    def run_requests(self, requests: list[torch.Tensor]) -> list[torch.Tensor]:
        """The cache-free bidirectional pass (LocDiT's) of several independent requests at
        once: requests[r] (g, T, H) -> its final-norm hidden states (g, T, H), bit for bit what
        `self.run(requests[r], causal=False)` gives: the one forward over a `Requests` context
        (only the projections see every request's rows; they are row-invariant on this CPU's
        BLAS for these shapes: the caller checks it, serving/rows.py)."""
        if len(requests) == 1:
            return [self.run(requests[0], causal=False)]
        sizes = [x.shape[0] for x in requests]
        return list(self(torch.cat(requests), Requests(sizes), self.rope).split(sizes))
