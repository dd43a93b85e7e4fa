"""8-bit linear layers for CPU decoding: int8 weights, int8 activations quantized per row.

y = (round(x / s_x) @ W_q^T) * s_x * s_w, with
  s_w (out,)  = max |W[o, :]| / 127   per output channel, fixed at load;
  s_x (rows,) = max |x[r, :]| / 127   per row (per token), computed for every call.

The product is an int8 x int8 -> int32 matmul (`torch._int_mm`, oneDNN on x86, or our native
kernel for this CPU's instruction set, models/native/int8_linear*.c: AVX-512 VNNI, AVX-VNNI, AVX2
or ARM64 NEON dot product), whose integer accumulation is exact: |sum| <= in_features * 255 *
127 < 2^31 for in_features < 66,000 (the VNNI kernels' unsigned form). So a row's output
depends on that row alone, bit for bit, whatever the batch and however the kernel splits the
sum: a listener's audio never depends on who else is being served (a per-tensor activation
scale, as FBGEMM's dynamic quantization uses, would couple the rows of a batch).

Measured on a 2-core AMD EPYC (benchmarks/int8_kernels.py), the talker's fused projections
per decode step at 0.6B (4 matmuls a layer), 1 row / 8 rows: float32 110 / 194 ms, bfloat16
51 / 59, torch._int_mm 27 / 47, the native kernel 15.7 / 23.4.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch
from torch import nn

from ..models import native

MIN_SCALE = 1e-30  # an all-zero row quantizes to zeros instead of 0/0


def _kernel_readable(buffer: torch.Tensor | None) -> bool:
    """A buffer a kernel reads through a bare pointer: on the CPU, float32 where floating (None:
    an absent bias)."""
    if buffer is None:
        return True
    return buffer.device.type == "cpu" and (
        buffer.dtype == torch.float32 or not buffer.is_floating_point()
    )


class _Bound(NamedTuple):
    """A layer's kernel entries and the arguments fixed per placement of its buffers."""

    generation: int  # native.generation when bound: a reload of the kernels rebinds
    function: Callable[..., int] | None  # None: the torch path
    windows: Callable[..., int] | None
    weights: tuple  # (out_features, weight pointers..., bias or None) as the entries take them


class NativeLinear(nn.Module):
    """A linear layer computed by a native kernel entry (x, rows, in, out_features, weight
    pointers..., y, threads) -> status (int8_common.h), the entry and the weights' pointers bound
    once per placement of the buffers (`_weights_bound`) and per load of the kernels; rebound
    after `_apply` (.to() and the like), a replaced buffer or native.int8_linear.cache_clear(),
    left out of pickles and copies. Int8Linear and quant/int4.py's Int4Linear.

    A subclass has `in_features`, `out_features`, `forward_reference(x)` (the torch path's same
    bits), `_weights_bound` and `_entries()`."""

    _weights_bound: tuple[str, ...] = ()  # the buffers the entry reads, in its argument order
    _buffers_native: _Bound | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # a 0.6B frame makes ~430 of these calls (15 passes x 21 + 112): no aten op or lookup
        # that is not needed. The kernel reads x (..., in) and writes out (..., out) as rows in
        # memory: a contiguous float32 x needs no reshape, out is made in x's leading shape
        if not self._native_ready(x):
            return self._unbound_forward(x)
        rows = x
        if x.dtype != torch.float32 or x.shape[-1] != self.in_features or not x.is_contiguous():
            rows = x.reshape(-1, self.in_features).float().contiguous()  # (R, in)
        out = rows.new_empty(*x.shape[:-1], self.out_features)
        count = rows.numel() // self.in_features  # R; in_features >= 1 (amax at construction)
        self._call(self._buffers_native.function, rows, out, count, self.in_features)
        return out if x.dtype == torch.float32 else out.to(x.dtype)

    def _unbound_forward(self, x: torch.Tensor) -> torch.Tensor:
        """The layer where no kernel is bound (moved, or no kernel loads here)."""
        return self.forward_reference(x)

    def _call(self, entry, x: torch.Tensor, out: torch.Tensor, *shape: int) -> None:  # noqa: ANN001
        """A kernel entry (int8_common.h) on x into out: (x, *shape, out_features, weights...,
        out, threads); the weights' pointers bound once (`_native_ready`)."""
        if out.numel():
            weights = self._buffers_native.weights
            status = entry(x.data_ptr(), *shape, *weights, out.data_ptr(), torch.get_num_threads())
            if status == -1:
                raise MemoryError(f"{type(self).__name__}: no memory for its scratch rows")
            if status != 0:
                raise ValueError(f"{type(self).__name__}: the kernel refused its input ({status})")

    def _native_ready(self, x: torch.Tensor) -> bool:
        """The kernel reads float32 CPU buffers through bare pointers: anything else (a layer
        moved to another dtype or device, an input elsewhere) takes the torch path, as does a
        layer whose kernel can no longer be loaded. Checked once per placement of the buffers
        and per load of the kernels: `_buffers_native` then holds the kernel's entries (None:
        the torch path) and the weights' pointers."""
        bound = self._buffers_native
        if bound is None or bound.generation != native.generation:
            bound = self._buffers_native = self._bind()
        return bound.function is not None and x.is_cpu

    def _bind(self) -> _Bound:
        """The entries `_entries()` gives over the buffers `_weights_bound` names, where they all
        lie on the CPU, the floating ones in float32; else none (the torch path)."""
        entries = self._entries()
        buffers = [getattr(self, name) for name in self._weights_bound] if entries else []
        if entries is None or not all(map(_kernel_readable, buffers)):
            return _Bound(native.generation, None, None, ())
        pointers = [None if b is None else b.data_ptr() for b in buffers]
        return _Bound(native.generation, *entries, (self.out_features, *pointers))

    def _entries(self) -> tuple[Callable[..., int], Callable[..., int] | None] | None:
        """(the kernel's entry, its conv-windows entry or None) for this layer's stored layout,
        or None where no kernel runs it here."""
        raise NotImplementedError

    def _apply(self, fn, recurse=True):  # noqa: ANN001, ANN202 - nn.Module's signature
        self._buffers_native = None  # .to() / .cuda() / .bfloat16() may have moved them
        return super()._apply(fn, recurse)

    def __setattr__(self, name: str, value: object) -> None:
        if name in self._weights_bound:  # a buffer replaced (load_state_dict(assign=True))
            super().__setattr__("_buffers_native", None)
        super().__setattr__(name, value)

    def __getstate__(self) -> dict:
        state = super().__getstate__()
        return {**state, "_buffers_native": None}  # ctypes functions do not pickle


