"""A decode step of an 8-bit decoder stack in one C call (models/native/decode_stack.c).

Where a step's rows must stay apart (Qwen3-TTS's talker rows and its 8-bit code predictor's
passes: `Rows`, or `Span` with rows_apart) and every layer is a plain pre-norm Qwen3 block over
8-bit weights packed for AVX-512 VNNI (Int8Linear; or Int4Linear, the 4-bit code predictor's), one call runs every layer and the final norm for all
rows: the norms, per-head q/k norms, RoPE, cache writes, attention (attend_one.h), residual adds
and the gated activation, with each projection read once for every row. Layer by layer in torch
the same pass makes ~40 small operator calls and 4 kernel calls a layer, whose Python and
dispatch cost (~1 ms a code-predictor pass at 0.6B) kept the weights streaming well below the
read rate.

Its numbers are float32 like the torch path's, but not its bits: the norms' sums run in another
order and exp is our own (a few units in the last place); where such a difference moves an
activation across a rounding boundary of the 8-bit quantization, that element changes by one
step of it, the size of the error every element already carries (tests/test_stack_step.py
bounds it). A row's result does not depend on the batch or the thread count (the C file says
why). Where the call does not apply (another dtype, device or layer structure, no AVX-512 VNNI,
no compiler, TTS_CORE_NATIVE=0 or another TTS_CORE_NATIVE_ISA, torch.compile tracing, autograd)
`stack_step` returns None and the stack runs layer by layer: a seed's bytes differ with and
without it, as they do between thread counts.
"""

from __future__ import annotations

import ctypes
import functools
import os
import weakref
from typing import Any, NamedTuple

import torch

from ..quant.int4 import Int4Linear
from ..quant.linear import Int8Linear, NativeLinear
from . import native
from .attend_one import kv_layout

_I64, _P = ctypes.c_int64, ctypes.c_void_p
ISA = "avx512vnni"  # the packed layouts the C tiles read (Int8Linear's for it; Int4Linear's)
MAX_ROWS = 64  # decode_stack.c's MAX_ROWS
MAX_HEAD = 256  # attend_one.h: a head's accumulators in registers up to this size
# a layer's projections and norms, in decode_stack.c's order (its enum)
PROJECTIONS = ("self_attn.qkv_proj", "self_attn.o_proj", "mlp.gate_up_proj", "mlp.down_proj")


@functools.cache
def _kernel(generation: int) -> ctypes._CFuncPtr | None:
    """decode_stack's entry for this load of the kernels (`native.generation`), or None."""
    forced = os.environ.get(native.ISA_ENV, "").strip().lower()
    if not native.enabled() or forced not in ("", ISA):
        return None
    library = native._load(native.DECODE_STACK_SOURCE, "decode_stack", "steps run layer by layer")
    if library is None:
        return None
    entry = library.decode_stack
    # (x, rows, dims, eps, scale, weights, caches, k_head, k_pos, v_head, v_pos, positions,
    #  cos, signed_sin, out, threads) -> 0, -1 no memory, -2 a shape it does not take
    entry.argtypes = [_P, _I64, _P, ctypes.c_float, ctypes.c_float, _P, _P]
    entry.argtypes += [_I64] * 4 + [_P] * 4 + [ctypes.c_int]
    entry.restype = ctypes.c_int
    return entry


class _Plan(NamedTuple):
    """A stack's weights as the C call takes them, and what they were bound from."""

    generation: int
    bound: tuple  # (Int8Linear, its `_buffers_native` when planned): rebound means moved
    norms: tuple  # (RMSNorm's parameters, its weight, the weight's address) of every norm
    dims: Any  # ctypes int64 (hidden, heads, kv heads, head size, inner, layers)
    weights: Any  # ctypes int64: decode_stack.c's addresses per layer, then the final norm's
    eps: float
    shape: tuple[int, int, int]  # (kv heads, head size, hidden)

    def current(self) -> bool:
        if self.generation != native.generation:
            return False
        if any(lin._buffers_native is not b for lin, b in self.bound):
            return False
        # the parameters dict itself: nn.Module.__getattr__ costs ~0.5 us a norm, 113 a talker
        return all(held["weight"] is w and w.data_ptr() == p for held, w, p in self.norms)


def _float_vector(t: torch.Tensor, size: int) -> bool:
    return t.dtype is torch.float32 and t.is_cpu and t.is_contiguous() and t.shape == (size,)


def _projections(layer: torch.nn.Module) -> list[NativeLinear] | None:
    """The layer's four projections where each is one the C call reads: bias-free, 8-bit packed
    for AVX-512 VNNI or 4-bit on its kernel."""
    found = []
    for name in PROJECTIONS:
        try:
            lin = layer.get_submodule(name)
        except AttributeError:
            return None
        if isinstance(lin, Int8Linear):
            readable = lin.kernel_isa == ISA
        else:  # 4 bits: groups of 32 inputs
            readable = isinstance(lin, Int4Linear) and lin.fallback is None
            readable = readable and lin.in_features % 32 == 0
        if not readable or lin.bias is not None:
            return None
        found.append(lin)
    return found


