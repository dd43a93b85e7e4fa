"""Two golden files of one checkpoint (e.g. made with 1 and 2 threads): integer arrays must be
equal; float arrays are reported as max |a - b| in multiples of E (the file's fp32_error_<key>,
floored at 4 float32 roundings of the largest value). Exit 1 if an integer differs or a float
differs by more than --bound E.

    python tools/oracle/tada/compare_goldens.py A.npz B.npz [--bound 5]
"""

from __future__ import annotations

import argparse
import sys

import numpy as np


def floor_e(golden, key: str) -> float:
    value = np.asarray(golden[key], dtype=np.float64)
    rounding = 4 * np.finfo(np.float32).eps * float(np.max(np.abs(value))) if value.size else 0
    return max(float(golden[f"fp32_error_{key}"]), rounding)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("a")
    parser.add_argument("b")
    parser.add_argument("--bound", type=float, default=5.0)
    args = parser.parse_args()
    a, b = np.load(args.a), np.load(args.b)
    bad = 0
    for key in sorted(a.files):
        if key.startswith("fp32_error_"):
            continue
        x, y = a[key], b[key]
        if x.shape != y.shape:
            print(f"BAD {key}: shapes {x.shape} vs {y.shape}")
            bad += 1
        elif not np.issubdtype(x.dtype, np.floating):
            if not np.array_equal(x, y):
                print(f"BAD {key}: not equal")
                bad += 1
        elif f"fp32_error_{key}" in a.files:
            diff = float(np.max(np.abs(x.astype(np.float64) - y))) if x.size else 0.0
            ratio = diff / floor_e(a, key)
            bad += ratio > args.bound
            print(f"{'BAD' if ratio > args.bound else 'ok '} {key}: {diff:.3g} = {ratio:.2f} E")
        elif not np.array_equal(x, y):
            print(f"    {key}: stored input differs")
    print(f"{bad} problems")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
