"""Transformer building blocks shared by every model: one of each.

RMSNorm, rotary embedding (`inverse_frequencies`, `llama3_inverse_frequencies`, `rope_cos_sin`,
`RotaryTable`, `rotate_half`, `apply_rope`), the static `KVCache`, GQA `Attention` around the one
SDPA call (`scaled_dot_product`; a decode step whose rows must stay apart: `attend_one`, and
for an 8-bit stack the whole step in one native call, `stack_step`), the
`SwiGLU` gated MLP, `LayerScale`, and the pre-norm
`DecoderLayer` / `DecoderStack`. Each block has ONE forward, driven by a per-step context (`StepContext`, the
idea of nano-vllm's utils/context.py, passed explicitly): `Span` (B aligned rows over contiguous
caches at `start`, cache-free, or non-causal), `Rows` (independent rows, each at its own
position over its own cache, attended apart), `Requests` (cache-free passes of several
requests, their non-elementwise ops per request) and `StaticRows` (a batch bucket over slot
caches with static shapes: the CUDA-graph step). Used by the Qwen3-TTS talker and code predictor (DecoderStack), the codec decoder's
sliding-window pre-transformer and the Mimi encoder (qwen3_tts/codec/transformer.py, encoder.py)
and VoxCPM2's MiniCPM stacks (voxcpm/minicpm.py); what only one model does stays in its own file.

Module attribute names follow the released checkpoints (`self_attn.q_proj`, `mlp.gate_proj`,
`input_layernorm`, ...): they are the state-dict keys.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple, Protocol

import torch
import torch.nn.functional as F
from torch import nn

from .attend_one import attend_one
from .stack_step import stack_step

# how an op that is not elementwise runs over a batch: fn(x), or fn per request (StepContext.each)
Each = Callable[[Callable[[torch.Tensor], torch.Tensor], torch.Tensor], torch.Tensor]


class Embedding(nn.Embedding):
    """nn.Embedding without the default init: weights always come from a checkpoint or from
    `random_init_` (and the default normal_ on the meta device costs seconds of lazy imports)."""

    def reset_parameters(self) -> None:
        pass


class RMSNorm(nn.Module):
    """x * rsqrt(mean(x^2) + eps), cast back to x's dtype, then scaled by `weight`.

    Statistics in float32 for bf16/fp16/float32 inputs (the official op order); float64 stays
    float64, so a float64 run has no float32 rounding left (the exactness checks need it)."""

    def __init__(self, size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.weight * self.normalize(x)

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        """x * rsqrt(mean(x^2) + eps) in x's dtype, before the weight; each row of the last dim
        on its own (the statistics of one row do not depend on the others)."""
        wide = x if x.dtype in (torch.float32, torch.float64) else x.float()
        squares = wide.pow(2)
        if wide.is_cpu and not torch.compiler.is_compiling():
            # ATen's CPU mean is sum then div_ by the count; addcdiv computes eps + 1 * sum /
            # count in that order, each step rounded once: the same bits in 2 calls instead of
            # mean's sum, div_ and add_ with Python numbers wrapped into tensors at every call
            # (~3.5 us a norm, 16 norms a code-predictor pass)
            count, eps = self._constants(wide)
            stats = torch.addcdiv(eps, squares.sum(-1, keepdim=True), count)
        else:
            stats = squares.mean(-1, keepdim=True).add_(self.eps)
        wide = wide * stats.rsqrt_()
        return wide if wide.dtype == x.dtype else wide.to(x.dtype)

    def _constants(self, wide: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The row size and eps as 0-dim tensors of wide's dtype, made once per dtype: the
        values a Python number takes in that dtype's arithmetic."""
        key = (wide.dtype, wide.shape[-1], self.eps)
        made = self.__dict__.setdefault("_made_constants", {})
        if key not in made:
            made[key] = (
                torch.tensor(float(wide.shape[-1]), dtype=wide.dtype),
                torch.tensor(self.eps, dtype=wide.dtype),
            )
        return made[key]


class LayerScale(nn.Module):
    """Per-channel scale of a residual branch (`scale`, initialised to 0.01)."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.full((dim,), 0.01))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.scale * x


class Snake1d(nn.Module):
    """x + sin^2(alpha x) / (alpha + 1e-9), alpha (1, C, 1): dac's snake, in its op order (the
    CNNs of TADA's codec and VoxCPM2's AudioVAE)."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.alpha = nn.Parameter(torch.ones(1, channels, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + (self.alpha + 1e-9).reciprocal() * torch.sin(self.alpha * x).pow(2)


