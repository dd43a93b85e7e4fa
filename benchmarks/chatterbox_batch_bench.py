"""Chatterbox Turbo on the one engine: 1 vs 4 vs 8 concurrent streams, aggregate audio seconds
per wall second, with S3Gen per row (exact: what "auto" picks on a CPU where the padded pass is
not bit-identical) and padded (one CFM solve and one HiFT call per engine step for the rows
whose pass is due). Prints a table and writes JSON (with `uptime`'s load average before and after
each figure: on a shared machine, figures taken under load are slower than idle ones).

    .venv/bin/python benchmarks/chatterbox_batch_bench.py                    # tiny-a checkpoint
    .venv/bin/python benchmarks/chatterbox_batch_bench.py --real-size --max-new-tokens 50
    .venv/bin/python benchmarks/chatterbox_batch_bench.py --real-size --quantize int8 --t3-step

--real-size: our modules at the released sizes with random N(0, 0.02) weights (no checkpoint)
and a random voice (375 T3 prompt tokens, a 150-token / 300-frame S3Gen prompt);
random T3 weights rarely draw STOP, so each stream makes max_new_tokens + 1 draws. All streams
join at step 0 of one BatchEngine stepped on this thread (the served loop without its thread).
--quantize int8: T3 on the 8-bit path, whose rows the runner steps in one GPT-2 call
(runner.py; --t3-per-row: one call per row, as before); --t3-step: one T3 decode step's ms per
row, the rows fed together and one by one.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "tests" / "fixtures" / "chatterbox-turbo-tiny-a"
TEXTS = (
    "how are you today?",
    "Hello there, this is a test of several streams at once.",
    "The quick brown fox jumps over the lazy dog.",
    "Batching shares the machine between the requests.",
)


def load_average() -> str:
    out = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    return out.split("load average:")[-1].strip()


def real_size_model():
    """ChatterboxTurboModel at the released sizes with random weights (no checkpoint)."""
    from tts_core.models.chatterbox.config import ChatterboxSizes
    from tts_core.models.chatterbox.flow import Flow
    from tts_core.models.chatterbox.hift import HiFTGenerator
    from tts_core.models.chatterbox.model import ChatterboxTurboModel
    from tts_core.models.chatterbox.t3 import T3Turbo
    from tts_core.models.chatterbox.tokenizer import TurboTokenizer
    from tts_core.models.chatterbox.voice import ChatterboxVoice

    sizes = ChatterboxSizes()
    model = object.__new__(ChatterboxTurboModel)
    model.folder, model.sizes, model.device = TINY, sizes, torch.device("cpu")
    model.t3 = T3Turbo(sizes.t3).eval()
    model.flow = Flow(sizes.encoder, sizes.decoder, sizes.campplus.embedding_size).eval()
    model.hift = HiFTGenerator(sizes.hift).eval()
    with torch.no_grad():  # our modules leave init to the checkpoint: random values here
        for module in (model.t3, model.flow, model.hift):
            for param in module.parameters():
                param.normal_(0.0, 0.02)
        for snake in (m for m in model.hift.modules() if type(m).__name__ == "Snake"):
            snake.alpha.fill_(1.0)
    model.tokenizer = TurboTokenizer(TINY)  # its ids fit the released text vocabulary
    g = torch.Generator().manual_seed(0)
    model.builtin_voice = ChatterboxVoice(
        torch.randn(1, 256, generator=g),
        torch.randint(0, 6561, (1, 375), generator=g),
        torch.randint(0, 6561, (1, 150), generator=g),
        torch.randn(1, 300, 80, generator=g),
        torch.randn(1, sizes.campplus.embedding_size, generator=g),
    )
    model._frontend = None
    return model


def run(model, streams: int, mode: str, max_new_tokens: int, t3_together: bool = True) -> dict:
    from tts_core.serving import BatchEngine, InlineOutbox

    runner = model.runner(max(streams, 1), mode)
    runner.t3_batched = runner.t3_batched and t3_together
    engine = BatchEngine(runner, isolate_failures=False)
    seqs = [
        model.request(
            TEXTS[i % len(TEXTS)], seed=i + 1, max_new_tokens=max_new_tokens, outbox=InlineOutbox()
        )
        for i in range(streams)
    ]
    before = load_average()
    start = time.perf_counter()
    for seq in seqs:
        engine.add(seq)
    first: dict[int, float] = {}
    steps = 0
    while engine.has_requests():
        engine.step()
        steps += 1
        for i, seq in enumerate(seqs):
            if i not in first and seq.outbox.items:
                first[i] = time.perf_counter() - start
    wall = time.perf_counter() - start
    audio = sum(c.audio.size for seq in seqs for c in seq.outbox.items) / 24000
    rounds = runner.passes
    return {
        "streams": streams,
        "s3gen": mode,
        "t3_batched": runner.t3_batched,
        "wall_s": round(wall, 2),
        "audio_s": round(audio, 2),
        "audio_s_per_wall_s": round(audio / wall, 3),
        "first_chunk_s_mean": round(sum(first.values()) / max(len(first), 1), 2),
        "engine_steps": steps,
        "s3gen_rounds": len(rounds),
        "s3gen_rows_per_round": round(sum(r for r, _ in rounds) / max(len(rounds), 1), 2),
        "load_average_before": before,
        "load_average_after": load_average(),
    }


@torch.inference_mode()
def t3_step(model, rows: int, repeat: int = 5) -> dict:
    """One T3 decode step (GPT-2 + each row's speech head) of `rows` rows, ms per row: the rows
    fed in one call (T3Turbo.feed: what the runner does when T3 is int8) and one call each."""
    from tts_core.models.chatterbox.sampling import TurboSampling
    from tts_core.models.chatterbox.t3 import TurboRow

    t3, voice = model.t3, model.builtin_voice
    states = [TurboRow() for _ in range(rows)]
    forced = torch.zeros(4 * repeat + 2, dtype=torch.long)
    for i, row in enumerate(states):
        draws = t3.draws(
            voice.speaker_emb,
            voice.t3_prompt_tokens,
            model.text_ids(TEXTS[i % 4]),
            TurboSampling(),
            None,
            forced=forced,
            row=row,
        )
        next(draws)
    token = forced[:1].view(1, 1)

    def step(groups: list[list]) -> None:
        for group in groups:
            for row in group:
                row.pending = token
            t3.feed(group)
            for row in group:
                t3.speech_head(row.hidden)

    times = {}
    for name, groups in (("together", [states]), ("each", [[row] for row in states])):
        best = float("inf")
        for _ in range(repeat):
            start = time.perf_counter()
            step(groups)
            best = min(best, time.perf_counter() - start)
        times[name] = round(1000 * best / rows, 1)
    return {
        "rows": rows,
        "ms_per_row_together": times["together"],
        "ms_per_row_each": times["each"],
        "load_average": load_average(),
    }


def s3gen_round(model, rows: int, tokens: int, repeat: int = 2) -> dict:
    """One S3Gen round of `rows` streams (a pass over the voice's prompt + `tokens` tokens each,
    lengths 8 tokens apart, then HiFT): per row (S3GenStream.push each) vs one padded pass;
    best of `repeat`, fresh streams each time."""
    from tts_core.models.chatterbox.chunking import StreamChunking
    from tts_core.models.chatterbox.flow import TOKEN_MEL_RATIO
    from tts_core.models.chatterbox.padded_s3gen import padded_s3gen_push
    from tts_core.models.chatterbox.streaming import S3GenStream, StreamNoise

    voice = model.builtin_voice
    g = torch.Generator().manual_seed(rows)
    ids = [torch.randint(0, 6561, (1, tokens + 8 * i), generator=g) for i in range(rows)]

    def jobs():
        prompt = TOKEN_MEL_RATIO * voice.prompt_token.shape[1]
        return [
            (
                S3GenStream(
                    model.flow,
                    model.hift,
                    voice,
                    StreamNoise(i, tokens + 8 * rows + 4, prompt),
                    StreamChunking(),
                ),
                ids[i],
                False,
            )
            for i in range(rows)
        ]

    def per_row():
        with torch.inference_mode():
            for stream, t, final in jobs():
                stream.push(t, final)

    def padded():
        padded_s3gen_push(model.flow, model.hift, jobs())

    times = {}
    before = load_average()
    for name, fn in (("per_row_s", per_row), ("padded_s", padded)):
        best = float("inf")
        for _ in range(repeat):
            start = time.perf_counter()
            fn()
            best = min(best, time.perf_counter() - start)
        times[name] = round(best, 3)
    return {
        "rows": rows,
        "tokens": tokens,
        **times,
        "speedup": round(times["per_row_s"] / times["padded_s"], 2),
        "load_average_before": before,
        "load_average_after": load_average(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--real-size", action="store_true")
    parser.add_argument("--streams", default="1,4,8")
    parser.add_argument("--modes", default="per_row,padded")
    parser.add_argument("--max-new-tokens", type=int, default=1000)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--round-tokens",
        type=int,
        default=40,
        help="tokens per row in the one-round S3Gen timing (0: skip it)",
    )
    parser.add_argument("--quantize", default="none", help="T3: none or int8 (quant.py)")
    parser.add_argument("--t3-per-row", action="store_true", help="int8 T3 stepped per row")
    parser.add_argument("--t3-step", action="store_true", help="time one T3 decode step")
    parser.add_argument("--out", default=None, help="JSON path (default: benchmarks/results/)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    from tts_core.models.chatterbox.model import ChatterboxTurboModel
    from tts_core.models.chatterbox.padded_s3gen import padded_s3gen_exact
    from tts_core.models.chatterbox.runner import t3_rows_invariant

    model = real_size_model() if args.real_size else ChatterboxTurboModel.from_pretrained(TINY)
    if args.quantize != "none":
        from tts_core.models.chatterbox.quant import quantize_turbo

        quantize_turbo(model, args.quantize)
    steps = []
    if args.t3_step:
        print(f"{'rows':>4} {'T3 ms/row together':>18} {'ms/row each':>11}  load avg")
        for rows in sorted({1, *(int(n) for n in args.streams.split(","))}):
            r = t3_step(model, rows)
            steps.append(r)
            print(f"{rows:>4} {r['ms_per_row_together']:>18} {r['ms_per_row_each']:>11}  "
                  f"{r['load_average']}", flush=True)  # fmt: skip
    counts = [int(n) for n in args.streams.split(",")]
    checks = {
        n: {
            "padded_s3gen_exact": padded_s3gen_exact(model, n),
            "t3_rows_invariant": t3_rows_invariant(model, n),
        }
        for n in counts
        if n > 1
    }
    results = []
    header = (
        f"{'streams':>7} {'s3gen':>8} {'wall s':>8} {'audio s':>8} {'audio/wall':>10} "
        f"{'1st chunk s':>11} {'rows/pass':>9}  load avg (before / after)"
    )
    print(header)
    for streams in counts:
        for mode in args.modes.split(","):
            if streams == 1 and mode == "padded":
                continue  # one row: nothing to pad
            r = run(model, streams, mode, args.max_new_tokens, not args.t3_per_row)
            results.append(r)
            print(
                f"{r['streams']:>7} {r['s3gen']:>8} {r['wall_s']:>8} {r['audio_s']:>8} "
                f"{r['audio_s_per_wall_s']:>10} {r['first_chunk_s_mean']:>11} "
                f"{r['s3gen_rows_per_round']:>9}  {r['load_average_before']} / "
                f"{r['load_average_after']}",
                flush=True,
            )
    rounds = []
    if args.round_tokens:
        prompt = model.builtin_voice.prompt_token.shape[1]
        print(f"\none S3Gen round ({args.round_tokens}+ tokens a row, {prompt}-token prompt):")
        print(f"{'rows':>4} {'per row s':>9} {'padded s':>9} {'speedup':>7}  load avg")
        for rows in [n for n in counts if n > 1]:
            r = s3gen_round(model, rows, args.round_tokens)
            rounds.append(r)
            print(f"{rows:>4} {r['per_row_s']:>9} {r['padded_s']:>9} {r['speedup']:>7}  "
                  f"{r['load_average_before']} / {r['load_average_after']}", flush=True)  # fmt: skip
    report = {
        "model": "real-size random weights" if args.real_size else str(TINY.name),
        "max_new_tokens": args.max_new_tokens,
        "threads": args.threads,
        "cpu_count": os.cpu_count(),
        "row_invariance": checks,
        "results": results,
        "s3gen_round": rounds,
        "quantize": args.quantize,
        "t3_step": steps,
        "note": "shared machine: figures taken under the load average shown",
    }
    suffix = "" if args.quantize == "none" else f"_{args.quantize}"
    name = f"chatterbox_batch_{'real' if args.real_size else 'tiny'}{suffix}.json"
    out = Path(args.out) if args.out else ROOT / "benchmarks" / "results" / name
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2))
    print(f"row invariance: {checks}\nwrote {out}")


if __name__ == "__main__":
    main()
