"""Is a batched matmul row-invariant here? The engine's promise (a request's output is the same
bits alone and in any batch) holds for a batched float GEMM only where the BLAS gives each
request's rows the bits it gives them in a call of their own.

It does not in general: measured on this project's CPU (AMD EPYC, AVX-512, MKL 2024.2, torch
2.13), `F.linear` over B x m rows gives a request's m rows other last bits than a call over
those m rows when m is 1 or 2 (the decode step of a language model), and at 2 threads also
for m = 5-7 and 9-11; m = 4, 8 and >= 12 held for every B up to 8 and every shape tried (from
8 x 16 to 6144 x 2048); 16-byte-misaligned operands changed the result too for some m. A fixed
rule would hold only for that CPU, library and thread count, so a model asks
`rows_invariant` for the shapes and row counts of the call it wants to batch, and runs the
call per request where the answer is no.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
import torch.nn.functional as F
from torch import nn

_checked: dict[tuple, bool] = {}


def rows_invariant(linears: Iterable[nn.Linear], rows: int, requests: int) -> bool:
    """True when, for each of these layers, `F.linear` over `requests` x `rows` rows gives
    every request's rows exactly what a call over a fresh copy of those rows alone gives, on
    this thread's BLAS at torch's current thread count. Checked on random inputs with the
    layers' own weights and biases, once per (shapes, rows, requests, threads): a kernel that
    differs by batch shape shows within a few hundred outputs; one that does not gives equal
    bits for any input (the rows' sums are the same operations in the same order)."""
    linears = list(linears)
    key = (
        tuple((m.in_features, m.out_features, m.bias is not None) for m in linears),
        rows,
        requests,
        torch.get_num_threads(),
        linears[0].weight.dtype,
        str(linears[0].weight.device),
    )
    if key not in _checked:
        _checked[key] = all(_invariant(m, rows, requests) for m in linears)
    return _checked[key]


@torch.inference_mode()
def _invariant(linear: nn.Linear, rows: int, requests: int) -> bool:
    weight, bias = linear.weight, linear.bias
    generator = torch.Generator().manual_seed(rows * 1000 + requests)
    x = torch.randn(requests * rows, linear.in_features, generator=generator)
    x = x.to(dtype=weight.dtype, device=weight.device)
    together = F.linear(x, weight, bias)
    for start in range(0, requests * rows, rows):
        alone = F.linear(x[start : start + rows].clone(), weight, bias)
        if not torch.equal(alone, together[start : start + rows]):
            return False
    return True
