"""8-bit linear layers for CPU decoding: int8 weights, int8 activations quantized per row.

y = (round(x / s_x) @ W_q^T) * s_x * s_w, with
  s_w (out,)  = max |W[o, :]| / 127   per output channel, fixed at load;
  s_x (rows,) = max |x[r, :]| / 127   per row (per token), computed for every call.

The product is an int8 x int8 -> int32 matmul (`torch._int_mm`, oneDNN on x86), whose integer
accumulation is exact: |sum| <= in_features * 127^2 < 2^31 for in_features < 133,000. So a row's
output depends on that row alone, bit for bit, whatever the batch and however the kernel splits
the sum: a listener's audio never depends on who else is being served (a per-tensor activation
scale, as FBGEMM's dynamic quantization uses, would couple the rows of a batch).

Measured on a 2-core AMD EPYC (benchmarks/int8_kernels.py): the talker's matmuls per decode
step at 0.6B take 116 ms in float32, 58 ms in bfloat16 and 22.5 ms here at one row (QKV and
gate/up fused: 4 matmuls a layer), 37 ms at 8 rows.
"""

from __future__ import annotations

import torch
from torch import nn

MIN_SCALE = 1e-30  # an all-zero row quantizes to zeros instead of 0/0


class Int8Linear(nn.Module):
    """A bias-optional linear layer over int8 weights; float input and output."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None = None) -> None:
        super().__init__()
        weight = weight.detach().float()
        scale = weight.abs().amax(dim=1).clamp_min(MIN_SCALE) / 127.0  # (out,)
        q = torch.round(weight / scale[:, None]).to(torch.int8)
        self.in_features, self.out_features = weight.shape[1], weight.shape[0]
        # (out, in) int8, handed to _int_mm as a transposed view: oneDNN then reads it ~1.5x
        # faster at one row than an (in, out) contiguous copy (benchmarks/int8_kernels.py)
        self.register_buffer("weight_q", q.contiguous())
        self.register_buffer("weight_scale", scale)  # (out,) float32
        self.register_buffer("bias", None if bias is None else bias.detach().float())

    @classmethod
    def from_linear(cls, linear: nn.Linear) -> Int8Linear:
        return cls(linear.weight, linear.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, self.in_features)  # (R, in)
        if rows.dtype != torch.float32:
            rows = rows.float()
        # few ops: at one row each op costs microseconds, and a frame makes ~430 of these calls
        peak = rows.abs().amax(dim=1, keepdim=True)  # (R, 1); faster than vector_norm(inf)
        scale = peak.clamp_min_(MIN_SCALE).mul_(1.0 / 127.0)
        q = torch.round(rows / scale).to(torch.int8)  # |rows / scale| <= 127: no clamp needed
        out = torch._int_mm(q, self.weight_q.t()) * scale  # int32 * float32 -> float32 (R, out)
        out.mul_(self.weight_scale)
        if self.bias is not None:
            out.add_(self.bias)
        out = out.view(*x.shape[:-1], self.out_features)
        return out if x.dtype == torch.float32 else out.to(x.dtype)

    def extra_repr(self) -> str:
        bias = self.bias is not None
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={bias}"


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