def _projection_addresses(lin: NativeLinear) -> tuple[int, int, int, int]:
    """decode_stack.c's four for a bound projection: packed weights, w_sum128, s_w, and the 4-bit
    group multipliers (0 for 8 bits); from its `_buffers_native.weights` (out, buffers...)."""
    buffers = lin._buffers_native.weights[1:]
    if isinstance(lin, Int4Linear):  # nibbles, mult, w_sum128, s_w, bias
        return buffers[0], buffers[2], buffers[3], buffers[1]
    return buffers[0], buffers[1], buffers[2], 0  # packed, w_sum128, s_w, bias


def _plan_for(stack: torch.nn.Module, x: torch.Tensor) -> _Plan | None:
    """The stack's plan, or None where some layer is not a plain pre-norm Qwen3 block over
    packed 8-bit projections (decode_stack.c's shapes)."""
    layers, final = list(stack.layers), stack.norm
    hidden, eps = x.shape[-1], final.eps
    first = layers[0].self_attn if layers else None
    if first is None or not (hidden % 16 == 0 and first.head_dim % 16 == 0):
        return None
    heads, kv, dim = first.heads, first.kv_heads, first.head_dim
    if dim > MAX_HEAD or heads % kv:
        return None
    bound, norms, weights, inner = [], [], [], None
    for layer in layers:
        attn = layer.self_attn
        lins = _projections(layer)
        if lins is None or getattr(layer, "residual_scale", None) != 1.0:
            return None
        qkv, o, gate_up, down = lins
        inner = down.in_features
        shapes = [(qkv, hidden, (heads + 2 * kv) * dim), (o, heads * dim, hidden)]
        shapes += [(gate_up, hidden, 2 * inner), (down, inner, hidden)]
        if inner % 16 or (attn.heads, attn.kv_heads, attn.head_dim) != (heads, kv, dim):
            return None
        if any((lin.in_features, lin.out_features) != (i, o_) for lin, i, o_ in shapes):
            return None
        if not all(lin._native_ready(x) for lin in lins):
            return None
        layer_norms = [
            (layer.input_layernorm, hidden),
            (attn.q_norm, dim),
            (attn.k_norm, dim),
            (layer.post_attention_layernorm, hidden),
        ]
        for norm, size in layer_norms:
            if getattr(norm, "eps", None) != eps or not _float_vector(norm.weight, size):
                return None
        bound += [(lin, lin._buffers_native) for lin in lins]
        norms += [norm for norm, _ in layer_norms]
        weights += [norm.weight.data_ptr() for norm, _ in layer_norms]  # ln1, q, k, ln2
        weights += [a for lin in lins for a in _projection_addresses(lin)]
    if not _float_vector(final.weight, hidden):
        return None
    norms.append(final)
    weights.append(final.weight.data_ptr())
    dims = (ctypes.c_int64 * 6)(hidden, heads, kv, dim, inner, len(layers))
    return _Plan(
        native.generation,
        tuple(bound),
        tuple((n._parameters, n.weight, n.weight.data_ptr()) for n in norms),
        dims,
        (ctypes.c_int64 * len(weights))(*weights),
        eps,
        (kv, dim, hidden),
    )


# stack -> its _Plan, or the (generation, first projection) it had none for; kept beside the
# stack, not in it: ctypes arrays neither pickle nor deep-copy
_PLANS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _plan(stack: torch.nn.Module, x: torch.Tensor) -> _Plan | None:
    """The plan made once per placement of the stack's weights (None remembered per load of
    the kernels and first projection: a stack that is not 8-bit is not looked at again)."""
    made = _PLANS.get(stack)
    if isinstance(made, _Plan) and made.current():
        return made
    layers = stack.layers
    key = (native.generation, id(layers[0].self_attn.qkv_proj) if len(layers) else None)
    if made == key:
        return None
    plan = _plan_for(stack, x)
    _PLANS[stack] = plan if plan is not None else key
    return plan


class _Cache(NamedTuple):
    """A KVCache as the C call reads it."""

    keys: int  # address of row 0's keys (kv head 0, position 0)
    values: int
    row_bytes: tuple[int, int]  # keys, values: from one batch row to the next
    rows: int
    length: int  # positions
    strides: tuple[int, int, int, int]  # (k_head, k_pos, v_head, v_pos) in floats


