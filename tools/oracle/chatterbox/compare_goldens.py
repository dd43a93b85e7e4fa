"""Compare two golden files of the same checkpoint (e.g. one-thread vs two-thread oracle runs):

    python tools/oracle/chatterbox/compare_goldens.py A.golden.npz B.golden.npz

Integer goldens (tokens, ids) must be equal; float goldens are reported as max |A - B| and as a
multiple of A's `fp32_error_<key>` E where it has one. Exit status 1 if an integer golden or a
shape differs, or a float golden with an E differs by more than 2 E (both runs lie within E of
the float64 value, so |A - B| <= 2 E). Runs with numpy alone (either venv).
"""

from __future__ import annotations

import sys

import numpy as np


def compare(path_a: str, path_b: str) -> bool:
    with np.load(path_a) as a_file, np.load(path_b) as b_file:
        a = {key: a_file[key] for key in a_file.files}
        b = {key: b_file[key] for key in b_file.files}
    ok, worst = True, 0.0
    for key in sorted(a):
        if key.startswith(("meta_", "fp32_error_")):
            continue
        x, y = a[key], b.get(key)
        if y is None or x.shape != y.shape:
            print(f"{key}: missing or shape {None if y is None else y.shape} != {x.shape}")
            ok = False
        elif x.dtype.kind in "iub":
            equal = np.array_equal(x, y)
            ok &= equal
            print(f"{key}: {'equal' if equal else 'DIFFERENT'}")
        elif x.dtype.kind == "f":
            diff = float(np.abs(x.astype(np.float64) - y.astype(np.float64)).max(initial=0.0))
            error = a.get(f"fp32_error_{key}")
            if error is None:
                print(f"{key}: max|A - B| {diff:.3g}")
                continue
            ratio = diff / max(float(error), 1e-30)
            worst = max(worst, ratio)
            ok &= ratio <= 2.0
            print(f"{key}: max|A - B| {diff:.3g} = {ratio:.2f} E")
    print(f"{'OK' if ok else 'MISMATCH'}: largest float difference {worst:.2f} E")
    return ok


if __name__ == "__main__":
    sys.exit(0 if compare(sys.argv[1], sys.argv[2]) else 1)
