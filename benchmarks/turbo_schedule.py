"""Chatterbox Turbo's S3Gen schedule as a listener hears it, in-process: `model.stream` under
each schedule, interleaved (A B A B ...) over several seeds, each chunk's (arrival s, audio s)
played by a 250 ms player (`stall_s`, the condition tts_core/models/chatterbox/chunking.py
chose its ramp by), and the costs fitted from the chunks (`StreamCost`: a pass's fixed
seconds + seconds per token, least squares over the non-first chunks) with the stall the
default schedule is predicted to have at those costs, over streams of 60-400 tokens.

    .venv/bin/python benchmarks/turbo_schedule.py [--folder /tmp/chatterbox-turbo-real-random]
        [--seeds 3,4,5] [--threads 2] [--tokens 250] [--variants default,doubling,growth=6]
        [--json /tmp/turbo_schedule.json]

Variants: `default` (StreamChunking()), `doubling` (the ramp before: each step as many tokens
as the stream has, 12, 24, 48, 96, then every 50), `first=N`, `growth=N`, `chunk=N`. The
machine is shared: `uptime` is printed with the figures; read them as ratios. Random weights
do not stop on their own: each stream is cut at `--tokens` draws (250: 10 s of speech).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))
VOICE_CLIP = REPO / "assets/voices/arctic_slt_a0009_twice.wav"
TOKEN_SECONDS = 0.04


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def chunking_for(variant: str):  # noqa: ANN201 - StreamChunking, imported late
    """A variant's name -> its StreamChunking (module doc)."""
    from tts_core.models.chatterbox.chunking import StreamChunking

    class Doubling(StreamChunking):
        def next_pass(self, tokens: int) -> int:
            return tokens + min(self.chunk_tokens, max(1, tokens))

    if variant == "default":
        return StreamChunking()
    if variant == "doubling":
        return Doubling()
    name, value = variant.split("=")
    field = {"first": "first_tokens", "growth": "ramp_growth", "chunk": "chunk_tokens"}[name]
    return StreamChunking(**{field: int(value)})


def timed_stream(model, voice, seed: int, chunking, tokens: int) -> list[tuple[float, float, int]]:
    """(arrival s, audio s, tokens) of each chunk of one stream."""
    from served_bench import TEXT

    start, chunks = time.perf_counter(), []
    stream = model.stream(TEXT, voice, seed=seed, chunking=chunking, max_new_tokens=tokens)
    for chunk in stream:
        chunks.append((time.perf_counter() - start, len(chunk.audio) / 24000, chunk.tokens.numel()))
    return chunks


def fit_cost(runs: list[list[tuple[float, float, int]]]):  # noqa: ANN201 - StreamCost
    """Least squares of each later chunk's interval = pass_s + token_s x its tokens; the
    prefill is what the first chunk leaves over."""
    import numpy as np

    from tts_core.models.chatterbox.chunking import StreamCost

    rows, gaps = [], []
    for chunks in runs:
        for (before, _, _), (at, _, tokens) in zip(chunks, chunks[1:-1], strict=False):
            rows.append([1.0, tokens])
            gaps.append(at - before)
    (pass_s, token_s), *_ = np.linalg.lstsq(np.array(rows), np.array(gaps), rcond=None)
    first = [chunks[0] for chunks in runs]
    prefill = min(at - pass_s - token_s * tokens for at, _, tokens in first)
    return StreamCost(max(0.0, float(prefill)), float(token_s), float(pass_s))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--folder", default="/tmp/chatterbox-turbo-real-random")
    parser.add_argument("--seeds", default="3,4,5")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=250)
    parser.add_argument("--variants", default="default,doubling")
    parser.add_argument("--buffer", type=float, default=0.25)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    import soundfile as sf
    import torch

    import tts_core
    from tts_core.models.chatterbox.chunking import chunk_timeline, stall_s

    torch.set_num_threads(args.threads)
    model = tts_core.load_model(args.folder, quantize="auto")
    clip, rate = sf.read(VOICE_CLIP, dtype="float32")
    voice = model.create_voice(clip, rate)
    list(model.stream("Hello there.", voice, seed=1, max_new_tokens=40))  # warm: T3 prefix, kernels
    variants = args.variants.split(",")
    results, by_variant = [], {v: [] for v in variants}
    for seed in (int(s) for s in args.seeds.split(",")):
        for variant in variants:  # interleaved: the machine's load falls on every variant
            chunks = timed_stream(model, voice, seed, chunking_for(variant), args.tokens)
            arrivals = [(at, audio) for at, audio, _ in chunks]
            audio = sum(a for _, a in arrivals)
            row = {
                "variant": variant,
                "seed": seed,
                "first_audio_s": arrivals[0][0],
                "rtf_after_first": (arrivals[-1][0] - arrivals[0][0]) / max(1e-9, audio),
                "stall_s": max(0.0, stall_s(arrivals, args.buffer)),
                "margin_s": -stall_s(arrivals, args.buffer),
                "chunks": arrivals,
                "uptime": uptime(),
            }
            results.append(row)
            by_variant[variant].append(chunks)
            print(
                f"{variant:10} seed {seed}  first {row['first_audio_s']:.3f} s  rtf "
                f"{row['rtf_after_first']:.2f}  stall {row['stall_s']:.2f} s  "
                + " ".join(f"{at:.2f}/{a:.2f}" for at, a in arrivals[:7])
                + f"   [{row['uptime'].split('load')[-1]}]",
                flush=True,
            )
    cost = fit_cost([chunks for runs in by_variant.values() for chunks in runs])
    predicted = {
        v: max(stall_s(chunk_timeline(chunking_for(v), n, cost)) for n in range(60, 400))
        for v in variants
    }
    print(f"fitted cost: {cost}")
    for variant, stall in predicted.items():
        print(f"  {variant:10} predicted worst stall_s {stall:+.3f} (negative: margin)")
    if args.json:
        args.json.write_text(json.dumps({"results": results, "cost": vars(cost)}, indent=1))


if __name__ == "__main__":
    main()
