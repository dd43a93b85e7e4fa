"""MiniCPM-4 stacks of VoxCPM2 (spec voxcpm2.md sections 3 and 7), built on the shared
transformer blocks (`tts_core.models.layers`: DecoderStack of RMSNorm, GQA attention, SwiGLU,
static KV cache; RoPE table with LongRoPE factors).

What differs from a Qwen3 stack is set here: no q/k norm, the optional muP residual scale
`scale_depth / sqrt(num_layers)`, optional RoPE (`residual_lm` has none), bidirectional
prefill for LocEnc / LocDiT. Keys follow the checkpoint (`layers.N.self_attn.q_proj`, `norm`).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ..layers import DecoderStack, KVCache, RotaryTable, scaled_dot_product
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

    `forward(x, caches, start, causal)` runs positions [start, start+T) and returns the
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
        return self.run_layers(x, self.rope, caches, start, causal)

    def run_requests(self, requests: list[torch.Tensor]) -> list[torch.Tensor]:
        """The cache-free bidirectional pass (LocDiT's) of several independent requests at
        once: requests[r] (g, T, H) -> its final-norm hidden states (g, T, H), bit for bit what
        `self(requests[r], causal=False)` gives. Only the projections run on every request's
        rows together (row-invariant on this CPU's BLAS for these shapes: the caller checks it,
        serving/rows.py); the norms, the activation, the attention and every other op that is
        not elementwise run per request with the very call one request makes (a kernel's tail
        loop and its thread split fall elsewhere in a longer tensor, and the CPU attention
        kernel is not batch-invariant, see layers.Attention.attend)."""
        if len(requests) == 1:
            return [self(requests[0], causal=False)]
        sizes = [x.shape[0] for x in requests]
        x = torch.cat(requests)
        rope = None if self.rope is None else self.rope.window(0, x.shape[1], x.dtype)
        for layer in self.layers:
            attention, mlp = layer.self_attn, layer.mlp
            q, k, v = attention.qkv(_per_request(layer.input_layernorm, x, sizes), rope)
            outs = [scaled_dot_product(*(fresh(t[a:b]) for t in (q, k, v)))
                    for a, b in _bounds(sizes)]  # fmt: skip
            x = layer._add(x, attention._merge(torch.cat(outs)))
            h = _per_request(layer.post_attention_layernorm, x, sizes)
            gate, up = mlp.gate_proj(h), mlp.up_proj(h)
            x = layer._add(x, mlp.down_proj(_per_request(F.silu, gate, sizes) * up))
        return list(_per_request(self.norm, x, sizes).split(sizes))


def _bounds(sizes: list[int]) -> list[tuple[int, int]]:
    ends = list(itertools.accumulate(sizes))
    return [(end - size, end) for size, end in zip(sizes, ends, strict=True)]


def _per_request(fn, x: torch.Tensor, sizes: list[int]) -> torch.Tensor:  # noqa: ANN001
    """fn on each request's rows of x (contiguous along dim 0), joined again."""
    return torch.cat([fn(x[a:b]) for a, b in _bounds(sizes)])


def fresh(x: torch.Tensor) -> torch.Tensor:
    """x itself when its data starts on a 64-byte boundary, as a new tensor's does, else a copy
    with the same strides that does: some BLAS calls round by the address of their operands
    (MKL sgemm here for a few row counts, when it is not 16-byte aligned)."""
    if x.data_ptr() % 64 == 0:
        return x
    copy = torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device=x.device)
    return copy.copy_(x)
