"""Attention of one new position (a decode step) over every row's cached keys, in one C call
(models/native/attend_one.c, AVX-512) instead of one SDPA call per row.

Each (row, kv head) is computed whole by one thread in a fixed order, so a row's output is the
same alone and in any batch and at any thread count: one call serves every row of a step, where
SDPA, whose CPU kernel is not batch-invariant, needed one call per row. SDPA's flash kernel also
costs more than the reads for a single query (its blocking, buffers and per-head GEMM calls).
Measured in the served 0.6B talker (2 threads, Zen 5, ~230 keys a layer on average over a 21 s
clip): SDPA 2.9 ms a step for one row, 5.7 for two (~100 us a row and layer, whose keys and
values take 25-40 us to read); this kernel 1.8 and 3.2.

Its numbers are not SDPA's bit for bit: both are float32 with float32 sums, apart by a few
roundings of the output (tests/test_attend_one.py bounds it). Where the kernel does not apply
(another dtype or device, one head size not a multiple of 16 or above 256, no AVX-512 or no C
compiler, TTS_CORE_NATIVE=0 or TTS_CORE_NATIVE_ISA=torch), `attend_one` returns None and the
caller runs SDPA row by row: a seed's bytes differ with and without the kernel, as they do
between thread counts.
"""

from __future__ import annotations

import ctypes
import functools
import os

import torch

from . import native

_I64, _P = ctypes.c_int64, ctypes.c_void_p
# below this many key reads (rows x kv heads x keys) one thread does the call: waking the
# others costs more than the work (the code predictor's passes: 1-8 rows over <= 17 keys)
PARALLEL_KEYS = 512
MAX_DIM = 256  # the kernel keeps a head's 16-lane accumulators in registers up to this size


@functools.cache
def _kernel() -> ctypes._CFuncPtr | None:
    forced = os.environ.get(native.ISA_ENV, "").strip().lower()
    if not native.enabled() or forced == native.TORCH_ISA:
        return None
    library = native._load(native.ATTEND_ONE_SOURCE, "attend_one", "attention runs on SDPA")
    if library is None:
        return None
    entry = library.attend_one
    # (q, rows, kv_heads, group, dim, table, k_head, k_pos, v_head, v_pos, scale, out,
    #  threads) -> 1 when a row's scores found no memory; table: (k, v) per row, then lengths
    entry.argtypes = [_P, _I64, _I64, _I64, _I64, _P, _I64, _I64, _I64, _I64]
    entry.argtypes += [ctypes.c_float, _P, ctypes.c_int]
    entry.restype = ctypes.c_int
    return entry


def kv_layout(block: torch.Tensor) -> tuple[int, ...] | None:
    """(kv heads, head size, head stride, position stride) of a (b, kv, n, D) float32 CPU block
    whose elements are contiguous, else None (one tuple: the blocks must all match)."""
    if block.dtype is not torch.float32 or not block.is_cpu or block.dim() != 4:
        return None
    strides = block.stride()
    return None if strides[3] != 1 else (block.shape[1], block.shape[3], *strides[1:3])


def attend_one(
    q: torch.Tensor, keys: list[torch.Tensor], values: list[torch.Tensor]
) -> torch.Tensor | None:
    """q (B, heads, 1, D) -> (B, heads, 1, D): softmax(q k^T / sqrt(D)) v over each row's keys,
    a query head per heads / kv_heads of a kv head (GQA). keys / values: blocks of rows in
    order, each (b, kv_heads, n, D) (its b rows over n keys; the blocks' n may differ). None
    where the kernel does not apply (the module doc): the caller runs SDPA."""
    entry = _kernel()
    if entry is None or q.dtype is not torch.float32 or not q.is_cpu or q.dim() != 4:
        return None
    rows, heads, steps, dim = q.shape
    k0, v0 = keys[0], values[0]
    if steps != 1 or dim % 16 or dim > MAX_DIM or torch.compiler.is_compiling() or q.requires_grad:
        return None  # is_compiling: a C call would break the graph (SDPA is traced)
    k_layout, v_layout = kv_layout(k0), kv_layout(v0)
    if (
        k_layout is None
        or v_layout is None
        or heads % k_layout[0]
        or k_layout[1] != dim
        or v_layout[:2] != k_layout[:2]
    ):
        return None
    pointers, lengths = [], []
    for k, v in zip(keys, values, strict=True):
        n = k.shape[2]
        if k.shape[:3] != v.shape[:3] or n < 1:
            return None
        if k is not k0 and (kv_layout(k) != k_layout or kv_layout(v) != v_layout):
            return None
        k_ptr, v_ptr, k_row, v_row = k.data_ptr(), v.data_ptr(), 4 * k.stride(0), 4 * v.stride(0)
        for r in range(k.shape[0]):
            pointers += (k_ptr + r * k_row, v_ptr + r * v_row)
            lengths.append(n)
    if len(lengths) != rows:
        return None
    q = q.contiguous()
    out = torch.empty_like(q)
    kv_heads, _, k_head, k_pos = k_layout
    threads = torch.get_num_threads() if kv_heads * sum(lengths) >= PARALLEL_KEYS else 1
    table = (ctypes.c_int64 * (3 * rows))(*pointers, *lengths)  # (k, v) per row, then lengths
    failed = entry(
        q.data_ptr(),
        rows,
        kv_heads,
        heads // kv_heads,
        dim,
        table,
        k_head,
        k_pos,
        *v_layout[2:],
        dim**-0.5,
        out.data_ptr(),
        threads,
    )
    if failed:
        raise MemoryError("no memory for the attention scores of a row")
    return out
