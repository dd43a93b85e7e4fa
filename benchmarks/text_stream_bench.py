"""Text streamed in over the WebSocket /v1/audio/speech/stream, as a voice agent sends it.

    .venv/bin/python benchmarks/text_stream_bench.py --model tests/fixtures/qwen3-tiny-a \
        [--rate 30] [--slow-rate 5] [--modes xvector,icl] [--app-arg=--quantize=auto] \
        [--first-audio-only] [--repeats 3] [--json out.json]

Starts the real app (`app.py --model ... --wait-for-model`, served_bench.start_app) and plays
an LLM: the text's tokens (the checkpoint's own tokenizer: its pre-tokens, each sent when all
its BPE ids would have been generated at `--rate` tokens/s) arrive one piece after another.
Per clone mode (x-vector: the prompt needs one text token; ICL, the built-in voice with its
transcript: T2 - len(ref_text) tokens) three runs, all timed from t0 = the moment the LLM's
first token exists:
    streamed    each piece sent as it is generated, input.done after the last
    whole       the text sent at once (+ input.done) when its last token is generated
    slow        streamed at `--slow-rate` tokens/s, slower than speech reads it (one text
                token per 80 ms frame: 12.5 tokens/s), so the row waits for text
Reported: first audio byte after t0; the gaps a listener hears (a player that starts at the
first byte and plays every chunk as soon as it has arrived and the one before has ended: the
longest silence it waits through, and their sum); audio length. One warm-up request first
(the voice's prompt is built once); then `--repeats` rounds of the runs, interleaved (a load
that changes meanwhile touches every kind alike); the table shows each kind's median, the JSON
every run. Prints the load average.
`--first-audio-only` (a model slower than real time here, e.g. a real-size one on a CPU): the
streamed and whole runs only, each ended by the client at its first audio byte (the server
cancels the request), so gaps and audio length are not measured.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
from pathlib import Path

from served_bench import free_port, load_average, start_app

TEXT = (
    "The quick brown fox jumps over the lazy dog while the evening light fades slowly "
    "over the quiet harbour, and somewhere a radio plays an old song."
)
FAIL_AFTER_S = 900


def token_pieces(model: str, text: str) -> list[tuple[str, int]]:
    """(piece of text, its BPE token count), the pre-tokens of the checkpoint's tokenizer."""
    from tts_core.models.qwen3_tts.text_tokenizer import TextTokenizer

    pieces = TextTokenizer.from_folder(Path(model)).pieces(text)
    ends = [start for start, _ in pieces[1:]] + [len(text)]
    return [(text[start:end], len(ids)) for (start, ids), end in zip(pieces, ends, strict=True)]


def playback_gaps(chunks: list[tuple[float, float]]) -> tuple[float, float]:
    """(longest, total) silence of a player that starts at the first chunk's arrival and plays
    each chunk (arrival s, duration s) once it has arrived and the one before has ended."""
    longest = total = 0.0
    end = chunks[0][0] if chunks else 0.0
    for arrived, duration in chunks:
        gap = max(0.0, arrived - end)
        longest, total = max(longest, gap), total + gap
        end = max(end, arrived) + duration
    return longest, total


async def one_run(
    url: str,
    config: dict,
    pieces: list[tuple[str, int]],
    rate: float,
    whole: bool,
    first_only: bool = False,
) -> dict:
    """One utterance; the pieces paced at `rate` tokens/s (whole: sent together at the end);
    first_only: closed at its first audio byte."""
    import websockets

    async with websockets.connect(url, max_size=None) as ws:
        await ws.send(json.dumps({"type": "session.config", **config}))
        chunks: list[tuple[float, float]] = []
        sample_rate = 24000

        async def send_text(t0: float) -> float:
            generated = 0
            for text, tokens in pieces:
                generated += tokens
                await asyncio.sleep(max(0.0, t0 + (generated - 1) / rate - time.perf_counter()))
                if not whole:
                    await ws.send(json.dumps({"type": "input.text", "text": text}))
            if whole:
                await ws.send(
                    json.dumps({"type": "input.text", "text": "".join(p for p, _ in pieces)})
                )
            await ws.send(json.dumps({"type": "input.done"}))
            return time.perf_counter()

        t0 = time.perf_counter()
        sender = asyncio.ensure_future(send_text(t0))
        while True:
            message = await asyncio.wait_for(ws.recv(), FAIL_AFTER_S)
            now = time.perf_counter() - t0
            if isinstance(message, bytes):
                chunks.append((now, len(message) / 2 / sample_rate))
                if first_only:
                    sender.cancel()
                    return {"first_audio_s": now}
                continue
            data = json.loads(message)
            if data["type"] == "audio.start":
                sample_rate = data["sample_rate"]
            elif data["type"] == "error":
                raise SystemExit(f"server error: {data}")
            elif data["type"] == "session.done":
                break
        sent_at = await sender - t0
        await ws.send(json.dumps({"type": "session.close"}))
    longest, total = playback_gaps(chunks)
    return {
        "first_audio_s": chunks[0][0],
        "text_complete_s": sent_at,
        "audio_s": sum(d for _, d in chunks),
        "longest_gap_s": longest,
        "total_gap_s": total,
        "chunks": len(chunks),
    }


