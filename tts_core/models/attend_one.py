"""Attention of one new position (a decode step) over every row's cached keys, in one C call
(models/native/attend_one.c) instead of one SDPA call per row.

Each (row, kv head) is computed whole by one thread in a fixed order, so a row's output is the
same alone and in any batch, at any thread count and on any CPU the kernel builds for (plain C
lane arithmetic, no fused multiply-adds): one call serves every row of a step, where SDPA, whose
CPU kernel is not batch-invariant, needed one call per row. SDPA's flash kernel also costs more
than the arithmetic for a single query (its blocking, buffers and per-head GEMM calls): on the
0.6B talker at ~230 keys ~100 us a call against the ~40 us its keys and values take to read.

Its numbers are not SDPA's bit for bit: both are float32 with float32 sums, apart by a few
float32 roundings of the output (tests/test_attend_one.py bounds it). Where the kernel does not
apply (another dtype or device, a head size not a multiple of 16, no C compiler,
TTS_CORE_NATIVE=0 or TTS_CORE_NATIVE_ISA=torch), `attend_one` returns None and the caller runs
SDPA: a seed's bytes are defined with or without it (docs/engine.md).
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


def _plain(block: torch.Tensor, like: torch.Tensor) -> bool:
    """A (b, kv, n, D) float32 CPU block laid out as `like` (positions and heads strided alike,
    elements contiguous)."""
    return (
        block.dtype == torch.float32
        and block.device.type == "cpu"
        and block.dim() == 4
        and block.stride(-1) == 1
        and block.shape[1] == like.shape[1]
        and block.shape[3] == like.shape[3]
        and block.stride(1) == like.stride(1)
        and block.stride(2) == like.stride(2)
    )


def attend_one(
    q: torch.Tensor, keys: list[torch.Tensor], values: list[torch.Tensor]
) -> torch.Tensor | None:
    """q (B, heads, 1, D) -> (B, heads, 1, D): softmax(q k^T / sqrt(D)) v over each row's keys,
    a query head per heads / kv_heads of a kv head (GQA). keys / values: blocks of rows in
    order, each (b, kv_heads, n, D) (its b rows over n keys; the blocks' n may differ). None
    where the kernel does not apply (the module doc): the caller runs SDPA."""
    entry = _kernel()
    if entry is None or q.dtype != torch.float32 or q.device.type != "cpu" or q.dim() != 4:
        return None
    rows, heads, steps, dim = q.shape
    k0, v0 = keys[0], values[0]
    if steps != 1 or dim % 16 or torch.compiler.is_compiling() or q.requires_grad:
        return None  # is_compiling: a C call would break the graph (SDPA is traced)
    if heads % k0.shape[1] or k0.shape[3] != dim:
        return None
    pointers, lengths = [], []
    for k, v in zip(keys, values, strict=True):
        n = k.shape[2]
        if not (_plain(k, k0) and _plain(v, v0)) or v.shape[:3] != k.shape[:3] or n < 1:
            return None
        k_ptr, v_ptr, k_row, v_row = k.data_ptr(), v.data_ptr(), 4 * k.stride(0), 4 * v.stride(0)
        for r in range(k.shape[0]):
            pointers += (k_ptr + r * k_row, v_ptr + r * v_row)
            lengths.append(n)
    if len(lengths) != rows:
        return None
    q = q.contiguous()
    out = torch.empty_like(q)
    kv_heads = k0.shape[1]
    threads = torch.get_num_threads() if kv_heads * sum(lengths) >= PARALLEL_KEYS else 1
    table = (ctypes.c_int64 * (3 * rows))(*pointers, *lengths)  # (k, v) per row, then lengths
    failed = entry(
        q.data_ptr(),
        rows,
        kv_heads,
        heads // kv_heads,
        dim,
        table,
        k0.stride(1),
        k0.stride(2),
        v0.stride(1),
        v0.stride(2),
        dim**-0.5,
        out.data_ptr(),
        threads,
    )
    if failed:
        raise MemoryError("no memory for the attention scores of a row")
    return out
