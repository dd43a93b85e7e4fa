"""Which matmul is fastest on this CPU for one talker step's projections, at 1 and 8 rows?

Real 0.6B shapes by default: 28 layers x (q, k, v, o, gate, up, down), or the fused layout our
int8 path uses (qkv, o, gate_up, down). One column per kernel, in one run: float32 and bfloat16
F.linear, FBGEMM's dynamic int8 (per-tensor activations), our Int8Linear on torch._int_mm and on
each native kernel this CPU runs (ours avx512vnni / avxvnni / avx2, forced one at a time with
TTS_CORE_NATIVE_ISA; all bit-identical to the torch._int_mm column), torch's weight-only int8,
and the floor: the step's int8 weight bytes / the measured read bandwidth (benchmarks/membw.py;
or --bandwidth GB/s). Prints ms per step (best of N) with the load average before and after,
and writes JSON. Usage:
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
from pathlib import Path

import torch
import torch.nn.functional as F

from tts_core.models import native
from tts_core.quant.linear import Int8Linear

FLOOR = "floor"


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


@contextmanager
def forced_isa(isa: str) -> Iterator[None]:
    """Int8Linear layers made inside use the `isa` kernel ("torch": torch._int_mm)."""
    saved = os.environ.get(native.ISA_ENV)
    os.environ[native.ISA_ENV] = isa
    native.int8_linear.cache_clear()
    try:
        yield
    finally:
        if saved is None:
            del os.environ[native.ISA_ENV]
        else:
            os.environ[native.ISA_ENV] = saved
        native.int8_linear.cache_clear()


def int8_kernel(isa: str):  # noqa: ANN201
    """Our Int8Linear (per-row activation scales) on the `isa` kernel, or None where it cannot
    run here."""

    def build(weights: list[torch.Tensor], xs: list[torch.Tensor]):  # noqa: ANN202
        with forced_isa(isa):
            layers = [Int8Linear(w) for w in weights]
        expected = None if isa == native.TORCH_ISA else isa
        if any(layer.kernel_isa != expected for layer in layers):
            return None  # no C compiler, or not this CPU's instructions
        return lambda: [layer(x) for x, layer in zip(xs, layers, strict=True)]

    return build


def weight_only_kernel(weights: list[torch.Tensor], xs: list[torch.Tensor]):  # noqa: ANN201
    scales = [w.abs().amax(dim=1) / 127.0 for w in weights]
    qs = [torch.round(w / s[:, None]).to(torch.int8) for w, s in zip(weights, scales, strict=True)]
    op = torch._weight_int8pack_mm
    return lambda: [op(x, q, s) for x, q, s in zip(xs, qs, scales, strict=True)]


# column -> builder(weights, xs) -> run or None
KERNELS = {
    "fp32": lambda w, x: float_kernel(w, x, torch.float32),
    "bf16": lambda w, x: float_kernel(w, x, torch.bfloat16),
    "FBGEMM": fbgemm_kernel,
    "_int_mm": int8_kernel(native.TORCH_ISA),
    **{isa: int8_kernel(isa) for isa in native.int8_isas_here()},
    "w-only": weight_only_kernel,
}
LEGEND = {
    "fp32": "float32 F.linear",
    "bf16": "bfloat16 F.linear",
    "FBGEMM": "int8 FBGEMM dynamic (per-tensor activations: couples the rows of a batch)",
    "_int_mm": "int8 Int8Linear on torch._int_mm (ours, per-row activations)",
    **{
        isa: f"int8 Int8Linear on our native {isa} kernel (bit-identical to _int_mm)"
        for isa in native.int8_isas_here()
    },
    "w-only": "int8 weight-only torch._weight_int8pack_mm (float activations)",
    FLOOR: "the step's int8 weight bytes / the read bandwidth",
}


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def read_bandwidth_gbps(size_mb: int) -> dict[str, float]:
    """benchmarks/membw.py's kernels (sum, float32 matvec, our best int8 kernel), in GB/s."""
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    from membw import measure_kernels

    return measure_kernels(size_mb=size_mb, repeats=5)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--inter", type=int, default=3072)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--kv", type=int, default=8)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--layers", type=int, default=28)
    p.add_argument("--rows", type=int, nargs="+", default=[1, 8])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument(
        "--bandwidth",
        type=float,
        default=None,
        help="read bandwidth in GB/s for the floor (default: measured)",
    )
    p.add_argument("--bandwidth-mb", type=int, default=1024, help="buffer to measure it with")
    p.add_argument("--json", default=None)
    args = p.parse_args()
    torch.manual_seed(0)
    load_before = os.getloadavg()
    if args.bandwidth is None:
        bandwidth_kernels = read_bandwidth_gbps(args.bandwidth_mb)
        bandwidth = max(bandwidth_kernels.values())
    else:
        bandwidth_kernels, bandwidth = {}, args.bandwidth
    results: dict[str, dict[str, float]] = {}  # column -> {"fused, 1 rows": ms}
    unavailable: dict[str, str] = {}
    for fused in (False, True):
        layer = projection_shapes(args, fused)
        weights = [torch.randn(o, i) * 0.02 for o, i in layer] * args.layers
        int8_bytes = sum(w.numel() for w in weights)
        for rows in args.rows:
            key = f"{'fused' if fused else 'separate'}, {rows} rows"
            xs = [torch.randn(rows, w.shape[1]) for w in weights]
            for name, build in KERNELS.items():
                try:
                    run = build(weights, xs)
                    if run is None:
                        unavailable[name] = "not on this CPU (or no C compiler)"
                        continue
                    ms = best_ms(run, args.repeats)
                except (RuntimeError, NotImplementedError) as exc:
                    unavailable[name] = f"{type(exc).__name__}: {exc}"[:120]
                    continue
                results.setdefault(name, {})[key] = round(ms, 2)
            results.setdefault(FLOOR, {})[key] = round(int8_bytes / bandwidth / 1e6, 2)
    load = os.getloadavg()
    columns = [name for name in [*KERNELS, FLOOR] if name in results]
    keys = list(next(iter(results.values())))
    print(
        f"{cpu_name()}, threads {torch.get_num_threads()}, torch {torch.__version__}; "
        f"load average before {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f}, "
        f"after {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
    )
    print(
        f"read bandwidth {bandwidth:.1f} GB/s "
        + (", ".join(f"{k} {v:.1f}" for k, v in bandwidth_kernels.items()) or "(given)")
    )
    widths = [max(8, len(c)) for c in columns]
    print(
        f"{'ms per talker step':20s} "
        + " ".join(f"{c:>{w}s}" for c, w in zip(columns, widths, strict=True))
    )
    for key in keys:
        cells = [results[c].get(key, float("nan")) for c in columns]
        print(f"{key:20s} " + " ".join(f"{v:>{w}.1f}" for v, w in zip(cells, widths, strict=True)))
    for name in columns:
        print(f"  {name}: {LEGEND[name]}")
    for name, why in unavailable.items():
        print(f"  {name}: not measured, {why}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"load_average_before": load_before, "load_average": load,
                       "cpu": cpu_name(), "threads": torch.get_num_threads(),
                       "torch": torch.__version__, "args": vars(args),
                       "bandwidth_gbps": bandwidth, "bandwidth_kernels_gbps": bandwidth_kernels,
                       "unavailable": unavailable, "legend": LEGEND,
                       "ms_per_step": results}, f, indent=1)  # fmt: skip


if __name__ == "__main__":
    main()
