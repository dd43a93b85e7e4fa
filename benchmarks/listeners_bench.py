"""What a listener hears (issue 38, item 6): 1-4 concurrent listeners through `/v1` of the app.

    .venv/bin/python benchmarks/listeners_bench.py --model /tmp/qwen3-0.6B-random \
        [--listeners 1 2 3 4] [--rounds 2] [--buffer-ms 250] [--app-arg=...] [--json out.json]
        [--app-dir /tmp/before] [--text "..."]

Starts the real app as served_bench.py does (its defaults otherwise), warms the voice with one
request, then for each number of listeners N starts N streams at once (`--rounds` times, one
after another), each a raw-PCM request for the same built-in voice with its own seed, and
records when every piece of audio arrives. A simulated player per stream starts once
`--buffer-ms` of audio is buffered (or the stream has ended, if it is shorter) and plays at
real time; a stall is any moment it has nothing to play before the stream ended, and it resumes
as soon as audio arrives again (no re-buffering). Per N: first audio p50/p95 (time from the
request to the first body byte; linear interpolation between ranks), the share of streams that
stalled, the number of stalls and their total time, and RTF after the first byte. Prints the
load average at the start and the end: figures count only from an idle machine.
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time
from pathlib import Path

import httpx
from served_bench import TEXT, free_port, load_average, start_app

RESULTS = Path(__file__).resolve().parent / "results"


# ---------------------------------------------------------------- the player (pure arithmetic)
def playback(arrivals: list[tuple[float, float]], buffer_s: float = 0.25) -> dict:
    """arrivals: (seconds since the request, seconds of audio in that piece), in order.

    The player starts at the arrival that brings the buffered audio to `buffer_s` (the last
    one if the stream is shorter) and then plays at real time; between two arrivals it plays
    what it holds, and when that runs out before the next piece it stalls until then. A buffer
    that runs dry exactly as the next piece arrives is not a stall."""
    if not arrivals:
        raise ValueError("no audio arrived")
    buffered, start = 0.0, len(arrivals) - 1
    for index, (_, audio) in enumerate(arrivals):
        buffered += audio
        if buffered >= buffer_s:
            start = index
            break
    clock, stalls, stall_s = arrivals[start][0], 0, 0.0
    for at, audio in arrivals[start + 1 :]:
        gap = at - clock
        if gap > buffered:
            stalls, stall_s, buffered = stalls + 1, stall_s + gap - buffered, 0.0
        else:
            buffered -= gap
        buffered += audio
        clock = at
    return {
        "first_audio_s": arrivals[0][0],
        "playback_start_s": arrivals[start][0],
        "audio_s": sum(audio for _, audio in arrivals),
        "stalls": stalls,
        "stall_s": stall_s,
    }


def percentile(values: list[float], q: float) -> float:
    """Linear interpolation between the sorted values' ranks (numpy's default), q in [0, 100]."""
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def summarize(streams: list[dict]) -> dict:
    """One row per number of listeners from its streams' playback() results."""
    firsts = [s["first_audio_s"] for s in streams]
    stalled = [s for s in streams if s["stalls"]]
    rtfs = [s["rtf_after_first_byte"] for s in streams if s.get("rtf_after_first_byte")]
    return {
        "streams": len(streams),
        "first_audio_p50_ms": 1000 * percentile(firsts, 50),
        "first_audio_p95_ms": 1000 * percentile(firsts, 95),
        "stalled_share": len(stalled) / len(streams),
        "stalls": sum(s["stalls"] for s in streams),
        "stall_s": sum(s["stall_s"] for s in streams),
        "audio_s": sum(s["audio_s"] for s in streams),
        "rtf_after_first_byte_max": max(rtfs) if rtfs else None,
    }


# ---------------------------------------------------------------- the requests
def one_stream(
    url: str, seed: int, sample_rate: int, text: str = TEXT
) -> tuple[list[tuple[float, float]], float]:
    """(arrivals as playback() takes them, seconds from the request to the last byte)."""
    body = {
        "model": "tts-1",
        "input": text,
        "voice": "alloy",
        "response_format": "pcm",
        "seed": seed,
    }
    arrivals, started = [], time.perf_counter()
    with httpx.stream("POST", f"{url}/v1/audio/speech", json=body, timeout=900) as response:
        response.raise_for_status()
        rate = int(response.headers.get("x-sample-rate", sample_rate))
        for piece in response.iter_bytes():
            if piece:
                arrivals.append((time.perf_counter() - started, len(piece) / 2 / rate))
    return arrivals, time.perf_counter() - started