class SwiGLU(nn.Module):
    """down_proj(silu(gate_proj(x)) * up_proj(x)), no biases."""

    def __init__(self, hidden: int, intermediate: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)
        self.gate_up_proj: nn.Module | None = None  # gate and up in one matmul (quantize.py)

    def forward(self, x: torch.Tensor, each: Each | None = None) -> torch.Tensor:
        """each: how the activation runs over the batch (StepContext.each; None: whole)."""
        if self.gate_up_proj is not None:
            gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
        else:
            gate, up = self.gate_proj(x), self.up_proj(x)
        act = F.silu(gate) if each is None else each(F.silu, gate)
        return self.down_proj(act * up)


# ------------------------------------------------------------------------------ rotary embedding
def inverse_frequencies(head_dim: int, theta: float) -> torch.Tensor:
    """theta^(-2i / D) for i < D/2: float32 (D/2,), built on the CPU (also inside a
    `torch.device("meta")` block)."""
    exponents = torch.arange(0, head_dim, 2, dtype=torch.int64, device="cpu").float() / head_dim
    return 1.0 / (theta**exponents)


def llama3_inverse_frequencies(
    head_dim: int,
    theta: float,
    factor: float,
    low_freq_factor: float,
    high_freq_factor: float,
    original_max_position_embeddings: int,
) -> torch.Tensor:
    """Llama 3's scaled RoPE frequencies (transformers' _compute_llama3_parameters, the same
    float32 ops): theta^(-2i/D); wavelengths longer than original/low divided by `factor`,
    shorter than original/high kept, the band between interpolated. Float32 (D/2,)."""
    import math

    inv_freq = inverse_frequencies(head_dim, theta)
    old_context = original_max_position_embeddings
    low_wavelen, high_wavelen = old_context / low_freq_factor, old_context / high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_wavelen, inv_freq / factor, inv_freq)
    smooth = (old_context / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < high_wavelen) * ~(wavelen > low_wavelen)
    return torch.where(medium, smoothed, scaled)


