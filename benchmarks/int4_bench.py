"""4-bit against 8-bit for the code predictor (issue 38, item 4): kernel GB/s, the code
predictor's ms a frame, and the accuracy gate's numbers.

    TTS_CORE_CACHE=/tmp/h-int4-cache PYTHONPATH=. .venv/bin/python benchmarks/int4_bench.py \
        --checkpoint /tmp/qwen3-0.6B-random [--rounds 6] [--threads 2] [--json out.json] \
        [--skip kernels,talker,predictor,gate]

* kernels: one code-predictor pass's linears at the checkpoint's shapes (5 layers x qkv, o,
  gate_up, down, and one head), random weights, as Int8Linear and as Int4Linear from the same
  float weights, at 1 and 8 rows: ms a pass and GB/s (weight bytes read / time). The 5 layers
  do not fit in the L3 together, so each pass reads them from memory as the model's do.
* talker: the same over the talker's 28 layers at 1 row (one step's linears; measured, not
  shipped: no gate for the talker).
* predictor: the loaded int8 model's code predictor (`load_model(quantize="int8")`) against its
  4-bit copy (`int4_predictor`), 15 passes of `predict` = one frame, 1 and 8 rows.
* gate: `compare_predictors` driven by the int8 model (int4 against int8, what `auto` measures
  at load) and by the float32 model (int8 and int4 against float32).
Last, a summary: the speed ratios beside the gate's figures (greedy code agreement and audio SNR
against float32 and, for int4, against int8).
A busy machine: A and B run in pairs (the order alternating), the median pair's ratio per round;
printed: the best time of each, the median of the rounds' ratios (their range) and the load
average; read the ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from functools import partial
from pathlib import Path

import torch

from tts_core.models import native
from tts_core.quant.int4 import Int4Linear
from tts_core.quant.linear import Int8Linear


def layer_shapes(stack, layers: int | None = None) -> list[tuple[int, int]]:  # noqa: ANN001
    """(out, in) of a stack's fused linears (qkv, o, gate_up, down) over its layers."""
    q, kv = stack.num_attention_heads * stack.head_dim, stack.num_key_value_heads * stack.head_dim
    h, i = stack.hidden_size, stack.intermediate_size
    return [(q + 2 * kv, h), (h, q), (2 * i, h), (h, i)] * (layers or stack.num_hidden_layers)


def buffer_bytes(module: torch.nn.Module) -> int:
    return sum(b.numel() * b.element_size() for b in module.buffers() if b is not None)


def once_s(fn) -> float:  # noqa: ANN001
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def interleaved(a, b, rounds: int, pairs: int) -> list[dict]:  # noqa: ANN001
    """`rounds` x `pairs` calls of a and b side by side (the order alternating), each pair's
    ratio b / a kept: on a busy machine a pair is taken in one slice of time more often than two
    separate runs are. Per round: the median pair and the best of each, and the load average."""
    a(), b()
    results = []
    for r in range(rounds):
        times = []
        for p in range(pairs):
            if (r + p) % 2:
                tb, ta = once_s(b), once_s(a)
            else:
                ta, tb = once_s(a), once_s(b)
            times.append((ta, tb))
        results.append(
            {
                "a_ms": min(t[0] for t in times) * 1e3,
                "b_ms": min(t[1] for t in times) * 1e3,
                "ratio": statistics.median(tb / ta for ta, tb in times),
                "load": os.getloadavg()[0],
            }
        )
    return results


def summary(results: list[dict]) -> dict:
    """Medians over the rounds (and the best of each side over all of them)."""
    return {
        "a_ms_median": statistics.median(r["a_ms"] for r in results),
        "b_ms_median": statistics.median(r["b_ms"] for r in results),
        "a_ms_best": min(r["a_ms"] for r in results),
        "b_ms_best": min(r["b_ms"] for r in results),
        "ratio_median": statistics.median(r["ratio"] for r in results),
        "ratio_min": min(r["ratio"] for r in results),
        "ratio_max": max(r["ratio"] for r in results),
        "load_min": min(r["load"] for r in results),
        "load_max": max(r["load"] for r in results),
        "rounds": results,
    }


def run_pass(layers: list[torch.nn.Module], xs: list[torch.Tensor]) -> None:
    for layer, x in zip(layers, xs, strict=True):
        layer(x)


def greedy(logits: torch.Tensor) -> torch.Tensor:
    return logits.argmax(-1)


@torch.inference_mode()
def bench_kernels(
    label: str, shapes: list[tuple[int, int]], rounds: int, rows_list: tuple[int, ...]
) -> dict:
    """One pass over `shapes` as Int8Linear and as Int4Linear (the same random weights)."""
    g = torch.Generator().manual_seed(0)
    int8, int4 = [], []
    for o, i in shapes:  # one float weight at a time: the talker's would take 1.7 GB
        w = torch.randn(o, i, generator=g) / i**0.5
        int8.append(Int8Linear(w))
        int4.append(Int4Linear.from_float(w))
    bytes8, bytes4 = sum(map(buffer_bytes, int8)), sum(map(buffer_bytes, int4))
    out = {"bytes_int8": bytes8, "bytes_int4": bytes4, "int8_isa": int8[0].kernel_isa}
    for rows in rows_list:
        xs = [torch.randn(rows, i, generator=g) for _, i in shapes]
        res = summary(
            interleaved(partial(run_pass, int8, xs), partial(run_pass, int4, xs), rounds, 15)
        )
        res["int8_gb_s"] = bytes8 / res["a_ms_best"] / 1e6  # the least disturbed call
        res["int4_gb_s"] = bytes4 / res["b_ms_best"] / 1e6
        out[f"rows_{rows}"] = res
        print(
            f"kernels, {label} ({bytes8 / 1e6:.1f} MB int8, {bytes4 / 1e6:.1f} MB int4), "
            f"{rows} row(s), best: int8 {res['a_ms_best']:.2f} ms ({res['int8_gb_s']:.1f} GB/s), "
            f"int4 {res['b_ms_best']:.2f} ms ({res['int4_gb_s']:.1f} GB/s); ratio int4/int8 "
            f"{res['ratio_median']:.3f} [{res['ratio_min']:.3f}-{res['ratio_max']:.3f}], "
            f"load {res['load_min']:.1f}-{res['load_max']:.1f}",
            flush=True,
        )
    return out


