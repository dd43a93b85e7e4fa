"""The codec decoder's SnakeBeta in one pass over memory (C), bit for bit torch's
five operations (mul, sin, mul, mul, add) in float32 and bfloat16 (models/native/snake_beta.c,
prebuilt with the other kernels). float32 calls the sin torch
itself calls on an AVX-512 build with MKL (MKL's vmsSin, ATen/cpu/vml.h, exported by
libtorch_cpu); bfloat16 looks sin(t)^2 up in a table torch computed for every bfloat16 t.
It is used only where torch runs its AVX-512 kernels with MKL
(torch.backends.cpu.get_cpu_capability() == "AVX512"); elsewhere, and where it cannot be
built (models/native: no compiler, TTS_CORE_NATIVE=0 or TTS_CORE_NATIVE_ISA=torch), SnakeBeta
runs its torch operations: the same numbers.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import os
import platform
from pathlib import Path

import torch

from ... import native

log = logging.getLogger(__name__)
SOURCE = native.SOURCE_DIR / native.SNAKE_BETA_SOURCE
_ENTRIES = {torch.float32: "snake_beta_f32", torch.bfloat16: "snake_beta_bf16"}
F32_SIN = "vmsSin"  # float32 sin on torch's AVX-512 kernels with MKL (ATen/cpu/vml.h)
_I64, _P, _INT = ctypes.c_int64, ctypes.c_void_p, ctypes.c_int


@functools.cache
def _kernel() -> dict | None:
    """{dtype: (SnakeBeta's entry, its sin: float32 the address of torch's, bfloat16 the
    table)}, or None: the torch path."""
    if (
        not native.enabled()
        or os.environ.get(native.ISA_ENV, "").strip().lower() == native.TORCH_ISA
        or platform.machine().lower() not in native.X86
        or torch.backends.cpu.get_cpu_capability() != "AVX512"
        or not torch.backends.mkl.is_available()
    ):
        return None
    path = native.build(SOURCE)
    if path is None:
        return None
    try:
        library = ctypes.CDLL(str(path))
        torch_cpu = ctypes.CDLL(str(Path(torch.__file__).parent / "lib" / "libtorch_cpu.so"))
        if not library.snake_beta_supported():
            return None
        entries = {}
        for dtype, name in _ENTRIES.items():
            entry = getattr(library, name)
            entry.argtypes = [_P, _I64, _P, _I64, _I64, _I64, _I64, _P, _P, _P, _INT, _INT]
            entry.restype = None
            entries[dtype] = entry
        entries = {
            torch.float32: (entries[torch.float32], getattr(torch_cpu, F32_SIN)),
            torch.bfloat16: (entries[torch.bfloat16], square_sin_table()),
        }
    except (OSError, AttributeError) as error:
        log.warning("codec kernels not loaded (%s): it runs on torch operations", error)
        return None
    return entries


@functools.cache
def square_sin_table() -> torch.Tensor:
    """(65537,) int16: at index bits(t), torch's bfloat16 sin(t) * sin(t) for every bfloat16 t
    (the one-pass SnakeBeta's lookup; one more entry, as a lane reads 4 bytes)."""
    bits = torch.arange(-(2**15), 2**15, dtype=torch.int32).to(torch.int16)
    bits = torch.cat([bits[2**15 :], bits[: 2**15]])  # index i holds the bits of i
    with torch.no_grad():
        sin = torch.sin(bits.view(torch.bfloat16))
        table = (sin * sin).view(torch.int16)
    return torch.cat([table, table.new_zeros(1)])


def _rows(t: torch.Tensor) -> tuple[int, int, int, bool] | None:
    """(rows, samples a row, stride between rows, time-major) reading t (B, C, T) as rows of
    one channel (channel-major) or of every channel at one step (time-major: a laid-out conv's
    output), or None for other strides."""
    batch, channels, steps = t.shape
    if (t.stride(2) == 1 or steps == 1) and (batch == 1 or t.stride(0) == channels * t.stride(1)):
        return batch * channels, steps, t.stride(1), False
    if t.stride(1) == 1 and (batch == 1 or t.stride(0) == steps * t.stride(2)):
        return batch * steps, channels, t.stride(2), True
    return None


def snake_beta(
    x: torch.Tensor, alpha: torch.Tensor, inv_beta: torch.Tensor, out: torch.Tensor | None
) -> torch.Tensor | None:
    """out = x + sin(x alpha)^2 inv_beta for x, out (B, C, T) and alpha, inv_beta (1, C, 1) of
    x's dtype; out may be x, or None (a new tensor of x's strides). None (nothing written)
    where the kernel does not apply. An `out` of the other layout than x is written by one
    copy (a time-major conv output into a channel-major window)."""
    kernel = _kernel()
    if (
        kernel is None
        or x.dtype not in kernel
        or x.device.type != "cpu"
        or x.dim() != 3
        or (out is not None and (out.shape != x.shape or out.dtype != x.dtype))
        or {alpha.dtype, inv_beta.dtype} != {x.dtype}
        or not (alpha.is_contiguous() and inv_beta.is_contiguous())
        or (torch.is_grad_enabled() and x.requires_grad)
    ):
        return None
    layout = _rows(x)
    if layout is None:
        return None
    rows, samples, stride, time_major = layout
    target = torch.empty_like(x) if out is None else out  # empty_like keeps x's strides
    target_rows = _rows(target)
    if target_rows is None or target_rows[3] != time_major:
        target = torch.empty_like(x)
        target_rows = _rows(target)
    entry, sin = kernel[x.dtype]
    entry(
        x.data_ptr(),
        stride,
        target.data_ptr(),
        target_rows[2],
        rows,
        x.shape[1],
        samples,
        alpha.data_ptr(),
        inv_beta.data_ptr(),
        sin.data_ptr() if isinstance(sin, torch.Tensor) else ctypes.cast(sin, _P).value,
        time_major,
        torch.get_num_threads(),
    )
    if out is not None and target is not out:
        out.copy_(target)
        return out
    return target