async def bench(url: str, args: argparse.Namespace, pieces: list[tuple[str, int]]) -> list:
    rows = []
    for mode in args.modes.split(","):
        config = {
            "voice": "alloy",
            "x_vector_only_mode": mode == "xvector",
            "seed": 1,
            "response_format": "pcm",
        }
        first = args.first_audio_only
        await one_run(url, config, pieces, 1e9, True, first)  # warm-up: the voice's prompt
        runs = [("streamed", args.rate, False), ("whole", args.rate, True)]
        runs += [] if first else [("slow", args.slow_rate, False)]
        for repeat in range(args.repeats):
            for name, rate, whole in runs:
                run = await one_run(url, config, pieces, rate, whole, first)
                rows.append(
                    {"mode": mode, "run": name, "repeat": repeat, "tokens_per_s": rate, **run}
                )
    return rows


def medians(rows: list[dict]) -> list[dict]:
    """Per (mode, run): the median of each measured value over the repeats."""
    kinds: dict[tuple[str, str], list[dict]] = {}
    for row in rows:
        kinds.setdefault((row["mode"], row["run"]), []).append(row)
    return [
        {
            **group[0],
            **{k: statistics.median(r[k] for r in group) for k in group[0] if k.endswith("_s")},
            "n": len(group),
        }
        for group in kinds.values()
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="a local checkpoint folder")
    ap.add_argument("--rate", type=float, default=30.0, help="LLM tokens per second")
    ap.add_argument("--slow-rate", type=float, default=5.0, help="tokens/s slower than speech")
    ap.add_argument("--modes", default="xvector,icl")
    ap.add_argument("--app-arg", action="append", default=[], help="passed on to app.py")
    ap.add_argument("--env", action="append", default=[], help="NAME=VALUE for the app")
    ap.add_argument("--first-audio-only", action="store_true")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    pieces = token_pieces(args.model, TEXT)
    port, log_path = free_port(), Path(f"/tmp/text_stream_bench_{os.getpid()}.log")
    load_before = load_average()
    app = start_app(args, port, log_path)
    try:
        rows = asyncio.run(bench(f"ws://127.0.0.1:{port}/v1/audio/speech/stream", args, pieces))
    finally:
        app.terminate()
        app.wait(timeout=60)
    loaded = [line for line in log_path.read_text().splitlines() if "loaded " in line]
    result = {
        "model": args.model,
        "app_args": args.app_arg,
        "env": args.env,
        "text": TEXT,
        "tokens": sum(n for _, n in pieces),
        "load_line": loaded[-1] if loaded else None,
        "load_average_before": load_before,
        "load_average_after": load_average(),
        "first_audio_only": args.first_audio_only,
        "runs": rows,
    }
    print(
        f"model {args.model} {' '.join(args.app_arg)}; {result['tokens']} text tokens; load "
        f"average before {load_before}, after {load_average()}"
    )
    print(result["load_line"])
    print(
        "| mode | text in | tokens/s | text complete s | first audio s | audio s | "
        "longest gap s | total gap s |"
    )
    print("|---|---|--:|--:|--:|--:|--:|--:|")
    for r in medians(rows):
        cells = [
            f"{r[k]:.2f}" if k in r else "-"
            for k in ("text_complete_s", "first_audio_s", "audio_s", "longest_gap_s", "total_gap_s")
        ]
        print(f"| {r['mode']} | {r['run']} | {r['tokens_per_s']:g} | {' | '.join(cells)} |")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
