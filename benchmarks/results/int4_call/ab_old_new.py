"""Int4Linear's call path, old (session 19's main: reshape/.float()/view and a native.int4_linear()
lookup every call) against new (NativeLinear: one aten op, the entry bound once), interleaved in
one process on the same layers: every output compared for equality, then call time per shape and
rows, and a 0.6B code-predictor frame (15 passes of `predict`) with the model forced to int4.

    PYTHONPATH=. .venv/bin/python benchmarks/results/int4_call/ab_old_new.py \
        [--checkpoint /tmp/qwen3-0.6B-random] [--rounds 21] [--threads 2] [--json out.json]

A busy machine: blocks of calls alternate old/new (ABBA), the ratio new/old per block pair,
printed as the median (range) over rounds with the load average; read the ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from tts_core.models import native
from tts_core.quant.int4 import Int4Linear

NEW_FORWARD = Int4Linear.forward
BLOCK_S = 0.01  # a block of calls: long beside a call, short beside the box's time slices
SHAPES = [(64, 64), (1024, 1024), (1024, 3072), (3072, 1024)]  # (out, in)


def old_forward(self: Int4Linear, x: torch.Tensor) -> torch.Tensor:
    """Int4Linear.forward before this change, verbatim (main at 41b03f0)."""
    if self.fallback is not None:
        return self.fallback(x)
    kernel = native.int4_linear()
    if kernel is None or not x.is_cpu or self.weight_scale.dtype != torch.float32:
        return self.forward_reference(x)
    rows = x.reshape(-1, self.in_features).float().contiguous()  # (R, in)
    out = torch.empty(rows.shape[0], self.out_features, dtype=torch.float32)
    if rows.shape[0]:
        status = kernel(
            rows.data_ptr(),
            rows.shape[0],
            self.in_features,
            self.out_features,
            self.weight_nibbles.data_ptr(),
            self.group_mult.data_ptr(),
            self.weight_sum128.data_ptr(),
            self.weight_scale.data_ptr(),
            None if self.bias is None else self.bias.data_ptr(),
            out.data_ptr(),
            torch.get_num_threads(),
        )
        if status != 0:
            raise MemoryError("int4_linear: no memory for its scratch rows")
    out = out.view(*x.shape[:-1], self.out_features)
    return out if x.dtype == torch.float32 else out.to(x.dtype)


def block_s(fn, calls: int) -> float:  # noqa: ANN001
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls


def ab(old, new, rounds: int, calls: int | None = None) -> dict:  # noqa: ANN001
    """Per round: old, new, new, old blocks of `calls` calls (default: ~BLOCK_S each); ratio
    new/old of the pair sums."""
    old(), new()
    calls = calls or max(3, int(BLOCK_S / min(block_s(old, 3), block_s(new, 3))))
    ratios, olds, news = [], [], []
    for _ in range(rounds):
        a1, b1, b2, a2 = (block_s(f, calls) for f in (old, new, new, old))
        ratios.append((b1 + b2) / (a1 + a2))
        olds.append(min(a1, a2))
        news.append(min(b1, b2))
    return {
        "old_us_best": min(olds) * 1e6,
        "new_us_best": min(news) * 1e6,
        "ratio_median": statistics.median(ratios),
        "ratio_min": min(ratios),
        "ratio_max": max(ratios),
        "load": os.getloadavg()[0],
    }


class _Ops(TorchDispatchMode):
    """Counts the aten operators that reach the dispatcher (a deterministic cost, unlike time)."""

    count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        self.count += 1
        return func(*args, **(kwargs or {}))


def aten_ops(fn) -> int:  # noqa: ANN001
    with _Ops() as ops:
        fn()
    return ops.count


def with_forward(forward, fn):  # noqa: ANN001, ANN202
    """fn() with Int4Linear.forward set to `forward` (every layer of the model at once)."""

    def run():  # noqa: ANN202
        Int4Linear.forward = forward
        try:
            return fn()
        finally:
            Int4Linear.forward = NEW_FORWARD

    return run


@torch.inference_mode()
def bench_layers(rounds: int) -> dict:
    g, out = torch.Generator().manual_seed(0), {}
    for o, i in SHAPES:
        for bias in (True, False):  # equality on both; time on the last, bias-free
            w = torch.randn(o, i, generator=g) / i**0.5
            layer = Int4Linear.from_float(w, torch.randn(o, generator=g) if bias else None)
            for rows in (1, 2, 8, 15):
                x = torch.randn(rows, i, generator=g)
                assert torch.equal(old_forward(layer, x), layer(x)), (o, i, bias, rows)
        for rows in (1, 2):
            x = torch.randn(rows, i, generator=g)
            res = ab(lambda: old_forward(layer, x), lambda: layer(x), rounds)  # noqa: B023
            out[f"{o}x{i}/rows_{rows}"] = res
            print(
                f"{o}x{i} (out x in), {rows} row(s): old {res['old_us_best']:.1f} us, new "
                f"{res['new_us_best']:.1f} us (best); new/old {res['ratio_median']:.3f} "
                f"[{res['ratio_min']:.3f}-{res['ratio_max']:.3f}], load {res['load']:.1f}",
                flush=True,
            )
    return out


@torch.inference_mode()
def bench_predictor(checkpoint: str, rounds: int) -> dict:
    from tts_core.models.qwen3_tts.model import load_model

    model = load_model(checkpoint, quantize="int4", warm_chunks=())
    predictor = model.talker.code_predictor
    layers = sum(isinstance(m, Int4Linear) for m in predictor.modules())
    print(f"loaded: {model.format_decision}; {layers} Int4Linear layers", flush=True)
    hidden = predictor.model.norm.weight.shape[0]
    out = {"int4_layers": layers}
    for rows in (1, 2):
        torch.manual_seed(1)
        past, c0 = torch.randn(rows, hidden), torch.randn(rows, hidden)

        def frame(past=past, c0=c0, rows=rows):  # noqa: ANN001, ANN202
            caches = predictor.new_caches(rows)
            return predictor.predict(past, c0, caches, lambda lg: lg.argmax(-1), by_row=True)

        old, new = with_forward(old_forward, frame), with_forward(NEW_FORWARD, frame)
        assert torch.equal(old(), new())  # the same greedy codes
        res = ab(old, new, rounds, 2)
        res["aten_ops_old"], res["aten_ops_new"] = aten_ops(old), aten_ops(new)
        out[f"rows_{rows}"] = res
        print(
            f"code predictor, a frame (15 passes), {rows} row(s): old "
            f"{res['old_us_best'] / 1e3:.2f} ms, new {res['new_us_best'] / 1e3:.2f} ms (best); "
            f"new/old {res['ratio_median']:.3f} [{res['ratio_min']:.3f}-{res['ratio_max']:.3f}], "
            f"load {res['load']:.1f}; aten ops a frame {res['aten_ops_old']} -> "
            f"{res['aten_ops_new']}",
            flush=True,
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--checkpoint", default="/tmp/qwen3-0.6B-random")
    ap.add_argument("--rounds", type=int, default=21)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--skip-predictor", action="store_true")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if native.int4_linear() is None:
        raise SystemExit("no 4-bit kernel here: nothing to compare")
    report = {"threads": args.threads, "layers": bench_layers(args.rounds)}
    if not args.skip_predictor:
        report["predictor"] = bench_predictor(args.checkpoint, args.rounds)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
