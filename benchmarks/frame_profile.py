"""Where a frame's time goes, per operator: `torch.profiler` over one streamed clip.

    .venv/bin/python benchmarks/frame_profile.py --checkpoint /tmp/qwen3-0.6B-random \
        [--dtype int8] [--decoder-dtype bfloat16] [--frames 26] [--rows 30]

Loads as engine_bench.py does (EOS suppressed, the same reference voice and text), streams one
warm-up clip, times one clip without and one with the profiler, and prints the aten operators
by their own CPU time. Work outside aten (our ctypes int8 kernels, Python) is the wall time
minus the operators' total.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import soundfile as sf
import torch
from common import LANGUAGE, REF_CLIP, REF_TEXT, TEXT
from engine_bench import DTYPES, suppress_eos
from torch.profiler import ProfilerActivity, profile

import tts_core


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoint", type=Path, required=True)
    ap.add_argument("--dtype", choices=[*sorted(DTYPES), "int8"], default="int8")
    ap.add_argument("--decoder-dtype", choices=sorted(DTYPES), default="bfloat16")
    ap.add_argument("--frames", type=int, default=26)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rows", type=int, default=30)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    int8 = args.dtype == "int8"
    model = tts_core.load_model(
        args.checkpoint,
        dtype=DTYPES["float32" if int8 else args.dtype],
        quantize="int8" if int8 else None,
        decoder_dtype=DTYPES[args.decoder_dtype],
    )
    suppress_eos(model)
    ref, rate = sf.read(REF_CLIP, dtype="float32")
    voice = model.create_voice(ref, rate, ref_text=REF_TEXT)

    def clip() -> float:
        start = time.perf_counter()
        for _ in model.stream(
            TEXT,
            voice,
            language=LANGUAGE,
            greedy=True,
            length_cap=False,
            max_new_tokens=args.frames + 1,
        ):
            pass
        return time.perf_counter() - start

    clip()
    plain = clip()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        profiled = clip()
    ops = prof.key_averages()
    own_ms = sum(op.self_cpu_time_total for op in ops) / 1000
    print(
        f"{args.frames} frames: {1000 * plain:.0f} ms wall ({1000 * plain / args.frames:.1f} a "
        f"frame), {1000 * profiled:.0f} ms profiled; aten operators' own time {own_ms:.0f} ms "
        f"({own_ms / args.frames:.1f} a frame); load average "
        f"{' '.join(Path('/proc/loadavg').read_text().split()[:3])}"
    )
    print(ops.table(sort_by="self_cpu_time_total", row_limit=args.rows, max_name_column_width=50))


if __name__ == "__main__":
    main()
