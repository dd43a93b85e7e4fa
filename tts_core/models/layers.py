"""Transformer building blocks shared by every model: one of each.

RMSNorm, rotary embedding (`inverse_frequencies`, `rope_cos_sin`, `RotaryTable`, `rotate_half`,
`apply_rope`), the static `KVCache`, GQA `Attention` around the one SDPA call
(`scaled_dot_product`), the `SwiGLU` gated MLP, `LayerScale`, and the pre-norm `DecoderLayer` /
`DecoderStack`. Used by the Qwen3-TTS talker and code predictor (DecoderStack), the codec decoder's
sliding-window pre-transformer and the Mimi encoder (qwen3_tts/codec/transformer.py, encoder.py)
and VoxCPM2's MiniCPM stacks (voxcpm/minicpm.py); what only one model does stays in its own file.

Module attribute names follow the released checkpoints (`self_attn.q_proj`, `mlp.gate_proj`,
`input_layernorm`, ...): they are the state-dict keys.
"""

from __future__ import annotations

from typing import Protocol

import torch
import torch.nn.functional as F
from torch import nn


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
        dtype = x.dtype
        x = x.to(torch.promote_types(dtype, torch.float32))
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


class LayerScale(nn.Module):
    """Per-channel scale of a residual branch (`scale`, initialised to 0.01)."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.full((dim,), 0.01))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.scale * x


class SwiGLU(nn.Module):
    """down_proj(silu(gate_proj(x)) * up_proj(x)), no biases."""

    def __init__(self, hidden: int, intermediate: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)
        self.gate_up_proj: nn.Module | None = None  # gate and up in one matmul (quantize.py)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.gate_up_proj is not None:
            gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
        else:
            gate, up = self.gate_proj(x), self.up_proj(x)
        return self.down_proj(F.silu(gate) * up)


# ------------------------------------------------------------------------------ rotary embedding
def inverse_frequencies(head_dim: int, theta: float) -> torch.Tensor:
    """theta^(-2i / D) for i < D/2: float32 (D/2,), built on the CPU (also inside a
    `torch.device("meta")` block)."""
    exponents = torch.arange(0, head_dim, 2, dtype=torch.int64, device="cpu").float() / head_dim
    return 1.0 / (theta**exponents)


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

    def typed(self, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """The whole cos, sin tables (L, D) cast to `dtype` (cast once per dtype)."""
        tables = self._typed.get(dtype)
        if tables is None or tables[0].device != self.cos.device:
            tables = (self.cos.to(dtype), self.sin.to(dtype))
            self._typed[dtype] = tables
        return tables

    def window(self, start: int, steps: int, dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
        """cos, sin for positions [start, start+steps), each (steps, D) in `dtype` (views of a
        table cast once per dtype, equal to casting per call)."""
        cos, sin = self.typed(dtype)
        return cos[start : start + steps], sin[start : start + steps]

    def _apply(self, fn, recurse=True):  # .to()/.cuda() invalidate the per-dtype copies
        self._typed = {}
        return super()._apply(fn, recurse)


# ------------------------------------------------------------------------------------- attention
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
        self.k[:, :, start:end].copy_(k)
        self.v[:, :, start:end].copy_(v)
        return self.k[:, :, :end], self.v[:, :, :end]


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

    `forward` attends over a static KVCache, or over x alone (cache None); `forward_rows` is the
    talker's step of independent rows. A model with another key source (the codec's sliding
    KVWindow) builds on `qkv` and `attend`."""

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

    def _project(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        if self.qkv_proj is not None:
            return self.qkv_proj(x).split(self.qkv_sizes, dim=-1)
        return self.q_proj(x), self.k_proj(x), self.v_proj(x)

    def qkv(
        self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor] | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x (B, T, H) -> q (B, heads, T, D), k and v (B, kv, T, D); RoPE applied to q and k
        when `rope` (cos, sin) is given (None: no rotary embedding here)."""
        batch, steps, _ = x.shape
        q, k, v = self._project(x)
        q = self.q_norm(q.reshape(batch, steps, self.heads, self.head_dim))
        k = self.k_norm(k.reshape(batch, steps, self.kv_heads, self.head_dim))
        v = v.reshape(batch, steps, self.kv_heads, self.head_dim)
        q, k = q.transpose(1, 2), k.transpose(1, 2)
        if rope is not None:
            cos, sin = rope
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        return q, k, v.transpose(1, 2)

    def _merge(self, out: torch.Tensor) -> torch.Tensor:
        """(B, heads, T, D) attention output -> o_proj -> (B, T, H)."""
        return self.o_proj(out.transpose(1, 2).reshape(out.shape[0], out.shape[2], -1))

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
        rows_apart: one call per batch row. The CPU kernel is not batch-invariant: with one
        query over 8-16 keys (the code predictor's passes) a row's output can change in the
        last bit with the batch size (tests/test_layers_batch_invariance.py), enough to flip a
        sampled code now and then; row by row, each row gets the single-stream call."""
        if rows_apart and q.shape[0] > 1:
            rows = [scaled_dot_product(q[r : r + 1], k[r : r + 1], v[r : r + 1], mask, is_causal)
                    for r in range(q.shape[0])]  # fmt: skip
            return self._merge(torch.cat(rows))
        return self._merge(scaled_dot_product(q, k, v, mask, is_causal))

    def forward(
        self,
        x: torch.Tensor,
        rope: tuple[torch.Tensor, torch.Tensor] | None,
        cache: KVCache | None,
        start: int,
        causal: bool = True,
        rows_apart: bool = False,
    ) -> torch.Tensor:
        """x (B, T, H) at positions [start, start+T). `cache` None: attend over x alone (start
        must be 0); `causal=False`: every query sees every key (MiniCPM's LocEnc / LocDiT).
        rows_apart: attention row by row, with the call one row alone makes (see `attend`)."""
        steps = x.shape[1]
        q, k, v = self.qkv(x, rope)
        if cache is None:
            if start:
                raise ValueError("attention without a cache starts at position 0")
            keys, values = k, v
        else:
            keys, values = cache.write(start, k, v)  # (B, kv, start+T, D)
        # From position 0 the mask is plain causal: the same call as the official (is_causal).
        mask = None if start == 0 or not causal else causal_mask(steps, start, x.device)
        is_causal = causal and start == 0 and steps > 1
        return self.attend(q, keys, values, mask, is_causal, rows_apart)

    def forward_rows(
        self,
        x: torch.Tensor,
        rope: tuple[torch.Tensor, torch.Tensor],
        caches: list[KVCache],
        positions: list[int],
    ) -> torch.Tensor:
        """One new position for each of R independent sequences: x (R, 1, H), rope (R, 1, 1, D)
        each, row r written at positions[r] of caches[r] (a (1, kv, L_r, D) cache).

        The projections run batched; attention runs row by row over each row's own filled
        prefix, with the very call the single-stream step makes, so a row's result is the same
        alone and in any batch (a padded batched attention would change the softmax sums)."""
        q, k, v = self.qkv(x, rope)  # (R, heads, 1, D), (R, kv, 1, D)
        outs = []
        for row, (cache, position) in enumerate(zip(caches, positions, strict=True)):
            keys, values = cache.write(position, k[row : row + 1], v[row : row + 1])
            outs.append(scaled_dot_product(q[row : row + 1], keys, values))
        return self._merge(torch.cat(outs) if len(outs) > 1 else outs[0])  # (R, 1, H)


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

    def _mlp(self, x: torch.Tensor) -> torch.Tensor:
        return self._add(x, self.mlp(self.post_attention_layernorm(x)))

    def forward(
        self,
        x: torch.Tensor,
        rope: tuple | None,
        cache: KVCache | None,
        start: int,
        causal: bool = True,
        rows_apart: bool = False,
    ) -> torch.Tensor:
        h = self.self_attn(self.input_layernorm(x), rope, cache, start, causal, rows_apart)
        return self._mlp(self._add(x, h))

    def forward_rows(
        self, x: torch.Tensor, rope: tuple, caches: list[KVCache], positions: list[int]
    ) -> torch.Tensor:
        h = self.self_attn.forward_rows(self.input_layernorm(x), rope, caches, positions)
        return self._mlp(self._add(x, h))


class DecoderStack(nn.Module):
    """`layers` + final `norm`; every run returns final-norm hidden states."""

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

    def run_layers(
        self,
        x: torch.Tensor,
        rope_table: RotaryTable | None,
        caches: list[KVCache] | None,
        start: int,
        causal: bool = True,
        rows_apart: bool = False,
    ) -> torch.Tensor:
        """x (B, T, H) at positions [start, start+T) -> (B, T, H). rope_table None: no RoPE;
        caches None: a cache-free pass over x alone (start 0); rows_apart: attention row by
        row (Attention.attend), so a row's result does not depend on the batch."""
        rope = None if rope_table is None else rope_table.window(start, x.shape[1], x.dtype)
        per_layer = [None] * len(self.layers) if caches is None else caches
        for layer, cache in zip(self.layers, per_layer, strict=True):
            x = layer(x, rope, cache, start, causal, rows_apart)
        return self.norm(x)

    def run_rows(
        self,
        x: torch.Tensor,
        rope_table: RotaryTable,
        row_caches: list[list[KVCache]],
        positions: list[int],
    ) -> torch.Tensor:
        """One position for each of R sequences at their own positions: x (R, 1, H),
        row_caches[r] = row r's per-layer caches -> final-norm hidden (R, 1, H). One row runs
        `run_layers` itself (compiled where the stack is): the very calls forward_rows makes
        for a row, with its RoPE rows sliced instead of gathered."""
        if len(row_caches) == 1:
            return self.run_layers(x, rope_table, row_caches[0], positions[0])
        cos, sin = rope_table.typed(x.dtype)
        index = torch.tensor(positions, device=x.device)
        rope = tuple(table.index_select(0, index)[:, None, None, :] for table in (cos, sin))
        for depth, layer in enumerate(self.layers):
            caches = [per_layer[depth] for per_layer in row_caches]
            x = layer.forward_rows(x, rope, caches, positions)
        return self.norm(x)


def compile_stack(stack: DecoderStack) -> None:
    """Opt-in: run `stack.run_layers` through torch.compile (dynamic shapes: the KV length
    grows each step). If compiling or running the compiled code fails, fall back to eager
    for good, with a warning; results are the same either way."""
    import warnings

    if getattr(stack, "_compiled", False):
        return
    eager = stack.run_layers
    compiled = torch.compile(eager, dynamic=True)

    def run_layers(*args, **kwargs):
        try:
            return compiled(*args, **kwargs)
        except Exception as error:  # any compiler failure means "use eager"
            warnings.warn(f"torch.compile failed, using eager mode: {error}", stacklevel=2)
            stack.run_layers = eager
            return eager(*args, **kwargs)

    stack.run_layers = run_layers
    stack._compiled = True