def with_rtf(arrivals: list[tuple[float, float]], ended_s: float, buffer_s: float) -> dict:
    heard = playback(arrivals, buffer_s)
    after_first = heard["audio_s"] - arrivals[0][1]
    heard["rtf_after_first_byte"] = (
        (ended_s - arrivals[0][0]) / after_first if after_first else None
    )
    return heard


def concurrent(
    url: str, listeners: int, seed: int, sample_rate: int, buffer_s: float, text: str = TEXT
) -> list:
    """`listeners` streams started together (a barrier), each with its own seed."""
    results: list[dict | BaseException] = [None] * listeners  # type: ignore[list-item]
    barrier = threading.Barrier(listeners)

    def listen(index: int) -> None:
        try:
            barrier.wait()
            results[index] = with_rtf(*one_stream(url, seed + index, sample_rate, text), buffer_s)
        except BaseException as error:  # noqa: BLE001 - reported in the main thread
            results[index] = error

    threads = [threading.Thread(target=listen, args=(i,)) for i in range(listeners)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return results


def table(rows: dict[int, dict], buffer_ms: float) -> str:
    lines = [
        f"| listeners | streams | first audio p50 ms | p95 ms | stalled ({buffer_ms:.0f} ms "
        "buffer) | stalls | stall s / audio s | worst RTF after first byte |",
        "|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for n, row in rows.items():
        rtf = row["rtf_after_first_byte_max"]
        lines.append(
            f"| {n} | {row['streams']} | {row['first_audio_p50_ms']:.0f} | "
            f"{row['first_audio_p95_ms']:.0f} | {100 * row['stalled_share']:.0f} % | "
            f"{row['stalls']} | {row['stall_s']:.1f} / {row['audio_s']:.1f} | "
            f"{'-' if rtf is None else f'{rtf:.2f}'} |"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--listeners", type=int, nargs="+", default=[1, 2, 3, 4])
    ap.add_argument("--rounds", type=int, default=2, help="concurrent batches per listener count")
    ap.add_argument("--buffer-ms", type=float, default=250.0)
    ap.add_argument("--app-arg", action="append", default=[], help="passed on to app.py")
    ap.add_argument("--env", action="append", default=[], help="NAME=VALUE for the app")
    ap.add_argument("--json", type=Path, default=None, help="default: results/listeners-*.json")
    ap.add_argument("--app-dir", default=None, help="the tree whose app.py runs (default: this)")
    ap.add_argument("--text", default=TEXT, help="what every stream says")
    args = ap.parse_args()
    buffer_s = args.buffer_ms / 1000
    port, log_path = free_port(), Path(f"/tmp/listeners_bench_{os.getpid()}.log")
    load_before = load_average()
    app = start_app(args, port, log_path)
    url = f"http://127.0.0.1:{port}"
    try:
        info = httpx.get(f"{url}/v1/models", timeout=10).json()["data"][-1]["info"]
        rate = info["sample_rate"]
        one_stream(url, 0, rate, args.text)  # the voice's prompt is built once, before any timing
        rows, streams = {}, {}
        for n in args.listeners:
            streams[n] = [
                s
                for r in range(args.rounds)
                for s in concurrent(url, n, 1000 * n + 10 * r, rate, buffer_s, args.text)
            ]
            rows[n] = summarize(streams[n])
    finally:
        app.terminate()
        app.wait(timeout=60)
    load_after = load_average()
    result = {
        "model": args.model,
        "app_dir": args.app_dir,
        "text": args.text,
        "env": args.env,
        "app_args": args.app_arg,
        "weight_format": info.get("weight_format"),
        "buffer_ms": args.buffer_ms,
        "rounds": args.rounds,
        "load_average_before": load_before,
        "load_average_after": load_after,
        "rows": rows,
        "streams": streams,
    }
    print(
        f"model {args.model} {' '.join(args.env)} {' '.join(args.app_arg)}; weights "
        f"{info.get('weight_format')}; load average at start {load_before}, at end "
        f"{load_after}"
    )
    print(table(rows, args.buffer_ms))
    out = args.json or RESULTS / f"listeners-{Path(args.model).name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
