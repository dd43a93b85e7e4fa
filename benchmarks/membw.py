"""Measured memory read bandwidth: the hardware floor for weight-bound decoding.

Reads a buffer much larger than the last-level cache in one pass, with no writes, with two
kernels: a reduction (`sum`) and a float32 matrix-vector product (the shape of a decode step's
weight read). Reports the best of several runs of each, in GB/s (1e9 bytes), and takes the
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
    return {name: size / _best_seconds(run, repeats, device) / 1e9 for name, run in kernels.items()}


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
