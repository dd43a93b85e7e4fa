"""One stream served through `/v1/audio/speech`, as a user gets it: first byte and RTF.

    .venv/bin/python benchmarks/served_bench.py --model /tmp/qwen3-0.6B-random \
        [--requests 3] [--app-arg=--quantize=auto ...] [--env TTS_CORE_NATIVE_ISA=avx2] \
        [--app-dir /tmp/before] [--json out.json]

Starts the real app (`app.py --model ... --wait-for-model`, the app's defaults otherwise: on a
CPU `--quantize auto` and the codec decoder dtype it times at load), then sends `--requests`
requests one after another for the same built-in voice, streaming raw PCM (16-bit, the model's
rate), and times each from the request to its first body byte and to its last. The first
request of a voice also builds the voice prompt (reference codes, speaker embedding); later
ones reuse it. RTF after the first byte = (last byte - first byte) / audio after the first
chunk. Prints a table with the load average, the app's weight-format line, how often its
event loop woke (idle for 5 s, then while serving; `wakeups`) and, per request, the CPU its
threads ran a second of audio (/proc schedstat): the model's OpenMP team, the event loop (the
server's share: HTTP, the engine's events, encoding) and every other thread; writes JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parent.parent
TEXT = (
    "The quick brown fox jumps over the lazy dog while the evening light fades slowly "
    "over the quiet harbour, and somewhere a radio plays an old song."
)
IDLE_SAMPLE_S = 5.0  # how long the idle app's event loop is watched before the requests
READY_TIMEOUT_S = 900  # a hang detector for the first start of a 1.7B int8 model on 2 cores


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def wakeups(pid: int) -> tuple[int, float]:
    """(voluntary context switches, perf_counter) of the app's main thread: its event loop.
    Idle, Gradio's queue polling at 1 ms woke it ~900 times a second (app.py
    GRADIO_QUEUE_POLL_S), each wake-up taking the GIL and a core from the model thread."""
    status = Path(f"/proc/{pid}/task/{pid}/status").read_text().splitlines()
    line = next(line for line in status if line.startswith("voluntary_ctxt_switches"))
    return int(line.split()[1]), time.perf_counter()


def thread_cpu(pid: int) -> dict[int, float]:
    """CPU seconds each thread of `pid` has run (/proc schedstat: nanoseconds on a core)."""
    seconds = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            seconds[int(task.name)] = int((task / "schedstat").read_text().split()[0]) / 1e9
        except (OSError, ValueError):  # a thread that ended meanwhile
            pass
    return seconds


def cpu_shares(pid: int, before: dict, after: dict, team: int) -> dict[str, float]:
    """CPU seconds between two thread_cpu snapshots: the event loop (the main thread), the
    model's OpenMP team (the `team` busiest other threads: the model thread and its workers)
    and every other thread."""
    used = {tid: after[tid] - before.get(tid, 0.0) for tid in after}
    loop = used.pop(pid, 0.0)
    busiest = sorted(used.values(), reverse=True)
    return {"event_loop": loop, "model": sum(busiest[:team]), "other": sum(busiest[team:])}


def wakeups_per_s(before: tuple[int, float], after: tuple[int, float]) -> float:
    return (after[0] - before[0]) / (after[1] - before[1])


def start_app(args: argparse.Namespace, port: int, log_path: Path) -> subprocess.Popen:
    """The app of `args.app_dir` (default: this checkout; another tree, e.g. a `git archive` of
    an earlier commit, is timed by the same script with its own code on PYTHONPATH)."""
    tree = Path(getattr(args, "app_dir", None) or REPO).resolve()
    env = {**os.environ, "PYTHONPATH": str(tree), **dict(item.split("=", 1) for item in args.env)}
    command = [
        sys.executable,
        str(tree / "app.py"),
        "--model",
        args.model,
        "--port",
        str(port),
        "--wait-for-model",
        "--no-fallback",
        *args.app_arg,
    ]
    app = subprocess.Popen(
        command, cwd=tree, env=env, stdout=log_path.open("w"), stderr=subprocess.STDOUT
    )
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if app.poll() is not None:
            raise SystemExit(f"the app exited:\n{log_path.read_text()[-3000:]}")
        try:
            info = httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=5).json()["data"][-1]
            if info["status"]["status"] == "ready":
                return app
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    app.kill()
    raise SystemExit("the app did not become ready")


def one_request(url: str, seed: int, sample_rate: int, pid: int, team: int) -> dict:
    body = {
        "model": "tts-1",
        "input": TEXT,
        "voice": "alloy",
        "response_format": "pcm",
        "seed": seed,
    }
    cpu_before = thread_cpu(pid)
    started = time.perf_counter()
    first_at, first_bytes, total = None, 0, 0
    with httpx.stream("POST", f"{url}/v1/audio/speech", json=body, timeout=900) as response:
        response.raise_for_status()
        rate = int(response.headers.get("x-sample-rate", sample_rate))
        for piece in response.iter_bytes():
            if not piece:
                continue
            if first_at is None:
                first_at, first_bytes = time.perf_counter(), len(piece)
            total += len(piece)
    ended = time.perf_counter()
    cpu = cpu_shares(pid, cpu_before, thread_cpu(pid), team)
    audio_s, after_first_s = total / 2 / rate, (total - first_bytes) / 2 / rate
    return {
        # CPU ms of the app's threads a second of audio (the whole request, voice included)
        "cpu_ms_per_audio_s": {name: 1000 * v / audio_s for name, v in cpu.items()},
        "first_byte_ms": 1000 * (first_at - started),
        "wall_s": ended - started,
        "audio_s": audio_s,
        "rtf_after_first_byte": (ended - first_at) / after_first_s if after_first_s else None,
        "rtf_whole": (ended - started) / audio_s,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--requests", type=int, default=3)
    ap.add_argument("--app-arg", action="append", default=[], help="passed on to app.py")
    ap.add_argument("--env", action="append", default=[], help="NAME=VALUE for the app")
    ap.add_argument("--app-dir", default=None, help="the tree whose app.py runs (default: this)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    port, log_path = free_port(), Path(f"/tmp/served_bench_{os.getpid()}.log")
    load_before = load_average()
    began = time.perf_counter()
    app = start_app(args, port, log_path)
    url = f"http://127.0.0.1:{port}"
    try:
        start_s = time.perf_counter() - began
        info = httpx.get(f"{url}/v1/models", timeout=10).json()["data"][-1]["info"]
        idle = wakeups(app.pid)
        time.sleep(IDLE_SAMPLE_S)
        busy = wakeups(app.pid)
        team = info.get("torch_threads") or 1  # the model thread and its OpenMP workers
        runs = [
            one_request(url, seed, info["sample_rate"], app.pid, team)
            for seed in range(args.requests)
        ]
        loop_wakeups = {
            "idle": wakeups_per_s(idle, busy),
            "serving": wakeups_per_s(busy, wakeups(app.pid)),
        }
    finally:
        app.terminate()
        app.wait(timeout=60)
    decoder = [line for line in log_path.read_text().splitlines() if "loaded " in line]
    result = {
        "model": args.model,
        "env": args.env,
        "app_args": args.app_arg,
        "app_dir": args.app_dir,
        "weight_format": info.get("weight_format"),
        "weight_format_reason": info.get("weight_format_reason"),
        "load_line": decoder[-1] if decoder else None,
        "start_s": start_s,
        "load_average_before": load_before,
        "load_average_after": load_average(),
        "requests": runs,
        "event_loop_wakeups_per_s": loop_wakeups,
    }
    print(
        f"model {args.model} {' '.join(args.env)} {' '.join(args.app_arg)}; ready after "
        f"{start_s:.1f} s; load average before {load_before}, after {load_average()}"
    )
    print(f"weights: {info.get('weight_format')} ({info.get('weight_format_reason')})")
    print(result["load_line"])
    print(
        f"the app's event loop woke {loop_wakeups['idle']:.0f} times a second idle, "
        f"{loop_wakeups['serving']:.0f} while serving"
    )
    print(
        "| request | first byte ms | audio s | RTF after first byte | RTF whole "
        "| CPU ms an audio s: event loop / model / other |"
    )
    print("|--:|--:|--:|--:|--:|--|")
    for i, run in enumerate(runs):
        rtf = run["rtf_after_first_byte"]
        print(
            f"| {i + 1}{' (new voice)' if i == 0 else ''} | {run['first_byte_ms']:.0f} | "
            f"{run['audio_s']:.2f} | {rtf:.2f} | {run['rtf_whole']:.2f} | "
            + " / ".join(f"{v:.1f}" for v in run["cpu_ms_per_audio_s"].values())
            + " |"
        )
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