def _cache_entry(cache: Any, kv: int, dim: int) -> _Cache | None:
    """How the C call reads `cache` (float32 CPU (b, kv, L, dim) keys and values, each head's
    elements contiguous), else None. Made once per keys and values tensor the cache holds (a
    step looks at every layer's cache of every row: 56 a two-row talker step)."""
    k, v = cache.k, cache.v
    kept = cache.__dict__.get("_stack_step_entry")
    if kept is not None and kept[0] is k and kept[1] is v and kept[2] == k.data_ptr():
        return kept[3]
    entry = None
    k_layout, v_layout = kv_layout(k), kv_layout(v)  # (kv, dim, head stride, position stride)
    if k_layout and v_layout and k.shape == v.shape and k_layout[:2] == v_layout[:2] == (kv, dim):
        row_bytes = (4 * k.stride(0), 4 * v.stride(0))
        strides = (*k_layout[2:], *v_layout[2:])
        entry = _Cache(k.data_ptr(), v.data_ptr(), row_bytes, k.shape[0], k.shape[2], strides)
    cache.__dict__["_stack_step_entry"] = (k, v, k.data_ptr(), entry)
    return entry


def _cache_table(
    blocks: list[list[Any]], starts: list[int], steps: int, layers: int, shape: tuple[int, int, int]
) -> tuple[list[list[int]], tuple[int, int, int, int]] | None:
    """Per layer, each row's key and value addresses (a batch row's `steps` positions from
    starts[row] each a row of the call, over the same cache), and the shared (k_head, k_pos,
    v_head, v_pos) strides of blocks[block][layer] (KVCache, b rows each); None where a cache
    is not one the call reads (_cache_entry), the strides differ (the served arena's rows and
    the code predictor's batch cache all share theirs), or a row's last position lies past its
    cache's end."""
    kv, dim, _ = shape
    strides, table = None, []
    for depth in range(layers):
        pointers: list[int] = []
        row = 0
        for block in blocks:
            entry = _cache_entry(block[depth], kv, dim)
            if entry is None or (strides is not None and entry.strides != strides):
                return None
            strides = entry.strides
            k_row, v_row = entry.row_bytes
            for r in range(entry.rows):
                if row >= len(starts) or starts[row] + steps > entry.length:
                    return None
                pointers += (entry.keys + r * k_row, entry.values + r * v_row) * steps
                row += 1
        if row != len(starts):
            return None
        table.append(pointers)
    return table, strides


def stack_step(
    stack: torch.nn.Module,
    x: torch.Tensor,
    blocks: list[list[Any]],
    starts: list[int],
    rope_table: torch.nn.Module | None,
) -> torch.Tensor | None:
    """x (R, T, H) float32, row r at positions starts[r] .. starts[r] + T - 1 of its caches
    -> the stack's final-norm hidden (R, T, H), each position attending its row's keys up to
    itself (causal). blocks[i][layer] (KVCache) hold the rows in order, b at a time (one block
    of R rows: a Span; R blocks of one: Rows). Each position is a row of the C call (up to
    MAX_ROWS a call; rows apart, so a batch split changes nothing): the T of a row write their
    keys in its head stage, before any attends. None where the call does not apply (module
    doc): the caller runs the stack layer by layer."""
    entry = _kernel(native.generation)
    if entry is None or rope_table is None or x.dtype is not torch.float32 or not x.is_cpu:
        return None
    if x.dim() != 3 or torch.compiler.is_compiling():
        return None
    if torch.is_grad_enabled() and x.requires_grad:
        return None
    batch, steps = x.shape[:2]
    plan = _plan(stack, x)
    if plan is None or not 1 <= steps <= MAX_ROWS or len(starts) != batch:
        return None
    cos, signed_sin = rope_table.typed(torch.float32)
    if min(starts) < 0 or max(starts) + steps > cos.shape[0] or cos.shape[1] != plan.shape[1]:
        return None
    table = _cache_table(blocks, starts, steps, len(stack.layers), plan.shape)
    if table is None:
        return None
    pointers, strides = table
    x = x.contiguous()
    out = torch.empty_like(x)
    per_call = MAX_ROWS // steps  # batch rows a call
    for first in range(0, batch, per_call):
        last = min(batch, first + per_call)
        rows = (last - first) * steps
        chunk = [p for layer in pointers for p in layer[2 * steps * first : 2 * steps * last]]
        positions = [start + t for start in starts[first:last] for t in range(steps)]
        status = entry(
            x[first].data_ptr(),
            rows,
            plan.dims,
            plan.eps,
            plan.shape[1] ** -0.5,
            plan.weights,
            (ctypes.c_int64 * len(chunk))(*chunk),
            *strides,
            (ctypes.c_int64 * rows)(*positions),
            cos.data_ptr(),
            signed_sin.data_ptr(),
            out[first].data_ptr(),
            torch.get_num_threads(),
        )
        if status == -1:
            raise MemoryError("no memory for a decode step's working rows")
        if status != 0:
            raise ValueError(f"the decode step refused its input ({status})")
    return out
