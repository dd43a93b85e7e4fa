"""Qwen3 decoder building blocks: RMSNorm, RoPE table, static KV cache, GQA attention, SwiGLU.

Module attribute names follow the checkpoint keys (`self_attn.q_proj`, `mlp.gate_proj`, ...).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .config import DecoderStackConfig
from .int8 import Int8Linear


class Embedding(nn.Embedding):
    """nn.Embedding without the default init: weights always come from a checkpoint or from
    `random_init_` (and the default normal_ on the meta device costs seconds of lazy imports)."""

    def reset_parameters(self) -> None:
        pass


class RMSNorm(nn.Module):
    """RMSNorm computed in float32, cast back, then scaled (same op order as the official)."""

    def __init__(self, size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(dtype)


class RotaryTable(nn.Module):
    """Precomputed cos/sin for positions [0, max_len): plain rotate-half RoPE.

    The talker's M-RoPE always gets equal t/h/w positions, which makes it this 1-D RoPE.
    Angles are computed in float32 and cast to the model dtype, as the official does.
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
        # Built on the CPU even inside a `torch.device("meta")` block (then moved by `.to`).
        exponents = torch.arange(0, head_dim, 2, dtype=torch.int64, device="cpu").float() / head_dim
        inv_freq = 1.0 / (theta**exponents)  # (D/2,)
        positions = torch.arange(max_len, dtype=torch.float32, device="cpu")
        if ext_factors is None:
            freqs = positions[:, None] * inv_freq[None, :]  # (L, D/2)
        else:
            if len(ext_factors) != head_dim // 2:
                raise ValueError(f"{len(ext_factors)} RoPE factors for head_dim {head_dim}")
            ext = torch.tensor(ext_factors, dtype=torch.float32, device="cpu")
            freqs = torch.outer(positions, 1.0 / ext) * inv_freq  # (L, D/2)
        angles = torch.cat((freqs, freqs), dim=-1)  # (L, D)
        cos, sin = angles.cos(), angles.sin()
        if ext_factors is not None:
            cos, sin = cos * scale, sin * scale
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


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x (B, heads, T, D); cos/sin (T, D)."""
    return x * cos + _rotate_half(x) * sin


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


class Attention(nn.Module):
    """GQA self-attention with per-head q/k RMSNorm applied before RoPE."""

    def __init__(self, cfg: DecoderStackConfig, qk_norm: bool = True) -> None:
        """`qk_norm=False` (MiniCPM): no per-head q/k RMSNorm (and no q_norm/k_norm weights)."""
        super().__init__()
        self.heads = cfg.num_attention_heads
        self.kv_heads = cfg.num_key_value_heads
        self.head_dim = cfg.head_dim
        hidden = cfg.hidden_size
        self.q_proj = nn.Linear(hidden, self.heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(hidden, self.kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(hidden, self.kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.heads * self.head_dim, hidden, bias=False)
        self.q_norm: nn.Module = nn.Identity()
        self.k_norm: nn.Module = nn.Identity()
        if qk_norm:
            self.q_norm = RMSNorm(self.head_dim, cfg.rms_norm_eps)
            self.k_norm = RMSNorm(self.head_dim, cfg.rms_norm_eps)
        self.qkv_proj: nn.Module | None = None  # q, k, v in one matmul (quantize.py sets it)

    def _project(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        if self.qkv_proj is not None:
            return self.qkv_proj(x).split(self.qkv_sizes, dim=-1)
        return self.q_proj(x), self.k_proj(x), self.v_proj(x)

    def _qkv(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor] | None) -> tuple:
        """x (B, T, H) -> q (B, heads, T, D), k and v (B, kv, T, D), RoPE applied to q, k
        (rope None: no rotary embedding, as MiniCPM's no_rope stacks)."""
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

    def forward(
        self,
        x: torch.Tensor,
        rope: tuple[torch.Tensor, torch.Tensor] | None,
        cache: KVCache | None,
        start: int,
        causal: bool = True,
    ) -> torch.Tensor:
        """`cache` None: attend over x alone (start must be 0); `causal=False`: every query
        sees every key (bidirectional, e.g. MiniCPM's local encoder / DiT)."""
        batch, steps, _ = x.shape
        q, k, v = self._qkv(x, rope)
        if cache is None:
            if start:
                raise ValueError("attention without a cache starts at position 0")
            keys, values = k, v
        else:
            keys, values = cache.write(start, k, v)  # (B, kv, start+T, D)
        # From position 0 the mask is plain causal: the same call as the official (is_causal).
        mask = None if start == 0 or not causal else _causal_mask(steps, start, x.device)
        is_causal = causal and start == 0 and steps > 1
        out = F.scaled_dot_product_attention(
            q, keys, values, attn_mask=mask, is_causal=is_causal, enable_gqa=True
        )
        return self.o_proj(out.transpose(1, 2).reshape(batch, steps, -1))

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
        rows = x.shape[0]
        q, k, v = self._qkv(x, rope)  # (R, heads, 1, D), (R, kv, 1, D)
        outs = []
        for row, (cache, position) in enumerate(zip(caches, positions, strict=True)):
            keys, values = cache.write(position, k[row : row + 1], v[row : row + 1])
            outs.append(
                F.scaled_dot_product_attention(q[row : row + 1], keys, values, enable_gqa=True)
            )
        out = torch.cat(outs) if rows > 1 else outs[0]  # (R, heads, 1, D)
        return self.o_proj(out.transpose(1, 2).reshape(rows, 1, -1))

    def forward_static(
        self,
        x: torch.Tensor,
        rope: tuple[torch.Tensor, torch.Tensor],
        cache: KVCache,
        input_pos: torch.Tensor,
        mask: torch.Tensor,
    ) -> torch.Tensor:
        """One position with fixed shapes (CUDA-graph / fullgraph safe): x (B, 1, H), rope
        (1, D) each, input_pos (1,) int64, mask (1, L) bool over the whole cache (key <= pos).
        K/V are written at input_pos in place; attention reads all L slots, masked."""
        batch = x.shape[0]
        q, k, v = self._qkv(x, rope)
        cache.k.index_copy_(2, input_pos, k)
        cache.v.index_copy_(2, input_pos, v)
        out = F.scaled_dot_product_attention(
            q, cache.k, cache.v, attn_mask=mask, enable_gqa=True
        )  # (B, heads, 1, D)
        return self.o_proj(out.transpose(1, 2).reshape(batch, 1, -1))


def _causal_mask(steps: int, start: int, device: torch.device) -> torch.Tensor | None:
    """Boolean (T, start+T) mask letting query i see keys <= start+i; None for one query."""
    if steps == 1:
        return None
    query_pos = torch.arange(start, start + steps, device=device)[:, None]
    key_pos = torch.arange(start + steps, device=device)[None, :]
    return key_pos <= query_pos


class SwiGLU(nn.Module):
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


class DecoderLayer(nn.Module):
    def __init__(self, cfg: DecoderStackConfig) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = SwiGLU(cfg.hidden_size, cfg.intermediate_size)

    def forward(self, x: torch.Tensor, rope: tuple, cache: KVCache, start: int) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), rope, cache, start)
        return x + self.mlp(self.post_attention_layernorm(x))

    def forward_rows(
        self, x: torch.Tensor, rope: tuple, caches: list[KVCache], positions: list[int]
    ) -> torch.Tensor:
        x = x + self.self_attn.forward_rows(self.input_layernorm(x), rope, caches, positions)
        return x + self.mlp(self.post_attention_layernorm(x))

    def forward_static(
        self, x: torch.Tensor, rope: tuple, cache: KVCache, input_pos: torch.Tensor, mask
    ) -> torch.Tensor:
        x = x + self.self_attn.forward_static(self.input_layernorm(x), rope, cache, input_pos, mask)
        return x + self.mlp(self.post_attention_layernorm(x))


