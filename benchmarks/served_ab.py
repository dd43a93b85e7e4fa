"""The served loop beside `model.stream`: one request stepped four ways in one process (issue 38).

    .venv/bin/python benchmarks/served_ab.py --model /tmp/qwen3-0.6B-random \
        [--frames 60] [--rounds 3] [--greedy] [--ways stream arena served async] [--json out.json]

Loads the model as the app does (`Qwen3Backend.load` on a thread that ends: `auto` formats, the
codec decoder's format, the served loop of `max_batch` 8 rows over 8 x 1024 positions), makes
the built-in voice `alloy` on the loop thread and steps the same request (the app's: sampled
with the checkpoint's defaults unless `--greedy`, one seed, chunks 2 + 6, the streaming-text
layout, `--frames` frames) `--rounds` times each way, the ways interleaved:

* stream: `model.stream` (run_alone over its own cache), run on the loop thread (`loop.call`);
* arena: the served runner (its KV arena, the code predictor's caches for `max_batch` rows,
  prefill chunks of 128) stepped by run_alone on the loop thread: the runner without the
  thread handoff;
* served: `loop.submit`, its chunks taken by another thread blocked on them;
* async: the same taken on an asyncio event loop (`iterate_awaiting`), as the HTTP route does;
* polled: async while the event loop also runs Gradio's two polling loops (GRADIO_POLLS_S);
* app_polled: the same at the periods the app sets them to (app.py GRADIO_QUEUE_POLL_S,
  GRADIO_PROGRESS_POLL_S: 20 and 100 ms);
* bench: `model.stream` of engine_bench.py / frame_floor.py's clip instead (their reference
  clip and text, greedy, 26 frames), on the loop thread: what the request itself changes.

Every computation stays on the loop thread's one OpenMP team (engine/model_thread.py: a second
team would slow every later way). Per way: ms per frame after the first chunk (first chunk's
arrival to the last's), the first chunk's time, and the ratio to `stream` of the same round;
the frames of every way must be the same request's (the same seed gives the same codes).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import soundfile as sf
from common import LANGUAGE, REF_CLIP, REF_TEXT
from common import TEXT as BENCH_TEXT
from served_bench import TEXT, load_average

from tts_core.audio.analysis import resample
from tts_core.backends.qwen3 import Qwen3Backend
from tts_core.engine.awaiting import iterate_awaiting
from tts_core.engine.model_thread import run_on_passing_thread
from tts_core.serving import BatchEngine, InlineOutbox, run_alone

REPO = Path(__file__).resolve().parent.parent
VOICES = REPO / "assets" / "voices"
WAYS = ("stream", "arena", "served", "async", "polled", "app_polled", "bench")
# Gradio's queue (gradio/queueing.py, Linux): `start_processing` sleeps 1 ms between looks at an
# empty queue, `start_progress_updates` 10 ms: the event loop of the app wakes ~1,100 times a
# second for the whole life of the server
GRADIO_POLLS_S = (0.001, 0.01)
APP_POLLS_S = (0.02, 0.1)  # app.py's GRADIO_QUEUE_POLL_S, GRADIO_PROGRESS_POLL_S
BENCH_FRAMES = 26  # frame_floor.py's clip

Stamps = list[tuple[float, int]]  # (perf_counter at the chunk's arrival, its frames)


def stamped(chunks: Iterator[Any], started: float) -> dict:
    """Every chunk's arrival; closes `chunks`."""
    stamps: Stamps = []
    try:
        for chunk in chunks:
            stamps.append((time.perf_counter(), chunk.frames))
    finally:
        chunks.close()
    return summary(stamps, started)


def summary(stamps: Stamps, started: float) -> dict:
    """ms per frame after the first chunk, first chunk ms, frames."""
    frames = sum(n for _, n in stamps)
    later = frames - stamps[0][1]
    return {
        "frames": frames,
        "first_chunk_ms": 1000 * (stamps[0][0] - started),
        "ms_per_frame": 1000 * (stamps[-1][0] - stamps[0][0]) / later if later else None,
    }


