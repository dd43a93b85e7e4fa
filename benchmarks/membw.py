"""Measured memory read bandwidth: the hardware floor for weight-bound decoding.

Reads a buffer much larger than the last-level cache in one pass, with no writes, with up to
three kernels: a reduction (`sum`), a float32 matrix-vector product (the shape of a decode step's
weight read) and, on a CPU where it runs, our 8-bit kernel at one row over int8 weights
(tts_core/models/native/int8_linear.c). Reports the best of several runs of each, in GB/s (1e9 bytes), and takes the
faster kernel as the machine's read bandwidth: decoding a frame must read every weight once, so
bytes-per-frame / this figure is the least time a frame can take.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable

import torch

COLUMNS = 4096  # matrix width for the matrix-vector pass (16 KiB rows)


def _best_seconds(run: Callable[[], object], repeats: int, device: str) -> float:
    run()  # touch the pages and warm the kernel once before timing
    best = float("inf")
    for _ in range(repeats):
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        run()
        if device == "cuda":
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - start)
    return best


def measure_kernels(
    size_mb: int = 1024, repeats: int = 7, threads: int | None = None, device: str = "cpu"
) -> dict[str, float]:
    """GB/s of each kernel: best of `repeats` full passes over a `size_mb` float32 buffer."""
    if threads:
        torch.set_num_threads(threads)
    rows = max(1, size_mb * 1024 * 1024 // (4 * COLUMNS))
    matrix = torch.ones(rows, COLUMNS, dtype=torch.float32, device=device)  # (rows, COLUMNS)
    vector = torch.ones(COLUMNS, dtype=torch.float32, device=device)
    size = matrix.numel() * matrix.element_size()
    kernels = {"sum": matrix.sum, "matvec": lambda: torch.mv(matrix, vector)}
    result = {
        name: size / _best_seconds(run, repeats, device) / 1e9 for name, run in kernels.items()
    }
    int8 = _int8_matvec(size) if device == "cpu" else None
    if int8 is not None:
        result["int8 matvec (ours)"] = size / _best_seconds(int8, repeats, device) / 1e9
    return result


def _int8_matvec(size: int) -> Callable[[], object] | None:
    """One row through our 8-bit kernel over `size` bytes of packed int8 weights."""
    from tts_core.models import native

    kernel = native.int8_linear()
    if kernel is None:
        return None
    inputs, outputs = COLUMNS, size // COLUMNS // 16 * 16
    packed = torch.ones(outputs // 16, inputs // 4, 16, 4, dtype=torch.int8)  # the kernel layout
    w_sum, s_w = torch.zeros(outputs, dtype=torch.int32), torch.ones(outputs)
    x, y = torch.ones(1, inputs), torch.empty(1, outputs)
    tensors = (x, packed, w_sum, s_w, y)  # held by the closure: the kernel gets bare pointers

    def run() -> None:
        x, packed, w_sum, s_w, y = tensors
        kernel(
            x.data_ptr(),
            1,
            inputs,
            outputs,
            packed.data_ptr(),
            w_sum.data_ptr(),
            s_w.data_ptr(),
            None,
            y.data_ptr(),
            torch.get_num_threads(),
        )

    return run


def measure_read_bandwidth(
    size_mb: int = 1024, repeats: int = 7, threads: int | None = None, device: str = "cpu"
) -> float:
    """Best observed read bandwidth in GB/s over the kernels of `measure_kernels`."""
    return max(measure_kernels(size_mb, repeats, threads, device).values())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--size-mb", type=int, default=1024)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    kernels = measure_kernels(args.size_mb, args.repeats, args.threads, args.device)
    result = {
        "read_bandwidth_gbps": round(max(kernels.values()), 2),
        "kernels_gbps": {name: round(value, 2) for name, value in kernels.items()},
        "threads": torch.get_num_threads(),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