def rope_cos_sin(
    inv_freq: torch.Tensor, length: int, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin (length, D) in `dtype` for positions 0..length-1, on inv_freq's device.

    Angles are computed in float32 as the official, in float64 when `dtype` is float64 (a float64
    run then carries no float32 angle rounding)."""
    angle_dtype = torch.float64 if dtype == torch.float64 else torch.float32
    positions = torch.arange(length, device=inv_freq.device, dtype=angle_dtype)
    freqs = positions[:, None] * inv_freq[None, :].to(angle_dtype)  # (L, D/2)
    angles = torch.cat((freqs, freqs), dim=-1)  # (L, D)
    return angles.cos().to(dtype), angles.sin().to(dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate-half RoPE: x (B, heads, T, D); cos/sin (T, D) or broadcastable to x."""
    return x * cos + rotate_half(x) * sin


class Rope(NamedTuple):
    """A RotaryTable's rows, broadcastable to (B, heads, T, D): cos, and sin with its first
    half negated, so that rotate_half(x) * sin = roll(x, D/2) * signed_sin (negation is exact in
    either factor): apply_rope's values with 4 ops instead of 7."""

    cos: torch.Tensor
    signed_sin: torch.Tensor


def rotate(x: torch.Tensor, rope: Rope | tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """RoPE on x (B, heads, T, D) from a `Rope`, or from a plain (cos, sin) by apply_rope."""
    if not isinstance(rope, Rope):
        return apply_rope(x, *rope)
    return x * rope.cos + x.roll(x.shape[-1] // 2, -1) * rope.signed_sin


class RotaryTable(nn.Module):
    """Precomputed float32 cos/sin for positions [0, max_len), cast to the model dtype on use.

    The talker's M-RoPE always gets equal t/h/w positions, which makes it this 1-D RoPE.
    A float64 model reads the float32 table cast (the official angles are float32 whatever the
    dtype); the codec, whose exactness checks need float64 angles, uses `rope_cos_sin` directly.
    """

    def __init__(
        self,
        head_dim: int,
        theta: float,
        max_len: int,
        ext_factors: tuple[float, ...] | None = None,
        scale: float = 1.0,
    ) -> None:
        """`ext_factors` / `scale` (optional, for MiniCPM's LongRoPE): angles
        `(pos * (1 / ext_j)) * inv_freq_j` and cos/sin multiplied by `scale`, in that op order
        (float32). Left out, the table is the plain one above, unchanged."""
        super().__init__()
        inv_freq = inverse_frequencies(head_dim, theta)  # CPU: moved by `.to` later
        if ext_factors is None:
            cos, sin = rope_cos_sin(inv_freq, max_len, torch.float32)
        else:
            if len(ext_factors) != head_dim // 2:
                raise ValueError(f"{len(ext_factors)} RoPE factors for head_dim {head_dim}")
            positions = torch.arange(max_len, dtype=torch.float32, device="cpu")
            ext = torch.tensor(ext_factors, dtype=torch.float32, device="cpu")
            freqs = torch.outer(positions, 1.0 / ext) * inv_freq  # (L, D/2)
            angles = torch.cat((freqs, freqs), dim=-1)  # (L, D)
            cos, sin = angles.cos() * scale, angles.sin() * scale
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

        self._typed: dict[torch.dtype, tuple[torch.Tensor, torch.Tensor]] = {}
        self._windows: dict[tuple[int, int, torch.dtype], Rope] = {}

    def typed(self, dtype: torch.dtype) -> Rope:
        """The whole tables (L, D) cast to `dtype` (once per dtype; the sign commutes with the
        cast)."""
        tables = self._typed.get(dtype)
        if tables is None or tables[0].device != self.cos.device:
            half = self.sin.shape[-1] // 2
            signed_sin = torch.cat((-self.sin[:, :half], self.sin[:, half:]), dim=-1)
            tables = Rope(self.cos.to(dtype), signed_sin.to(dtype))
            self._typed[dtype] = tables
            self._windows = {}  # views of the tables this replaces
        return tables

    def window(self, start: int, steps: int, dtype: torch.dtype) -> Rope:
        """The rows of positions [start, start+steps), each (steps, D) in `dtype` (views of a
        table cast once per dtype, equal to casting per call)."""
        if steps > 2 or torch.compiler.is_compiling():
            cos, sin = self.typed(dtype)
            return Rope(cos[start : start + steps], sin[start : start + steps])
        # a decode step's (one or two positions: at most 2 x table rows of them, kept)
        key = (start, steps, dtype)
        rows = self._windows.get(key)
        if rows is None:
            cos, sin = self.typed(dtype)
            rows = self._windows[key] = Rope(cos[start : start + steps], sin[start : start + steps])
        return rows

    def _apply(self, fn, recurse=True):  # .to()/.cuda() invalidate the per-dtype copies
        self._typed, self._windows = {}, {}
        return super()._apply(fn, recurse)


# ------------------------------------------------------------------------------------- attention
SHORT_CACHE = 32  # positions: a KVCache this short keeps its views (KVCache._views)


class KVCache:
    """Static preallocated cache (gpt-fast style), written in place at explicit positions.

    k, v: (B, kv_heads, max_len, D). `KVCache.over(k, v)` wraps existing storage instead (a
    row's span of the serving arena, the first rows of a batch cache): writes land there.
    """

    def __init__(
        self,
        batch: int,
        kv_heads: int,
        max_len: int,
        head_dim: int,
        dtype: torch.dtype,
        device: torch.device | str,
    ) -> None:
        shape = (batch, kv_heads, max_len, head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)

    @classmethod
    def over(cls, k: torch.Tensor, v: torch.Tensor) -> KVCache:
        """A cache whose storage is the given (B, kv, L, D) views (no copy)."""
        cache = cls.__new__(cls)
        cache.k, cache.v = k, v
        return cache

    def first_rows(self, rows: int) -> KVCache:
        """The same storage restricted to batch rows [0, rows)."""
        return KVCache.over(self.k[:rows], self.v[:rows])

    @property
    def max_len(self) -> int:
        return self.k.shape[2]

    def write(self, start: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Store k/v (B, kv, T, D) at [start, start+T); return the filled prefix [0, start+T)."""
        end = start + k.shape[2]
        if end > self.max_len:
            raise RuntimeError(f"KV cache overflow: position {end} > capacity {self.max_len}")
        k_slot, v_slot, k_prefix, v_prefix = self._views(start, end)
        k_slot.copy_(k)
        v_slot.copy_(v)
        return k_prefix, v_prefix

    def _views(self, start: int, end: int) -> tuple[torch.Tensor, ...]:
        """k and v at [start, end), then at [0, end). A short cache (SHORT_CACHE positions at
        most: the code predictor's, written at the same 16 positions every frame) keeps them,
        made once per k and v: 4 slicing calls fewer a layer a pass."""
        if self.max_len > SHORT_CACHE or torch.compiler.is_compiling():
            return self._slices(start, end)
        kept = self.__dict__.get("_kept")
        if kept is None or kept[0] is not self.k or kept[1] is not self.v:
            kept = self.__dict__["_kept"] = (self.k, self.v, {})
        views = kept[2].get((start, end))
        if views is None:
            views = kept[2][start, end] = self._slices(start, end)
        return views

    def _slices(self, start: int, end: int) -> tuple[torch.Tensor, ...]:
        k, v = self.k, self.v
        return k[:, :, start:end], v[:, :, start:end], k[:, :, :end], v[:, :, :end]


def scaled_dot_product(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    is_causal: bool = False,
) -> torch.Tensor:
    """The attention of every model: q (B, heads, T, D), k/v (B, kv_heads, S, D) -> (B, heads,
    T, D). Default 1/sqrt(D) scaling; a kv head serves heads // kv_heads query heads (SDPA's GQA,
    the same numbers as repeating k/v per query head)."""
    return F.scaled_dot_product_attention(
        q, k, v, attn_mask=mask, is_causal=is_causal, enable_gqa=True
    )


def causal_mask(steps: int, start: int, device: torch.device) -> torch.Tensor | None:
    """Boolean (T, start+T) mask letting query i see keys <= start+i; None for one query."""
    if steps == 1:
        return None
    query_pos = torch.arange(start, start + steps, device=device)[:, None]
    key_pos = torch.arange(start + steps, device=device)[None, :]
    return key_pos <= query_pos


class Attention(nn.Module):
    """GQA self-attention: q/k/v/o projections, optional per-head q/k RMSNorm (before RoPE).

    `forward` is driven by a per-step context (`StepContext`: where the keys go, which keys each
    query sees). A model with another key source (the codec's sliding KVWindow) builds on `qkv`
    and `attend`."""

    def __init__(
        self,
        hidden: int,
        heads: int,
        kv_heads: int,
        head_dim: int,
        *,
        bias: bool = False,
        qk_norm_eps: float | None = None,
    ) -> None:
        """`qk_norm_eps` None: no per-head q/k RMSNorm (and no q_norm/k_norm weights)."""
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, head_dim
        self.q_proj = nn.Linear(hidden, heads * head_dim, bias=bias)
        self.k_proj = nn.Linear(hidden, kv_heads * head_dim, bias=bias)
        self.v_proj = nn.Linear(hidden, kv_heads * head_dim, bias=bias)
        self.o_proj = nn.Linear(heads * head_dim, hidden, bias=bias)
        self.q_norm: nn.Module = nn.Identity()
        self.k_norm: nn.Module = nn.Identity()
        if qk_norm_eps is not None:
            self.q_norm = RMSNorm(head_dim, qk_norm_eps)
            self.k_norm = RMSNorm(head_dim, qk_norm_eps)
        self.qkv_proj: nn.Module | None = None  # q, k, v in one matmul (quantize.py sets it)

    def _heads(self, x: torch.Tensor, heads: int) -> torch.Tensor:
        """(B, T, heads * D) -> (B, T, heads, D)."""
        return x.reshape(x.shape[0], x.shape[1], heads, self.head_dim)

    def _norm_qk(self, qk: torch.Tensor) -> torch.Tensor:
        """q_norm on q's heads and k_norm on k's of (B, T, heads + kv, D): one statistics pass,
        each head a row of its own, then each weight in place (the products of weight * x)."""
        if isinstance(self.q_norm, nn.Identity):
            return qk
        normed = self.q_norm.normalize(qk)
        weight = self._qk_weight()
        if weight is not None:  # the same products in one call
            return normed.mul_(weight)
        normed[:, :, : self.heads].mul_(self.q_norm.weight)
        normed[:, :, self.heads :].mul_(self.k_norm.weight)
        return normed

    def _qk_weight(self) -> torch.Tensor | None:
        """(heads + kv, D): q_norm's weight on each of q's heads, k_norm's on each of k's, made
        again when either weight is another tensor, was moved or was written since; None
        where autograd or torch.compile runs, or for inference tensors (no version to read)."""
        q_w, k_w = self.q_norm.weight, self.k_norm.weight
        if torch.is_grad_enabled() or torch.compiler.is_compiling():
            return None
        if q_w.is_inference() or k_w.is_inference():
            return None
        versions = (q_w._version, k_w._version)
        made = self.__dict__.get("_qk_made")
        if made is None or made[0] is not q_w or made[1] is not k_w or made[2] != versions:
            weight = torch.cat((q_w.expand(self.heads, -1), k_w.expand(self.kv_heads, -1)))
            made = self.__dict__["_qk_made"] = (q_w, k_w, versions, weight)
        return made[3]

    def _apply(self, fn, recurse=True):  # noqa: ANN001, ANN202 - .to() may keep the Parameters
        self.__dict__.pop("_qk_made", None)
        return super()._apply(fn, recurse)

    def qkv(
        self, x: torch.Tensor, rope: Rope | tuple[torch.Tensor, torch.Tensor] | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x (B, T, H) -> q (B, heads, T, D), k and v (B, kv, T, D); RoPE applied to q and k
        when `rope` (a `Rope`, or cos, sin) is given (None: no rotary embedding). From the fused
        projection (qkv_proj), q's and k's heads are normed and rotated together: the same
        elementwise ops, half the calls."""
        if self.qkv_proj is not None:
            qkv = self._heads(self.qkv_proj(x), -1)
            qk, v = qkv.split((self.heads + self.kv_heads, self.kv_heads), dim=2)
            qk = self._norm_qk(qk).transpose(1, 2)  # (B, heads + kv, T, D)
            if rope is not None:
                qk = rotate(qk, rope)
            q, k = qk.split((self.heads, self.kv_heads), dim=1)
            return q, k, v.transpose(1, 2)
        q = self.q_norm(self._heads(self.q_proj(x), self.heads)).transpose(1, 2)
        k = self.k_norm(self._heads(self.k_proj(x), self.kv_heads)).transpose(1, 2)
        if rope is not None:
            q, k = rotate(q, rope), rotate(k, rope)
        return q, k, self._heads(self.v_proj(x), self.kv_heads).transpose(1, 2)

    def _merge(self, out: torch.Tensor) -> torch.Tensor:
        """(B, heads, T, D) attention output -> o_proj -> (B, T, H). One position needs no
        transpose: the same elements in the same order, the same view or copy."""
        batch, _, steps, _ = out.shape
        heads_last = out if steps == 1 else out.transpose(1, 2)
        return self.o_proj(heads_last.reshape(batch, steps, -1))

    def attend(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        mask: torch.Tensor | None = None,
        is_causal: bool = False,
        rows_apart: bool = False,
    ) -> torch.Tensor:
        """`scaled_dot_product` then o_proj: q (B, heads, T, D), k/v (B, kv, S, D) -> (B, T, H).
        rows_apart: no row's result depends on the batch. SDPA's CPU kernel is not
        batch-invariant: with one query over 8-16 keys (the code predictor's passes) a row's
        output can change in the last bit with the batch size
        (tests/test_layers_batch_invariance.py), enough to flip a sampled code now and then. One
        query a row (a decode step, float32 CPU): every row in one call of `attend_one`, apart by
        construction; else one SDPA call per row, each the single-stream call."""
        if rows_apart and mask is None and not is_causal:  # one query a row: one call, rows
            out = attend_one(q, [k], [v])  # apart by construction (None: SDPA, row by row)
            if out is not None:
                return self._merge(out)
        if rows_apart and q.shape[0] > 1:
            rows = zip(q.split(1), k.split(1), v.split(1), strict=True)  # the views r:r+1
            return self._merge(
                torch.cat([scaled_dot_product(*row, mask, is_causal) for row in rows])
            )
        return self._merge(scaled_dot_product(q, k, v, mask, is_causal))

    def forward(
        self, x: torch.Tensor, rope: Rope | tuple | None, ctx: StepContext, depth: int
    ) -> torch.Tensor:
        """The one forward: x (B, T, H) -> (B, T, H). `ctx` says where layer `depth`'s new
        keys and values go and which keys each query attends (`Span`, `Rows`, `Requests`,
        `StaticRows` below); `rope` (a `Rope`, or cos, sin) for x's positions, or None."""
        q, k, v = self.qkv(x, rope)
        return ctx.attend(self, depth, q, k, v)


# ------------------------------------------------------------------------------ per-step contexts
def whole(fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """`StepContext.each` of a context whose rows may share every op: fn(x) itself."""
    return fn(x)


class StepContext(Protocol):
    """What one forward of a stack needs to know besides x (nano-vllm's utils/context.py, passed
    explicitly): the RoPE rows of its positions, where each layer's new keys and values go and
    which keys each query attends (`attend`, o_proj included), and how ops that are not
    elementwise run over the batch (`each`: whole, or per request where rows must not share a
    kernel call)."""

    def rope(self, table: RotaryTable | None, x: torch.Tensor) -> Rope | None: ...

    def attend(
        self, attention: Attention, depth: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
    ) -> torch.Tensor: ...

    def each(self, fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> torch.Tensor: ...


@dataclass(frozen=True)
class Span:
    """B aligned rows at positions [start, start+T) over contiguous caches (one per layer, (B,
    kv, L, D)); caches None: a cache-free pass over x alone (start 0). causal False: every query
    sees every key (MiniCPM's LocEnc / LocDiT). rows_apart: a row's attention does not depend
    on the batch (`Attention.attend`: the one-query kernel, or SDPA row by row).
    With Python-int `start` every shape is static: the code predictor's passes in a graph."""

    caches: list[KVCache] | None = None
    start: int = 0
    causal: bool = True
    rows_apart: bool = False

    def rope(self, table: RotaryTable | None, x: torch.Tensor) -> Rope | None:
        return None if table is None else table.window(self.start, x.shape[1], x.dtype)

    def attend(
        self, attention: Attention, depth: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
    ) -> torch.Tensor:
        steps, start = q.shape[2], self.start
        if self.caches is None:
            if start:
                raise ValueError("attention without a cache starts at position 0")
            keys, values = k, v
        else:
            keys, values = self.caches[depth].write(start, k, v)  # (B, kv, start+T, D)
        # From position 0 the mask is plain causal: the same call as the official (is_causal).
        mask = None if start == 0 or not self.causal else causal_mask(steps, start, q.device)
        is_causal = self.causal and start == 0 and steps > 1
        return attention.attend(q, keys, values, mask, is_causal, self.rows_apart)

    each = staticmethod(whole)


@dataclass(frozen=True)
class Rows:
    """R independent sequences, one new position each: row r written at positions[r] of its own
    caches[r] (per layer (1, kv, L_r, D)) and attending its own filled prefix: every row in one
    call of `attend_one` (each row apart by construction), or where it does not apply the very
    SDPA call its single-stream step makes, so a row's result is the same alone and in any batch
    (a padded batched attention would change the softmax sums). Projections and MLP batched."""

    caches: list[list[KVCache]]  # [row][layer]
    positions: list[int]

    def rope(self, table: RotaryTable | None, x: torch.Tensor) -> Rope | None:
        if table is None:
            return None
        index = torch.tensor(self.positions, device=x.device)
        return Rope(
            *(rows.index_select(0, index)[:, None, None, :] for rows in table.typed(x.dtype))
        )

    def attend(
        self, attention: Attention, depth: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
    ) -> torch.Tensor:
        written = [
            caches[depth].write(position, row_k, row_v)  # each row's views r:r+1
            for caches, position, row_k, row_v in zip(
                self.caches, self.positions, k.split(1), v.split(1), strict=True
            )
        ]
        keys, values = (list(side) for side in zip(*written, strict=True))
        out = attend_one(q, keys, values)  # every row in one call, or None: SDPA row by row
        if out is None:
            outs = [scaled_dot_product(*row) for row in zip(q.split(1), keys, values, strict=True)]
            out = torch.cat(outs) if len(outs) > 1 else outs[0]
        return attention._merge(out)  # (R, 1, H)

    each = staticmethod(whole)


def rows_context(caches: list[list[KVCache]], positions: list[int]) -> StepContext:
    """`Rows`, or for one row the `Span` of its position: the same calls, its RoPE rows sliced
    instead of gathered (and a compiled stack's path, see compile_stack)."""
    if len(caches) == 1:  # rows_apart: the attention Rows makes (attend_one), for one row
        return Span(caches[0], positions[0], rows_apart=True)
    return Rows(caches, positions)


@dataclass(frozen=True)
class Requests:
    """Cache-free bidirectional passes of several independent requests stacked on the batch
    axis: request r owns sizes[r] consecutive rows. Attention and every op that is not
    elementwise (`each`: the norms, the MLP's activation) run per request with the very call one
    request alone makes (a kernel's tail loop and thread split fall elsewhere in a longer tensor,
    and the CPU attention kernel is not batch-invariant, see `Attention.attend`); only the
    projections see every request's rows (the caller checks that GEMM is row-invariant here,
    serving/rows.py)."""

    sizes: list[int]

    def bounds(self) -> list[tuple[int, int]]:
        ends = list(itertools.accumulate(self.sizes))
        return [(end - size, end) for size, end in zip(self.sizes, ends, strict=True)]

    def rope(self, table: RotaryTable | None, x: torch.Tensor) -> Rope | None:
        return None if table is None else table.window(0, x.shape[1], x.dtype)

    def attend(
        self, attention: Attention, depth: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
    ) -> torch.Tensor:
        outs = [scaled_dot_product(*(aligned(t[a:b]) for t in (q, k, v))) for a, b in self.bounds()]
        return attention._merge(torch.cat(outs))

    def each(self, fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> torch.Tensor:
        return torch.cat([fn(x[a:b]) for a, b in self.bounds()])


def aligned(x: torch.Tensor) -> torch.Tensor:
    """x itself when its data starts on a 64-byte boundary, as a new tensor's does, else a copy
    with the same strides that does: some BLAS calls round by the address of their operands
    (MKL sgemm here for a few row counts, when it is not 16-byte aligned)."""
    if x.data_ptr() % 64 == 0:
        return x
    copy = torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device=x.device)
    return copy.copy_(x)


@dataclass(frozen=True)
class StaticRows:
    """A batch bucket's decode step with static shapes (capturable in a CUDA graph): row b
    writes its new k/v at positions[b] of slot slots[b] of the per-layer slot caches k[i], v[i]
    (slots, kv, L, D) by tensor indexing, then attends over the slot's whole static length L
    with `mask` (B, 1, 1, L): key_pos <= positions[b]. Padded rows of a bucket point at a
    scratch slot. No host synchronisation and no branching on tensor values."""

    k: list[torch.Tensor]
    v: list[torch.Tensor]
    slots: torch.Tensor  # (B,) int64
    positions: torch.Tensor  # (B,) int64
    mask: torch.Tensor  # (B, 1, 1, L) bool

    @classmethod
    def make(
        cls,
        k: list[torch.Tensor],
        v: list[torch.Tensor],
        slots: torch.Tensor,
        positions: torch.Tensor,
    ) -> StaticRows:
        key_pos = torch.arange(k[0].shape[2], device=positions.device)  # (L,)
        mask = (key_pos[None, :] <= positions[:, None])[:, None, None, :]  # (B, 1, 1, L)
        return cls(k, v, slots, positions, mask)

    def rope(self, table: RotaryTable | None, x: torch.Tensor) -> Rope | None:
        if table is None:
            return None
        cos, sin = table.typed(x.dtype)
        return Rope(cos[self.positions][:, None, None, :], sin[self.positions][:, None, None, :])

    def attend(
        self, attention: Attention, depth: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
    ) -> torch.Tensor:
        cache_k, cache_v = self.k[depth], self.v[depth]
        cache_k[self.slots, :, self.positions] = k[:, :, 0]  # (B, kv, D) at (slot, :, position)
        cache_v[self.slots, :, self.positions] = v[:, :, 0]
        keys, values = cache_k[self.slots], cache_v[self.slots]  # (B, kv, L, D)
        return attention.attend(q, keys, values, self.mask)

    each = staticmethod(whole)


# -------------------------------------------------------------------------------- decoder stacks
class StackGeometry(Protocol):
    """What a DecoderStack reads of its config (Qwen3's DecoderStackConfig, MiniCPM's StackSpec)."""

    hidden_size: int
    intermediate_size: int
    num_attention_heads: int
    num_key_value_heads: int
    num_hidden_layers: int
    head_dim: int
    rms_norm_eps: float


class DecoderLayer(nn.Module):
    """Pre-norm block: x + s * attn(norm(x)), then x + s * mlp(norm(x)), with s the residual
    scale (MiniCPM's muP `scale_depth / sqrt(layers)`; 1: plain addition, Qwen3)."""

    def __init__(
        self, cfg: StackGeometry, qk_norm: bool = True, residual_scale: float = 1.0
    ) -> None:
        super().__init__()
        hidden, eps = cfg.hidden_size, cfg.rms_norm_eps
        self.input_layernorm = RMSNorm(hidden, eps)
        self.self_attn = Attention(
            hidden,
            cfg.num_attention_heads,
            cfg.num_key_value_heads,
            cfg.head_dim,
            qk_norm_eps=eps if qk_norm else None,
        )
        self.post_attention_layernorm = RMSNorm(hidden, eps)
        self.mlp = SwiGLU(hidden, cfg.intermediate_size)
        self.residual_scale = residual_scale

    def _add(self, x: torch.Tensor, branch: torch.Tensor) -> torch.Tensor:
        scale = self.residual_scale
        return x + (branch if scale == 1.0 else branch * scale)

    def forward(
        self, x: torch.Tensor, rope: Rope | None, ctx: StepContext, depth: int
    ) -> torch.Tensor:
        """The one forward: x (B, T, H) -> (B, T, H), this layer being `depth` of its stack."""
        h = self.self_attn(ctx.each(self.input_layernorm, x), rope, ctx, depth)
        x = self._add(x, h)
        return self._add(x, self.mlp(ctx.each(self.post_attention_layernorm, x), ctx.each))


class DecoderStack(nn.Module):
    """`layers` + final `norm`; a forward returns final-norm hidden states."""

    def __init__(
        self, cfg: StackGeometry, qk_norm: bool = True, residual_scale: float = 1.0
    ) -> None:
        super().__init__()
        self.cfg = cfg
        self.layers = nn.ModuleList(
            DecoderLayer(cfg, qk_norm, residual_scale) for _ in range(cfg.num_hidden_layers)
        )
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def new_caches(
        self, batch: int, max_len: int, dtype: torch.dtype, device: torch.device | str
    ) -> list[KVCache]:
        cfg = self.cfg
        return [
            KVCache(batch, cfg.num_key_value_heads, max_len, cfg.head_dim, dtype, device)
            for _ in self.layers
        ]

    def forward(
        self, x: torch.Tensor, ctx: StepContext, rope_table: RotaryTable | None = None
    ) -> torch.Tensor:
        """x (B, T, H) -> final-norm hidden (B, T, H), every layer driven by `ctx` (positions,
        caches, mask; see StepContext). rope_table None: no RoPE. A step whose rows stay
        apart: the whole stack in one native call where it applies (stack_step)."""
        apart = _apart_rows(ctx, x)
        if apart is not None:
            out = stack_step(self, x, *apart, rope_table)
            if out is not None:
                return out
        rope = ctx.rope(rope_table, x)
        for depth, layer in enumerate(self.layers):
            x = layer(x, rope, ctx, depth)
        return ctx.each(self.norm, x)


def _apart_rows(ctx: StepContext, x: torch.Tensor) -> tuple[list, list[int]] | None:
    """(caches in blocks of rows, [block][layer]; each row's first position) of a step whose
    rows stay apart (`Rows`: one position a row, or a cached causal `Span` with rows_apart),
    else None."""
    if isinstance(ctx, Rows):
        return ctx.caches, ctx.positions
    if isinstance(ctx, Span) and ctx.rows_apart and ctx.causal and ctx.caches is not None:
        return [ctx.caches], [ctx.start] * x.shape[0]
    return None


def compile_stack(stack: DecoderStack) -> None:
    """Opt-in: run `stack.forward` through torch.compile for `Span` contexts (dynamic shapes:
    the KV length grows each step); other contexts run eagerly. If compiling or running the
    compiled code fails, fall back to eager for good, with a warning; results are the same."""
    import warnings

    if getattr(stack, "_compiled", False):
        return
    eager = stack.forward

    def span_forward(x, rope_table, caches, start, causal, rows_apart):  # noqa: ANN001, ANN202
        return eager(x, Span(caches, start, causal, rows_apart), rope_table)

    compiled = torch.compile(span_forward, dynamic=True)

    def forward(x: torch.Tensor, ctx: StepContext, rope_table: RotaryTable | None = None):  # noqa: ANN202
        if not isinstance(ctx, Span):
            return eager(x, ctx, rope_table)
        try:
            return compiled(x, rope_table, ctx.caches, ctx.start, ctx.causal, ctx.rows_apart)
        except Exception as error:  # any compiler failure means "use eager"
            warnings.warn(f"torch.compile failed, using eager mode: {error}", stacklevel=2)
            stack.forward = eager
            return eager(x, ctx, rope_table)

    stack.forward = forward
    stack._compiled = True
