"""S3Gen's estimator formats (tts_core/models/chatterbox/estimator_format.py) A/B in one process
(issue 38, item 5): what `auto` decided, and float32 against every format this CPU has,
interleaved (float32, int8, bfloat16, float32, ...) so a busy machine's load falls on each.

    .venv/bin/python benchmarks/chatterbox_estimator_formats.py
        [--folder /tmp/chatterbox-turbo-real-random] [--threads 2] [--repeats 5]
        [--seeds 3,4] [--stream-tokens 60] [--skip layers,pass,stream] [--cpu --threads 1]

1. layers: one estimator block's six projections (q, k, v, out, ff in, ff out) at the row
   counts a stream's passes have (74: the first pass, 25 prompt + 12 tokens; 148, 300), ms;
2. pass: a stream's first S3Gen pass by part (chatterbox_first_pass.first_pass), median ms;
3. stream: `model.stream` first audio (T3's first 12 tokens + that pass) and the stream's
   audio against the whole pass in the same format (generate(stream_noise=True)), dB; and the
   calibration pass's mel SNR of each format against float32.
ONEDNN_MAX_CPU_ISA=AVX512_CORE_VNNI emulates a CPU without native bf16 (the 2-vCPU Xeon).
`uptime` is printed: read ratios more than milliseconds on a shared machine.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

ROWS = (74, 148, 300)


def in_format(model, fmt: str, run):  # noqa: ANN001, ANN201
    """`run()` with the estimator's projections in `fmt`, then as they were."""
    from tts_core.models.chatterbox import estimator_format as ef

    estimator = model.flow.decoder.estimator
    was = ef.estimator_format(estimator)
    if was != "float32":
        raise ValueError("load the float32 model (quantize none) to compare formats")
    restore = ef.convert(estimator, fmt) if fmt != "float32" else (lambda: None)
    try:
        return run()
    finally:
        restore()


def layers_table(model, formats: list[str], repeats: int) -> None:  # noqa: ANN001
    import torch

    from tts_core.models.chatterbox import estimator_format as ef

    estimator = model.flow.decoder.estimator
    block, prefix = estimator.down_blocks[0][1][0], "down_blocks.0.1.0."
    names = [n.removeprefix(prefix) for n in ef.projections(estimator) if n.startswith(prefix)]
    print(f"one block's projections ({len(names)} layers), best of {repeats}, ms:")
    for rows in ROWS:
        best = dict.fromkeys(formats, float("inf"))
        for _ in range(repeats):
            for fmt in formats:
                layers = [block.get_submodule(n) for n in names]
                if fmt != "float32":
                    layers = [ef.CONVERTERS[fmt](layer) for layer in layers]
                xs = [torch.randn(rows, layer.in_features) for layer in layers]
                with torch.inference_mode():
                    for layer, x in zip(layers, xs, strict=True):
                        layer(x)  # warm
                    start = time.perf_counter()
                    for layer, x in zip(layers, xs, strict=True):
                        layer(x)
                best[fmt] = min(best[fmt], (time.perf_counter() - start) * 1e3)
        print(f"  {rows:4} rows  " + "  ".join(f"{f} {ms:.3f}" for f, ms in best.items()))


def pass_table(model, formats: list[str], repeats: int) -> None:  # noqa: ANN001
    import torch
    from chatterbox_first_pass import PartTimer, first_pass

    from tts_core.models.chatterbox.chunking import StreamChunking

    voice, chunking = model.builtin_voice, StreamChunking()
    tokens = torch.randint(0, 6561, (1, chunking.first_tokens), generator=torch.Generator())
    timer = PartTimer(model)
    runs: dict[str, list[dict]] = {f: [] for f in formats}
    for fmt in formats:  # warm each
        in_format(model, fmt, lambda: first_pass(model, voice, tokens, chunking, timer))
    for _ in range(repeats):
        for fmt in formats:
            runs[fmt].append(
                in_format(model, fmt, lambda: first_pass(model, voice, tokens, chunking, timer))
            )
    for handle in timer.handles:
        handle.remove()
    print(f"first S3Gen pass ({chunking.first_tokens} tokens), median / min of {repeats}, ms:")
    print("  part           " + "".join(f"{f:>18}" for f in formats))
    for part in runs[formats[0]][0]:
        values = [[r[part] for r in runs[f]] for f in formats]
        cells = [f"{statistics.median(v):.1f} / {min(v):.1f}" for v in values]
        print(f"  {part:14} " + "".join(f"{c:>18}" for c in cells))