def make_ways(
    backend: Qwen3Backend, voice: Any, kwargs: dict, bench_voice: Any
) -> dict[str, Callable[[], dict]]:
    model, loop = backend.model, backend.loop

    def stream() -> dict:  # on the loop thread
        started = time.perf_counter()
        return stamped(model.stream(TEXT, voice, **kwargs), started)

    def arena() -> dict:  # on the loop thread: the served runner, no handoff
        started = time.perf_counter()
        seq = model.request(
            TEXT, voice, cache_positions=loop.runner.capacity, outbox=InlineOutbox(), **kwargs
        )
        return stamped(run_alone(lambda: BatchEngine(loop.runner), seq), started)

    def served() -> dict:  # this thread takes what the loop thread makes
        started = time.perf_counter()
        return stamped(loop.submit(TEXT, voice, **kwargs), started)

    def on_event_loop(polls_s: tuple[float, ...] = ()) -> dict:
        async def consume() -> dict:
            pollers = [asyncio.ensure_future(poll(s)) for s in polls_s]
            started, stamps = time.perf_counter(), []
            async for chunk in iterate_awaiting(submitted()):
                stamps.append((time.perf_counter(), chunk.frames))
            for poller in pollers:
                poller.cancel()
            return summary(stamps, started)

        async def poll(every_s: float) -> None:
            while True:
                await asyncio.sleep(every_s)

        def submitted() -> Iterator[Any]:
            chunks = loop.submit(TEXT, voice, **kwargs)
            try:
                yield from chunks
            finally:
                chunks.close()

        return asyncio.run(consume())

    def bench() -> dict:  # on the loop thread: engine_bench.py's clip
        started = time.perf_counter()
        clip = dict(kwargs, greedy=True, max_new_tokens=BENCH_FRAMES + 1, language=LANGUAGE)
        return stamped(model.stream(BENCH_TEXT, bench_voice, **clip), started)

    return {
        "stream": lambda: loop.call(stream),
        "bench": lambda: loop.call(bench),
        "arena": lambda: loop.call(arena),
        "served": served,
        "async": on_event_loop,
        "polled": lambda: on_event_loop(GRADIO_POLLS_S),
        "app_polled": lambda: on_event_loop(APP_POLLS_S),
    }


def alloy(backend: Qwen3Backend) -> Any:
    """The built-in voice the served benchmarks use, made on the loop thread (create_voice)."""
    spec = json.loads((VOICES / "voices.json").read_text())["alloy"]
    audio, rate = sf.read(VOICES / spec["file"], dtype="float32")
    audio = resample(audio, rate, 24_000) if rate != 24_000 else audio
    return backend.create_voice(audio, spec["transcript"]).data


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--frames", type=int, default=120, help="about the served text's length")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--greedy", action="store_true")
    ap.add_argument("--quantize", default="int8", help="the app's `auto` chose int8 here")
    ap.add_argument("--ways", nargs="+", choices=WAYS, default=list(WAYS))
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    load_before = load_average()
    began = time.perf_counter()
    backend = run_on_passing_thread(lambda: Qwen3Backend.load(args.model, quantize=args.quantize))
    print(f"loaded in {time.perf_counter() - began:.0f} s", flush=True)
    voice = alloy(backend)
    audio, rate = sf.read(REF_CLIP, dtype="float32")
    bench_voice = backend.create_voice(audio, REF_TEXT).data
    kwargs = dict(
        language="auto",
        non_streaming_mode=False,
        first_chunk_frames=2,
        chunk_frames=6,
        max_new_tokens=args.frames + 1,
        length_cap=False,
        seed=7,
        greedy=args.greedy,
    )
    ways = make_ways(backend, voice, kwargs, bench_voice)
    for name in args.ways:  # warm every path once (shapes, first decoder chunks)
        ways[name]()
    rounds = []
    for index in range(args.rounds):
        rounds.append({})
        for name in args.ways:
            rounds[-1][name] = ways[name]()
            print(f"round {index} {name}: {rounds[-1][name]}; {load_average()}", flush=True)
    result = {
        "model": args.model,
        "weights": backend.weight_format,
        "greedy": args.greedy,
        "load_average_before": load_before,
        "load_average_after": load_average(),
        "rounds": rounds,
    }
    base = args.ways[0]
    print(
        f"{args.model} weights {backend.weight_format}, {'greedy' if args.greedy else 'sampled'}"
        f"; load average before {load_before}, after {result['load_average_after']}"
    )
    print(f"| way | ms a frame after the first chunk (each round) | median ratio to {base} |")
    print("|--|--|--:|")
    for name in args.ways:
        per_frame = [r[name]["ms_per_frame"] for r in rounds]
        ratios = [r[name]["ms_per_frame"] / r[base]["ms_per_frame"] for r in rounds]
        frames = {r[name]["frames"] for r in rounds}
        print(
            f"| {name} ({'/'.join(map(str, frames))} frames) | "
            f"{', '.join(f'{v:.1f}' for v in per_frame)} | {statistics.median(ratios):.3f} |"
        )
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    backend.loop.close()


if __name__ == "__main__":
    main()