class Int8Linear(NativeLinear):
    """A bias-optional linear layer over int8 weights; float input and output.

    Where a native kernel runs (models/native: AVX-512 VNNI, AVX-VNNI, AVX2 or NEON, the best this
    CPU has, or the one TTS_CORE_NATIVE_ISA names) it computes it, over weights packed at
    construction in that kernel's layout (`kernel_isa` says which); elsewhere
    `forward_reference` (torch._int_mm). They are all equal bit for bit.
    """

    _weights_bound = ("weight_packed", "weight_sum128", "weight_scale", "bias")

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None = None) -> None:
        super().__init__()
        weight = weight.detach().float()
        scale = weight.abs().amax(dim=1).clamp_min(MIN_SCALE) / 127.0  # (out,)
        q = torch.round(weight / scale[:, None]).to(torch.int8)
        self._set_weights(q, scale, None if bias is None else bias.detach().float())

    @classmethod
    def from_int8(
        cls, q: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor | None = None
    ) -> Int8Linear:
        """The layer over already quantized weights: `q` (out, in) int8 and `scale` (out,)
        float32 as `int8_weight()` and `weight_scale` give them, `bias` float32 or None
        (store.py: a saved model), packed for this CPU's kernel as at construction."""
        layer = cls.__new__(cls)
        nn.Module.__init__(layer)
        layer._set_weights(q, scale, bias)
        return layer

    def _set_weights(self, q: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor | None) -> None:
        self.in_features, self.out_features = q.shape[1], q.shape[0]
        self.register_buffer("weight_scale", scale)  # (out,) float32
        self.register_buffer("bias", bias)
        kernel = native.int8_linear() if q.device.type == "cpu" else None
        # names, not the ctypes function: the module stays picklable and deep-copyable
        self.packed = kernel is not None
        self.kernel_isa: str | None = None if kernel is None else kernel.isa.name
        if not self.packed:
            # (out, in) int8, handed to _int_mm as a transposed view: oneDNN then reads it
            # ~1.5x faster at one row than an (in, out) contiguous copy
            self.register_buffer("weight_q", q.contiguous())
        else:
            layout = kernel.layout
            self.register_buffer(
                "weight_packed", pack_for_kernel(q, layout.block, layout.group, layout.in_multiple)
            )
            # 128 * sum_k W[o, k]: the VNNI kernels feed activations as q + 128 (unsigned bytes);
            # kept for every kernel (out int32s), so the buffers do not depend on the CPU
            self.register_buffer("weight_sum128", q.sum(dim=1, dtype=torch.int32) * 128)

    @classmethod
    def from_linear(cls, linear: nn.Linear) -> Int8Linear:
        return cls(linear.weight, linear.bias)

    def forward_reference(self, x: torch.Tensor) -> torch.Tensor:
        """The same layer in torch ops (torch._int_mm); the native kernel's definition."""
        return self._shaped(self._reference(x.reshape(-1, self.in_features).float()), x)

    def _shaped(self, out: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """(R, out) float32 -> x's leading shape and dtype."""
        out = out.view(*x.shape[:-1], self.out_features)
        return out if x.dtype == torch.float32 else out.to(x.dtype)

    def windows_native(self, x: torch.Tensor) -> bool:
        """Whether `windows` runs here on x: a float32 CPU input and a kernel with that entry."""
        if not (self._native_ready(x) and x.dtype == torch.float32):
            return False
        return self._buffers_native.windows is not None

    def windows(self, x: torch.Tensor, taps: int, gap: int, out: torch.Tensor) -> None:
        """out (T - (taps - 1) gap, out_features) = the layer on every window of x (C, T) float32,
        a conv's input (taps * C = in_features; out contiguous): row t is steps t, t + gap, ...,
        t + (taps - 1) gap end to end, a stride-1 conv's im2col row, read in place by the kernel
        (where `windows_native(x)`), channel-major or time-major: the same bits as the rows
        copied."""
        if 1 not in x.stride():
            x = x.contiguous()
        steps, width = x.shape[1], x.shape[0]
        entry = self._buffers_native.windows
        self._call(entry, x, out, steps, width, x.stride(1), x.stride(0), taps, gap)

    def _reference(self, rows: torch.Tensor) -> torch.Tensor:
        """rows (R, in) float32 -> (R, out) float32 in torch ops."""
        # few ops: at one row each op costs microseconds, and a frame makes ~430 of these calls
        peak = rows.abs().amax(dim=1, keepdim=True)  # (R, 1); faster than vector_norm(inf)
        scale = peak.clamp_min_(MIN_SCALE).mul_(1.0 / 127.0)
        q = torch.round(rows / scale).to(torch.int8)  # |rows / scale| <= 127: no clamp needed
        out = torch._int_mm(q, self.int8_weight().t()) * scale  # int32 * f32 -> f32 (R, out)
        out.mul_(self.weight_scale)
        if self.bias is not None:
            out.add_(self.bias)
        return out

    def _entries(self) -> tuple[Callable[..., int], Callable[..., int] | None] | None:
        kernel = native.int8_kernel(self.kernel_isa) if self.packed else None
        return None if kernel is None else (kernel.function, kernel.windows)

    def int8_weight(self) -> torch.Tensor:
        """(out, in) int8 weights, whichever layout is stored."""
        if "weight_q" in self._buffers:
            return self.weight_q
        return unpack_from_kernel(self.weight_packed, self.out_features, self.in_features)

    def extra_repr(self) -> str:
        bias = self.bias is not None
        kernel = f"native {self.kernel_isa}" if self.packed else "torch._int_mm"
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"bias={bias}, kernel={kernel}"
        )