def stream_table(model, formats: list[str], seeds: list[int], tokens: int) -> None:  # noqa: ANN001
    import numpy as np
    from chatterbox_stream_bench import snr_db
    from served_bench import TEXT

    from tts_core.models.chatterbox import estimator_format as ef
    from tts_core.models.chatterbox.chunking import StreamChunking

    reference = ef.calibration_mel(model)
    snr = {
        f: in_format(model, f, lambda: ef.sqnr_db(reference, ef.calibration_mel(model)))
        for f in formats
    }
    first: dict[str, list[float]] = {f: [] for f in formats}
    stream_snr: dict[str, list[float]] = {f: [] for f in formats}
    list(model.stream("Hello there.", seed=1, max_new_tokens=20))  # warm: T3's voice prefix

    def one(seed: int) -> tuple[float, float]:
        start, chunks = time.perf_counter(), []
        for chunk in model.stream(
            TEXT, seed=seed, max_new_tokens=tokens, chunking=StreamChunking()
        ):
            chunks.append((time.perf_counter() - start, chunk.audio))
        whole = model.generate(TEXT, seed=seed, max_new_tokens=tokens, stream_noise=True).audio
        return chunks[0][0], snr_db(whole, np.concatenate([a for _, a in chunks]))

    for seed in seeds:
        for fmt in formats:
            at, db = in_format(model, fmt, lambda: one(seed))  # noqa: B023
            first[fmt].append(at * 1e3)
            stream_snr[fmt].append(db)
    print(f"model.stream, {tokens} tokens, seeds {seeds}:")
    for fmt in formats:
        print(
            f"  {fmt:9} first audio ms {' '.join(f'{v:.0f}' for v in first[fmt])}"
            f" (median {statistics.median(first[fmt]):.0f}, min {min(first[fmt]):.0f});"
            " stream vs whole dB "
            f"{' '.join(f'{v:.1f}' for v in stream_snr[fmt])}; calibration mel SNR vs "
            f"float32 {snr[fmt]:.1f} dB"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--folder", default="/tmp/chatterbox-turbo-real-random")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seeds", default="3,4")
    parser.add_argument("--stream-tokens", type=int, default=60)
    parser.add_argument("--skip", default="")
    parser.add_argument("--cpu", action="store_true", help="pass: the thread's CPU time")
    args = parser.parse_args()
    if args.cpu:  # with --threads 1: the work, not the waits a busy machine adds
        import chatterbox_first_pass

        chatterbox_first_pass.CLOCK[0] = time.thread_time

    import os

    import torch
    from turbo_schedule import uptime

    from tts_core.models.chatterbox import estimator_format as ef
    from tts_core.models.chatterbox.model import ChatterboxTurboModel
    from tts_core.quant.quantize import set_module

    torch.set_num_threads(args.threads)
    print(uptime(), "| ONEDNN_MAX_CPU_ISA", os.environ.get("ONEDNN_MAX_CPU_ISA", "(unset)"))
    # T3 int8 as `auto` has it at this size; the estimator float32 until `auto` runs below
    model = ChatterboxTurboModel.from_pretrained(args.folder, quantize="int8")
    estimator = model.flow.decoder.estimator
    floats = ef.projections(estimator)
    start = time.perf_counter()
    report = ef.choose_estimator_format(model, "auto")
    print(f"auto ({time.perf_counter() - start:.1f} s): {report.described}")
    for path, linear in floats.items():  # float32 again: the tables convert per run
        set_module(estimator, path, linear)
    formats = ["float32", *ef.candidate_formats()]
    skip = set(args.skip.split(","))
    if "layers" not in skip:
        layers_table(model, formats, args.repeats)
    if "pass" not in skip:
        pass_table(model, formats, args.repeats)
    if "stream" not in skip:
        stream_table(model, formats, [int(s) for s in args.seeds.split(",")], args.stream_tokens)
    print(uptime())


if __name__ == "__main__":
    main()