@torch.inference_mode()
def bench_predictor(model, four, rounds: int) -> dict:  # noqa: ANN001
    eight = model.talker.code_predictor
    hidden = eight.model.norm.weight.shape[0]
    out = {}
    for rows in (1, 8):
        torch.manual_seed(1)
        past, c0 = torch.randn(rows, hidden), torch.randn(rows, hidden)
        caches8, caches4 = eight.new_caches(rows), four.new_caches(rows)

        res = summary(
            interleaved(
                partial(eight.predict, past, c0, caches8, greedy, by_row=True),
                partial(four.predict, past, c0, caches4, greedy, by_row=True),
                rounds,
                5,
            )
        )
        out[f"rows_{rows}"] = res
        print(
            f"code predictor, 15 passes (a frame), {rows} row(s), best: int8 "
            f"{res['a_ms_best']:.1f} ms, int4 {res['b_ms_best']:.1f} ms; ratio "
            f"{res['ratio_median']:.3f} [{res['ratio_min']:.3f}-{res['ratio_max']:.3f}], load "
            f"{res['load_min']:.1f}-{res['load_max']:.1f}",
            flush=True,
        )
    return out


def bench_gate(checkpoint: str, model, four, frames: int) -> dict:  # noqa: ANN001
    from tts_core.models.qwen3_tts.int4 import compare_predictors
    from tts_core.models.qwen3_tts.model import load_model

    out = {}
    seen, _ = compare_predictors(model, {"int4": four}, frames=frames)
    out["int4_vs_int8"] = vars(seen["int4"]) | {"agreement": seen["int4"].agreement}
    print(f"gate, int4 against int8: {seen['int4'].describe()}", flush=True)
    floats = load_model(checkpoint, quantize="none", warm_chunks=())
    eight = model.talker.code_predictor
    seen, _ = compare_predictors(floats, {"int8": eight, "int4": four}, frames=frames)
    for name, agreement in seen.items():
        out[f"{name}_vs_float32"] = vars(agreement) | {"agreement": agreement.agreement}
        print(f"gate, {name} against float32: {agreement.describe()}", flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--frames", type=int, default=64, help="gate frames")
    ap.add_argument("--skip", default="", help="comma-separated: kernels,talker,predictor,gate")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    skip = set(filter(None, args.skip.split(",")))
    from tts_core.models.qwen3_tts.int4 import int4_predictor
    from tts_core.models.qwen3_tts.model import load_model

    report = {"threads": args.threads, "int4_kernel": native.int4_linear() is not None}
    t0 = time.perf_counter()
    model = load_model(args.checkpoint, quantize="int8", warm_chunks=())
    print(f"loaded int8 in {time.perf_counter() - t0:.1f} s: {model.format_decision}", flush=True)
    t0 = time.perf_counter()
    four = int4_predictor(model.talker.code_predictor)
    report["int4_convert_s"] = time.perf_counter() - t0
    print(f"code predictor to int4 in {report['int4_convert_s']:.1f} s", flush=True)

    def save() -> None:  # after each part: a run cut short keeps what it measured
        if args.json:
            args.json.write_text(json.dumps(report, indent=1))

    if "kernels" not in skip:
        cp = model.talker.cfg.code_predictor
        shapes = layer_shapes(cp.stack) + [(cp.vocab_size, cp.stack.hidden_size)]
        report["kernels"] = bench_kernels("code predictor pass", shapes, args.rounds, (1, 8))
        save()
    if "predictor" not in skip:
        report["predictor"] = bench_predictor(model, four, args.rounds)
        save()
    if "gate" not in skip:
        report["gate"] = bench_gate(args.checkpoint, model, four, args.frames)
        save()
    if "talker" not in skip:
        shapes = layer_shapes(model.talker.cfg.stack)
        report["talker"] = bench_kernels("talker step", shapes, args.rounds, (1,))
        save()
    report["summary"] = summary_lines(report)
    print("\n".join(report["summary"]), flush=True)
    save()


def summary_lines(report: dict) -> list[str]:
    """The decision's figures side by side: int4's speed against int8 and, for each format, the
    gate's greedy code agreement and audio SNR against float32 (and int4's against int8, what
    `auto` measures at load)."""
    lines = []
    for part in ("kernels", "predictor"):
        for rows, res in report.get(part, {}).items():
            if rows.startswith("rows_"):
                lines.append(
                    f"summary, speed: {part} at {rows[5:]} row(s), int4/int8 time "
                    f"{res['ratio_median']:.3f} [{res['ratio_min']:.3f}-{res['ratio_max']:.3f}]"
                )
    for name, seen in report.get("gate", {}).items():
        snr = seen["audio_snr_db"]
        lines.append(
            f"summary, gate: {name.replace('_vs_', ' against ')}: greedy codes "
            f"{100 * seen['agreement']:.1f} % equal, whole frames {seen['frames_equal']}/"
            f"{seen['frames']}, audio SNR {'n/a' if snr is None else f'{snr:.1f} dB'}"
        )
    return lines


if __name__ == "__main__":
    main()