class DecoderStack(nn.Module):
    """`layers` + final `norm`; returns final-norm hidden states (B, T, H)."""

    def __init__(self, cfg: DecoderStackConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def new_caches(
        self, batch: int, max_len: int, dtype: torch.dtype, device: torch.device
    ) -> list[KVCache]:
        cfg = self.cfg
        return [
            KVCache(batch, cfg.num_key_value_heads, max_len, cfg.head_dim, dtype, device)
            for _ in self.layers
        ]

    def run_layers(
        self, x: torch.Tensor, rope_table: RotaryTable, caches: list[KVCache], start: int
    ) -> torch.Tensor:
        rope = rope_table.window(start, x.shape[1], x.dtype)
        for layer, cache in zip(self.layers, caches, strict=True):
            x = layer(x, rope, cache, start)
        return self.norm(x)

    def run_rows(
        self,
        x: torch.Tensor,
        rope_table: RotaryTable,
        row_caches: list[list[KVCache]],
        positions: list[int],
    ) -> torch.Tensor:
        """One position for each of R sequences at their own positions: x (R, 1, H),
        row_caches[r] = row r's per-layer caches -> final-norm hidden (R, 1, H)."""
        cos, sin = rope_table.typed(x.dtype)
        index = torch.tensor(positions, device=x.device)
        rope = tuple(table.index_select(0, index)[:, None, None, :] for table in (cos, sin))
        for depth, layer in enumerate(self.layers):
            caches = [per_layer[depth] for per_layer in row_caches]
            x = layer.forward_rows(x, rope, caches, positions)
        return self.norm(x)

    def run_layers_static(
        self,
        x: torch.Tensor,
        rope: tuple[torch.Tensor, torch.Tensor],
        caches: list[KVCache],
        input_pos: torch.Tensor,
    ) -> torch.Tensor:
        """One position, fixed shapes: x (B, 1, H); rope = whole cos/sin tables (L_rope, D);
        input_pos (1,) int64 on x's device -> final-norm hidden (B, 1, H). No Python value
        depends on the data, so the call can be captured in a CUDA graph or fullgraph-compiled."""
        cos, sin = (table.index_select(0, input_pos) for table in rope)  # (1, D) each
        slots = torch.arange(caches[0].max_len, device=x.device)  # (L,)
        mask = slots[None, :] <= input_pos[:, None]  # (1, L) bool
        for layer, cache in zip(self.layers, caches, strict=True):
            x = layer.forward_static(x, (cos, sin), cache, input_pos, mask)
        return self.norm(x)


def rowwise(linear: nn.Module, x: torch.Tensor, by_row: bool = True) -> torch.Tensor:
    """`linear(x)` for x (B, ...), with a float layer applied one batch row at a time when
    `by_row`: a GEMM's blocking, hence its rounding, depends on how many rows it multiplies, and
    a row's result must not depend on the batch it is in. Int8Linear sums are exact integers and
    need no loop."""
    if not by_row or x.shape[0] == 1 or isinstance(linear, (Int8Linear, nn.Identity)):
        return linear(x)
    return torch.cat([linear(x[row : row + 1]) for row in range(x.shape[0])])


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
