"""Continuous batching at real size: many streams at the cost of one.

    .venv/bin/python benchmarks/batch_bench.py --checkpoint /tmp/qwen3-0.6B-random \
        --frames 48 --batch 8 --sweep 1 2 4 8 16 --threads 2 [--http-clients 16] --json out.json

Loads the model as the app does on a CPU (int8 layers, the codec decoder in bf16 where the CPU
has native bf16), then, through the batch scheduler the app serves with:
1. every request alone (its time to first audio, RTF = wall / audio, codes);
2. for each count of `--sweep` (and `--batch`), that many requests submitted together: audio
   per wall second against one stream's, each stream's RTF against its own alone, and whether
   its codes are identical (a table, side by side);
3. one request joining `--batch - 1` running ones: its time to first audio against alone, and
   how much the running streams' gap between chunks grew while it joined (the issue's bound:
   one steady chunk's compute);
4. with `--http-clients N`: N concurrent POST /v1/audio/speech (distinct texts and seeds) on
   a real HTTP server with --max-batch N, each response compared byte for byte with the same
   request sent alone; peak RSS.
The EOS row of codec_head is zeroed (as the random checkpoints already are), so request i runs
exactly its own number of frames: `--frames` minus 3 per i (at least 4), lengths differ as in
real traffic (so the 16-stream run thins out towards its end).
Only numbers from an idle machine count: the load average is printed with them.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import threading
import time
from pathlib import Path

import soundfile as sf
import torch
from common import FRAME_S, LANGUAGE, REF_CLIP, REF_TEXT, TEXT

import tts_core
from tts_core.backends.qwen3 import served_loop
from tts_core.engine.model_thread import run_on_passing_thread
from tts_core.serving import EngineLoop

TEXTS = [
    TEXT,
    "Many listeners at the cost of one, served together by the same weights.",
    "A second visitor should never wait for the first one to finish.",
    "Each stream keeps its own voice, its own seed and its own pace.",
    "The code predictor runs its fifteen passes for every row at once.",
    "Rows join at frame boundaries and leave the moment they are done.",
    "One talker step reads every weight once, whatever the number of rows.",
    "Short requests and long ones share the same batch without waiting.",
]


def load(args: argparse.Namespace):
    decoder = torch.bfloat16 if torch.ops.mkldnn._is_mkldnn_bf16_supported() else None
    started = time.perf_counter()
    model = tts_core.load_model(
        args.checkpoint, device="cpu", quantize="int8", decoder_dtype=decoder
    )
    with torch.no_grad():
        model.talker.codec_head.weight[model.config.talker.codec_eos_token_id].zero_()
    audio, rate = sf.read(REF_CLIP, dtype="float32")
    voices = (model.create_voice(audio, rate, ref_text=REF_TEXT), model.create_voice(audio, rate))
    return model, voices, time.perf_counter() - started


def request(i: int, args: argparse.Namespace, voices: tuple) -> tuple[str, object, dict]:
    frames = max(4, args.frames - 3 * i)
    kwargs = {"language": LANGUAGE, "seed": 1000 + i, "max_new_tokens": frames + 1}
    return TEXTS[i % len(TEXTS)], voices[i % 2], kwargs


class Timed:
    """One submitted stream, consumed on its own thread; chunk arrival times recorded."""

    def __init__(self, scheduler: EngineLoop, req: tuple) -> None:
        text, voice, kwargs = req
        self.submitted = time.perf_counter()
        self.stream = scheduler.submit(text, voice, **kwargs)
        self.arrivals: list[float] = []
        self.frames: list[int] = []
        self.batches: list[int] = []
        self.codes: list[torch.Tensor] = []
        self.thread = threading.Thread(target=self._consume, daemon=True)
        self.thread.start()

    def _consume(self) -> None:
        for chunk in self.stream:
            self.arrivals.append(time.perf_counter())
            self.frames.append(chunk.frames)
            self.batches.append(chunk.batch_size)
            self.codes.append(chunk.codes)

    def join(self) -> Timed:
        self.thread.join()
        return self

    @property
    def ttfa_s(self) -> float:
        return self.arrivals[0] - self.submitted

    @property
    def audio_s(self) -> float:
        return sum(self.frames) * FRAME_S

    @property
    def rtf(self) -> float:
        return (self.arrivals[-1] - self.submitted) / self.audio_s

    @property
    def all_codes(self) -> torch.Tensor:
        return torch.cat(self.codes)


def run_alone(scheduler: EngineLoop, args, voices, count: int) -> list[Timed]:  # noqa: ANN001
    return [Timed(scheduler, request(i, args, voices)).join() for i in range(count)]


def run_batch(scheduler: EngineLoop, args, voices, count: int) -> tuple[list[Timed], float]:  # noqa: ANN001
    started = time.perf_counter()
    streams = [Timed(scheduler, request(i, args, voices)) for i in range(count)]
    for stream in streams:
        stream.join()
    return streams, time.perf_counter() - started


def batch_result(alone: list[Timed], batch: list[Timed], wall_s: float) -> dict:
    """N streams run together against the same requests alone (alone[:N])."""
    alone = alone[: len(batch)]
    single_rate = alone[0].audio_s / (alone[0].arrivals[-1] - alone[0].submitted)
    aggregate_rate = sum(s.audio_s for s in batch) / wall_s
    pairs = list(zip(alone, batch, strict=True))
    return {
        "streams": len(batch),
        "aggregate_audio_per_wall_s": aggregate_rate,
        "aggregate_vs_single": aggregate_rate / single_rate,
        "rtf_ratio_max": max(b.rtf / a.rtf for a, b in pairs),
        "rtf": [b.rtf for b in batch],
        "rtf_alone": [a.rtf for a in alone],
        "max_batch_seen": max(max(b.batches) for b in batch),
        "identical_streams": sum(torch.equal(a.all_codes, b.all_codes) for a, b in pairs),
    }


def run_join(scheduler: EngineLoop, args, voices) -> dict:  # noqa: ANN001
    """batch - 1 long streams run; once each has 2 chunks out, request 0 joins."""
    long = {**vars(args), "frames": args.frames * 2}
    running = [
        Timed(scheduler, request(i, argparse.Namespace(**long), voices))
        for i in range(1, args.batch)
    ]
    while min(len(s.arrivals) for s in running) < 2:
        time.sleep(0.01)
    joined_at = time.perf_counter()
    joiner = Timed(scheduler, request(0, args, voices)).join()
    for stream in running:
        stream.join()
    before, during = [], []
    for stream in running:
        gaps = list(zip(stream.arrivals, stream.arrivals[1:], strict=False))
        for start, end in gaps[1:]:  # the first gap is the short first chunk's
            window = during if start <= joiner.arrivals[0] and end >= joined_at else before
            window.append(end - start)
    steady = sorted(before)[len(before) // 2] if before else float("nan")
    return {
        "joiner_ttfa_s": joiner.ttfa_s,
        "steady_gap_s": steady,
        "max_gap_while_joining_s": max(during) if during else float("nan"),
        "gap_growth_s": (max(during) - steady) if during else float("nan"),
        "steady_chunk_compute_s": steady,
    }


def run_http(model, args, voices) -> dict:  # noqa: ANN001
    """N concurrent clients on /v1/audio/speech, each compared with the same request alone."""
    import socket
    import tempfile

    import httpx
    import uvicorn
    from fastapi import FastAPI

    from tts_core.backends.qwen3 import Qwen3Backend
    from tts_core.engine import Engine, EngineConfig
    from tts_core.server import ApiConfig, VoiceRegistry, install_routes

    clients = args.http_clients
    backend = Qwen3Backend(model, str(args.checkpoint), "cpu", max_batch=clients)
    engine = Engine(backend, EngineConfig(max_queue=clients))
    app = FastAPI()
    install_routes(app, engine, VoiceRegistry(tempfile.mkdtemp()), ApiConfig())
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.05)
    url = f"http://127.0.0.1:{port}/v1/audio/speech"
    words = ["Hi there.", "Yes, please.", "Good morning.", "Thank you.", "See you soon."]

    def body(i: int) -> dict:
        return {
            "model": "tts-1",
            "input": f"{words[i % len(words)]} {i}",
            "voice": "alloy",
            "response_format": "pcm",
            "seed": i,
        }

    def post(i: int, out: dict) -> None:
        response = httpx.post(url, json=body(i), timeout=900)
        out[i] = (response.status_code, response.content)

    together: dict[int, tuple] = {}
    started = time.perf_counter()
    threads = [threading.Thread(target=post, args=(i, together)) for i in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - started
    alone: dict[int, tuple] = {}
    for i in range(clients):
        post(i, alone)
    server.should_exit = True
    backend.loop.close()
    ok = [together[i][0] == 200 and alone[i][0] == 200 for i in range(clients)]
    same = [together[i][1] == alone[i][1] for i in range(clients)]
    audio_s = sum(len(together[i][1]) / 2 / 24000 for i in range(clients))
    return {
        "clients": clients,
        "all_200": all(ok),
        "identical": sum(same),
        "wall_s": wall,
        "audio_s": audio_s,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", type=Path, required=True)
    parser.add_argument("--frames", type=int, default=48)
    parser.add_argument("--batch", type=int, default=8, help="the batch a request joins")
    parser.add_argument(
        "--sweep",
        type=int,
        nargs="+",
        default=[1, 2, 4, 8, 16],
        help="stream counts run together, side by side",
    )
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--http-clients", type=int, default=0)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    counts = sorted({*args.sweep, args.batch})
    if counts[0] < 1:
        parser.error("--batch and --sweep counts must be >= 1")
    torch.set_num_threads(args.threads)
    model, voices, load_s = run_on_passing_thread(lambda: load(args))
    scheduler = served_loop(model, max_batch=max(counts))
    Timed(scheduler, request(args.batch - 1, args, voices)).join()  # warm-up
    alone = run_alone(scheduler, args, voices, max(counts))
    sweep = [batch_result(alone, *run_batch(scheduler, args, voices, n)) for n in counts]
    join = run_join(scheduler, args, voices)
    scheduler.close()
    result = {
        "checkpoint": str(args.checkpoint),
        "weight_format": model.weight_format,
        "threads": args.threads,
        "load_s": load_s,
        "single": {
            "ttfa_s": alone[0].ttfa_s,
            "rtf": alone[0].rtf,
            "audio_per_wall_s": alone[0].audio_s / (alone[0].arrivals[-1] - alone[0].submitted),
        },
        "batch": next(b for b in sweep if b["streams"] == args.batch),
        "sweep": sweep,
        "join": {**join, "joiner_ttfa_vs_alone": join["joiner_ttfa_s"] / alone[0].ttfa_s},
    }
    if args.http_clients:
        result["http"] = run_http(model, args, voices)
    result["peak_rss_gb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2
    result["load_average"] = os.getloadavg()
    print_table(result)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2))


def print_table(r: dict) -> None:
    s, b, j = r["single"], r["batch"], r["join"]
    print(
        f"{r['checkpoint']} {r['weight_format']}, {r['threads']} threads, "
        f"load average {', '.join(f'{v:.2f}' for v in r['load_average'])}"
    )
    print("streams  audio per wall s  x one stream  worst RTF / alone  identical to alone")
    for n in r["sweep"]:
        print(f"{n['streams']:>7}  {n['aggregate_audio_per_wall_s']:>16.2f}  "
              f"{n['aggregate_vs_single']:>12.2f}  {n['rtf_ratio_max']:>17.2f}  "
              f"{n['identical_streams']:>15}/{n['streams']}")  # fmt: skip
    rows = [
        ("one stream: TTFA / RTF", f"{s['ttfa_s'] * 1000:.0f} ms / {s['rtf']:.2f}"),
        (f"{b['streams']} streams: aggregate audio per wall s",
         f"{b['aggregate_audio_per_wall_s']:.2f} ({b['aggregate_vs_single']:.2f}x one stream)"),
        ("  each stream's RTF / alone (max)", f"{b['rtf_ratio_max']:.2f}"),
        ("  identical codes alone and batched", f"{b['identical_streams']}/{b['streams']}"),
        ("joining request: TTFA / alone", f"{j['joiner_ttfa_s'] * 1000:.0f} ms / "
         f"{j['joiner_ttfa_vs_alone']:.2f}x"),
        ("  running streams' gap: steady / max while joining",
         f"{j['steady_gap_s'] * 1000:.0f} / {j['max_gap_while_joining_s'] * 1000:.0f} ms"),
    ]  # fmt: skip
    if "http" in r:
        h = r["http"]
        rows.append(
            (
                f"HTTP: {h['clients']} concurrent clients",
                f"all 200: {h['all_200']}, byte-identical to alone: "
                f"{h['identical']}/{h['clients']}, {h['audio_s']:.1f} s audio in "
                f"{h['wall_s']:.1f} s",
            )
        )
    rows.append(("peak RSS", f"{r['peak_rss_gb']:.2f} GB"))
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value}")


if __name__ == "__main__":
    main()
