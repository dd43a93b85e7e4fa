"""Talker / code-predictor timings at the real model size, random weights, CPU.

    .venv/bin/python benchmarks/model_bench.py [--size 0.6B] [--threads 2] [--frames 6]

Builds the model with `Qwen3TTSModel.from_config` from the released JSONs (no weights are
downloaded), then times one prefill of `--prefill` positions (134 = an ICL prompt with a
10 s reference), `--frames` talker decode steps and as many code-predictor frames (15 passes
each). Prints a table and writes benchmarks/results/model_bench.json.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import time
from pathlib import Path

import torch

from tts_core.models.qwen3_tts.model import Qwen3TTSModel

REFERENCE = Path("/work/shared/reference/checkpoints")
CONFIGS = {
    "0.6B": REFERENCE / "Qwen3-TTS-12Hz-0.6B-Base",
    "1.7B": REFERENCE / "Qwen3-TTS-12Hz-1.7B-Base",
}
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def _ms(seconds: float) -> float:
    return round(seconds * 1000.0, 2)


@torch.inference_mode()
def time_model(model: Qwen3TTSModel, prefill_len: int, frames: int) -> dict[str, float]:
    talker = model.talker
    predictor = talker.code_predictor
    hidden = talker.cfg.stack.hidden_size
    generator = torch.Generator().manual_seed(0)
    prefill = torch.randn(1, prefill_len, hidden, generator=generator).to(model.dtype) * 0.05
    caches = talker.new_caches(1, prefill_len + frames + 1)
    predictor_caches = predictor.new_caches(1)

    start = time.perf_counter()
    logits, past_hidden = talker(prefill, caches, start=0)
    prefill_s = time.perf_counter() - start

    step_s = predictor_s = 0.0
    for index in range(frames):
        c0 = logits[:, :2048].argmax(-1)
        start = time.perf_counter()
        rest = predictor.predict(
            past_hidden, talker.codec_embed(c0), predictor_caches, lambda x: x.argmax(-1)
        )
        predictor_s += time.perf_counter() - start
        frame = torch.cat([c0, rest[0]])
        start = time.perf_counter()
        step = (talker.frame_embed(frame[None]) + model.special.pad).view(1, 1, -1)
        logits, past_hidden = talker(step, caches, start=prefill_len + index)
        step_s += time.perf_counter() - start
    return {
        "prefill_ms": _ms(prefill_s),
        "talker_step_ms": _ms(step_s / frames),
        "code_predictor_ms": _ms(predictor_s / frames),
        "frame_ms": _ms((step_s + predictor_s) / frames),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=sorted(CONFIGS), default="0.6B")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--frames", type=int, default=6)
    parser.add_argument("--prefill", type=int, default=134)
    parser.add_argument("--dtypes", nargs="+", choices=sorted(DTYPES), default=list(DTYPES))
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/model_bench.json"))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    rows = []
    for name in args.dtypes:
        built = time.perf_counter()
        model = Qwen3TTSModel.from_config(CONFIGS[args.size], dtype=DTYPES[name], with_codec=False)
        build_s = time.perf_counter() - built
        time_model(model, prefill_len=8, frames=1)  # warm-up (allocator, kernels)
        row = {"size": args.size, "dtype": name, "threads": args.threads, "build_s": build_s}
        row |= time_model(model, prefill_len=args.prefill, frames=args.frames)
        rows.append(row)
        del model
        gc.collect()

    header = f"{'model':6} {'dtype':9} {'thr':>3} {'prefill ms':>11} {'talker step ms':>15} "
    header += f"{'predictor ms/frame':>19} {'frame ms':>9} {'x realtime':>10}"
    load = os.getloadavg()[0]
    print(
        f"prefill = {args.prefill} positions; averages over {args.frames} frames; "
        f"1-min load average {load:.1f} on {os.cpu_count()} CPUs (shared box: noisy)"
    )
    print(header)
    for row in rows:
        realtime = 80.0 / row["frame_ms"]
        print(
            f"{row['size']:6} {row['dtype']:9} {row['threads']:>3} {row['prefill_ms']:>11.1f} "
            f"{row['talker_step_ms']:>15.1f} {row['code_predictor_ms']:>19.1f} "
            f"{row['frame_ms']:>9.1f} {realtime:>10.2f}"
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps({"prefill_len": args.prefill, "load_average": load, "rows": rows}, indent=2)
    )
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