def pack_for_kernel(
    q: torch.Tensor, block: int = 16, group: int = 4, in_multiple: int | None = None
) -> torch.Tensor:
    """(out, in) int8 -> (out_b / block, in_p / group, block, group), zero padded (out to a
    multiple of `block`, in to one of `in_multiple`, default `group`): a native kernel's layout
    (native.Int8Layout), packed[ob][kg][j][t] = q[block ob + j][group kg + t]. The defaults are
    the AVX-512 VNNI kernel's: 16 output channels x 4 inputs per 64-byte vector."""
    out, inp = q.shape
    step = in_multiple or group
    out_b, in_p = -(-out // block) * block, -(-inp // step) * step
    if (out_b, in_p) == (out, inp) and q.is_contiguous():
        padded = q  # nothing to pad (every real model's layer): no copy, loading stays lean
    else:
        padded = torch.zeros(out_b, in_p, dtype=torch.int8, device=q.device)
        padded[:out, :inp] = q
    return padded.view(out_b // block, block, in_p // group, group).permute(0, 2, 1, 3).contiguous()


def unpack_from_kernel(packed: torch.Tensor, out: int, inp: int) -> torch.Tensor:
    """The (out, in) int8 weights back from any pack_for_kernel layout."""
    blocks, groups, block, group = packed.shape
    full = packed.permute(0, 2, 1, 3).reshape(blocks * block, groups * group)
    return full[:out, :inp].contiguous()


def int8_matmul_available() -> bool:
    """True where torch._int_mm runs on the CPU (x86 builds of PyTorch >= 2.2 do)."""
    try:
        a = torch.ones(1, 8, dtype=torch.int8)
        return bool(torch._int_mm(a, torch.ones(8, 8, dtype=torch.int8))[0, 0] == 8)
    except (RuntimeError, AttributeError):
        return False


def sqnr_db(reference: torch.Tensor, approximation: torch.Tensor) -> float:
    """Signal-to-quantization-noise ratio, 10 log10(|ref|^2 / |ref - approx|^2), in dB."""
    reference, approximation = reference.double(), approximation.double()
    noise = (reference - approximation).pow(2).sum()
    signal = reference.pow(2).sum()
    if noise == 0:
        return float("inf")
    return float(10 * torch.log10(signal / noise))


def rowwise(linear: nn.Module, x: torch.Tensor, by_row: bool = True) -> torch.Tensor:
    """`linear(x)` for x (B, ...), with a float layer applied one batch row at a time when
    `by_row`: a GEMM's blocking, hence its rounding, depends on how many rows it multiplies, and
    a row's result must not depend on the batch it is in. Int8Linear sums are exact integers and
    need no loop."""
    if not by_row or x.shape[0] == 1 or isinstance(linear, (Int8Linear, nn.Identity)):
        return linear(x)
    return torch.cat([linear(x[row : row + 1]) for row in range(x.shape[0])])
