"""Which matmul is fastest on this CPU for one talker step's projections, at 1 and 8 rows?

Real 0.6B shapes by default: 28 layers x (q, k, v, o, gate, up, down), or the fused layout our
int8 path uses (qkv, o, gate_up, down). Prints ms per step for each kernel (best of N) with the
load average, and writes JSON. Usage:
    .venv/bin/python benchmarks/int8_kernels.py [--hidden 2048 --inter 6144 ...] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
import torch.nn.functional as F

from tts_core.models import native
from tts_core.models.qwen3_tts.int8 import Int8Linear


def projection_shapes(args: argparse.Namespace, fused: bool) -> list[tuple[int, int]]:
    """(out, in) of one layer's projections."""
    q, kv, h, i = args.heads * args.head_dim, args.kv * args.head_dim, args.hidden, args.inter
    if fused:
        return [(q + 2 * kv, h), (h, q), (2 * i, h), (h, i)]
    return [(q, h), (kv, h), (kv, h), (h, q), (i, h), (i, h), (h, i)]


def best_ms(fn: Callable[[], object], repeats: int) -> float:
    fn()
    fn()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best * 1000


def float_kernel(weights: list[torch.Tensor], xs: list[torch.Tensor], dtype: torch.dtype):  # noqa: ANN201
    ws = [w.to(dtype) for w in weights]
    xd = [x.to(dtype) for x in xs]
    return lambda: [F.linear(x, w) for x, w in zip(xd, ws, strict=True)]


def fbgemm_kernel(weights: list[torch.Tensor], xs: list[torch.Tensor]):  # noqa: ANN201
    """FBGEMM dynamic int8: per-channel weights, one activation scale per call (per tensor)."""
    packed = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # quantized tensor creation is deprecated upstream
        for w in weights:
            scale = (w.abs().amax(dim=1) / 127.0).double()
            zero = torch.zeros(w.shape[0], dtype=torch.long)
            qw = torch.quantize_per_channel(w, scale, zero, 0, torch.qint8)
            packed.append(torch.ops.quantized.linear_prepack(qw, None))
    op = torch.ops.quantized.linear_dynamic
    return lambda: [op(x, p, True) for x, p in zip(xs, packed, strict=True)]


def int8_rows_kernel(weights: list[torch.Tensor], xs: list[torch.Tensor]):  # noqa: ANN201
    """Our Int8Linear on torch._int_mm, per-row activation scales."""
    with no_native_kernel():
        layers = [Int8Linear(w) for w in weights]
    return lambda: [layer(x) for x, layer in zip(xs, layers, strict=True)]


def int8_native_kernel(weights: list[torch.Tensor], xs: list[torch.Tensor]):  # noqa: ANN201
    """Our Int8Linear on its AVX-512 VNNI kernel (same bits as the torch._int_mm path)."""
    layers = [Int8Linear(w) for w in weights]
    if not all(layer.packed for layer in layers):
        return None  # no C compiler or no AVX-512 VNNI here
    return lambda: [layer(x) for x, layer in zip(xs, layers, strict=True)]


@contextmanager
def no_native_kernel() -> Iterator[None]:
    saved = os.environ.get("TTS_CORE_NATIVE")
    os.environ["TTS_CORE_NATIVE"] = "0"
    native.int8_linear.cache_clear()
    try:
        yield
    finally:
        if saved is None:
            del os.environ["TTS_CORE_NATIVE"]
        else:
            os.environ["TTS_CORE_NATIVE"] = saved
        native.int8_linear.cache_clear()


def weight_only_kernel(weights: list[torch.Tensor], xs: list[torch.Tensor]):  # noqa: ANN201
    scales = [w.abs().amax(dim=1) / 127.0 for w in weights]
    qs = [torch.round(w / s[:, None]).to(torch.int8) for w, s in zip(weights, scales, strict=True)]
    op = torch._weight_int8pack_mm
    return lambda: [op(x, q, s) for x, q, s in zip(xs, qs, scales, strict=True)]


KERNELS = {
    "float32 F.linear": lambda w, x: float_kernel(w, x, torch.float32),
    "bfloat16 F.linear": lambda w, x: float_kernel(w, x, torch.bfloat16),
    "int8 FBGEMM dynamic (per-tensor activations)": fbgemm_kernel,
    "int8 torch._int_mm, per-row activations (ours)": int8_rows_kernel,
    "int8 AVX-512 VNNI kernel, per-row activations (ours)": int8_native_kernel,
    "int8 weight-only _weight_int8pack_mm": weight_only_kernel,
}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--inter", type=int, default=3072)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--kv", type=int, default=8)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--layers", type=int, default=28)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--json", default=None)
    args = p.parse_args()
    torch.manual_seed(0)
    results: dict[str, dict[str, float]] = {}
    for fused in (False, True):
        layer = projection_shapes(args, fused)
        weights = [torch.randn(o, i) * 0.02 for o, i in layer] * args.layers
        for rows in (1, 8):
            xs = [torch.randn(rows, w.shape[1]) for w in weights]
            for name, build in KERNELS.items():
                label = f"{name}{', fused' if fused else ''}"
                try:
                    run = build(weights, xs)
                    if run is None:
                        print(f"{label}: not available here")
                        continue
                    ms = best_ms(run, args.repeats)
                except (RuntimeError, NotImplementedError) as exc:
                    print(f"{label}: not available ({type(exc).__name__}: {exc})"[:160])
                    continue
                results.setdefault(label, {})[f"{rows} rows"] = round(ms, 2)
    load = os.getloadavg()
    print(f"threads {torch.get_num_threads()}, torch {torch.__version__}, "
          f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")  # fmt: skip
    print(f"{'kernel (ms per talker step)':58s} {'1 row':>8s} {'8 rows':>8s}")
    for label, by_rows in results.items():
        one, eight = by_rows.get("1 rows", float("nan")), by_rows.get("8 rows", float("nan"))
        print(f"{label:58s} {one:8.1f} {eight:8.1f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"load_average": load, "torch": torch.__version__, "args": vars(args),
                       "ms_per_step": results}, f, indent=1)  # fmt: skip


if __name__ == "__main__":
    main()
