"""Chatterbox Turbo streaming: streamed vs whole-utterance audio (SNR), first audio and RTF, per
S3Gen chunking (`StreamChunking`: tokens before the first pass / between passes).

    .venv/bin/python benchmarks/chatterbox_stream_bench.py [--tiny] [--real-size]
        [--tokens 75] [--threads 2] [--chunkings 10:10,25:25,...]
        [--json benchmarks/results/chatterbox_stream.json]

--tiny: both tiny test checkpoints (tests/fixtures/chatterbox-turbo-tiny-*), the built-in
voice, seeds 1 and 3: `model.stream` against `model.generate(stream_noise=True)` (the same
tokens and noise in one whole-utterance pass); first audio and RTF are wall time of the stream.
--real-size: our flow and HiFT at the released sizes with random weights (torch's default inits,
as the official constructors leave them; espnet's xavier pos-biases; Snake alpha 1), a 150-token
prompt and `--tokens` random speech tokens pushed through `S3GenStream` per chunking, against
one final push. T3 (GPT-2 medium, random, forced tokens) is timed for its prefill and per token;
first audio = prefill + first_tokens steps + the first pass that made audio; RTF = (T3 + every
pass) / audio seconds. Random weights attend diffusely (every later token moves every frame),
a pessimistic case for chunking. Speed figures are from a shared, loaded machine: `uptime` is
printed and stored.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import time
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
TINY = [REPO / "tests/fixtures" / f"chatterbox-turbo-tiny-{v}" for v in "ab"]
TEXT = "Hello there, this is a tiny test. [chuckle] Okay"
CHUNKINGS = [(10, 10), (25, 25), (50, 50), (10, 25), (15, 25)]  # (first_tokens, chunk_tokens)
PROMPT_S3, PROMPT_T3, TEXT_TOKENS = 150, 375, 30  # real size: a 6 s S3Gen prompt (release: <= 250)


def snr_db(reference: np.ndarray, other: np.ndarray) -> float:
    reference = reference.astype(np.float64)
    error = float(np.sum((reference - other) ** 2))
    return 10 * np.log10(float(np.sum(reference**2)) / max(error, 1e-30))


def load_average() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def as_chunking(spec: tuple[int, ...]):  # noqa: ANN201 - StreamChunking, imported late
    """(first, every[, flow_prompt, flow_context]) -> StreamChunking; 0 in the last two: all."""
    from tts_core.models.chatterbox.chunking import StreamChunking

    first, every, prompt, context = (*spec, 0, 0)[:4]
    return StreamChunking(first, every, flow_prompt=prompt or None, flow_context=context or None)


def tiny_rows(chunkings: list[tuple[int, ...]]) -> list[dict]:
    from tts_core.models.chatterbox.model import ChatterboxTurboModel

    rows = []
    for folder in TINY:
        model = ChatterboxTurboModel.from_pretrained(folder)
        for seed in (1, 3):
            start = time.perf_counter()
            whole = model.generate(TEXT, seed=seed, stream_noise=True)
            whole_s = time.perf_counter() - start
            exact = model.generate(TEXT, seed=seed)
            seconds = whole.audio.size / model.sample_rate
            for spec in chunkings:
                chunking, (first, every) = as_chunking(spec), spec[:2]
                start, first_s, pieces = time.perf_counter(), None, []
                for chunk in model.stream(TEXT, seed=seed, chunking=chunking):
                    first_s = first_s or time.perf_counter() - start
                    pieces.append(chunk.audio)
                total = time.perf_counter() - start
                audio = np.concatenate(pieces)
                assert audio.shape == whole.audio.shape
                rows.append(
                    dict(
                        model=folder.name,
                        seed=seed,
                        first_tokens=first,
                        chunk_tokens=every,
                        flow_prompt=chunking.flow_prompt,
                        flow_context=chunking.flow_context,
                        tokens=len(whole.tokens),
                        audio_s=seconds,
                        chunks=len(pieces),
                        snr_db=snr_db(whole.audio, audio),
                        snr_official_vs_stream_noise_db=snr_db(exact.audio, whole.audio),
                        first_audio_s=first_s,
                        rtf=total / seconds,
                        whole_rtf=whole_s / seconds,
                    )
                )
    return rows


def random_real_size() -> tuple:
    """Our T3, flow and HiFT at the released sizes with random weights (module doc)."""
    from tts_core.models.chatterbox.config import ChatterboxSizes
    from tts_core.models.chatterbox.flow import Flow
    from tts_core.models.chatterbox.hift import HiFTGenerator
    from tts_core.models.chatterbox.t3 import T3Turbo

    sizes = ChatterboxSizes()
    torch.manual_seed(0)
    t3 = T3Turbo(sizes.t3).eval()
    flow = Flow(sizes.encoder, sizes.decoder, sizes.campplus.embedding_size).eval()
    hift = HiFTGenerator(sizes.hift).eval()
    with torch.no_grad():
        for module in t3.modules():  # GPT-2's Conv1D starts empty: GPT-2's own init
            if type(module).__name__ == "Conv1D":
                module.weight.normal_(0.0, 0.02)
                module.bias.zero_()
        for module in flow.modules():
            if hasattr(module, "pos_bias_u"):
                torch.nn.init.xavier_uniform_(module.pos_bias_u)
                torch.nn.init.xavier_uniform_(module.pos_bias_v)
        for module in hift.modules():
            if type(module).__name__ == "Snake":
                module.alpha.fill_(1.0)
    return t3, flow, hift


def t3_times(t3, steps: int = 20) -> tuple[float, float]:
    """(prefill s, median s per drawn token) with forced tokens (the draws' cost is small)."""
    from tts_core.models.chatterbox.sampling import TurboSampling

    spk, prompt = torch.randn(1, 256), torch.randint(0, 6561, (1, PROMPT_T3))
    text = torch.randint(0, 50000, (1, TEXT_TOKENS))
    forced = torch.randint(0, 6561, (steps,))
    stamps = [time.perf_counter()]
    for _ in t3.draws(spk, prompt, text, TurboSampling(), None, forced=forced):
        stamps.append(time.perf_counter())
    gaps = np.diff(stamps)
    return float(gaps[0]), float(statistics.median(gaps[1:]))


def real_rows(
    n_tokens: int, chunkings: list[tuple[int, ...]], folder: Path | None = None
) -> list[dict]:
    from tts_core.models.chatterbox.chunking import WHOLE_UTTERANCE
    from tts_core.models.chatterbox.streaming import S3GenStream, StreamNoise
    from tts_core.models.chatterbox.voice import ChatterboxVoice

    if folder is None:
        t3, flow, hift = random_real_size()
        voice = ChatterboxVoice(
            torch.randn(1, 256),
            torch.randint(0, 6561, (1, PROMPT_T3)),
            torch.randint(0, 6561, (1, PROMPT_S3)),
            torch.randn(1, 2 * PROMPT_S3, 80) - 5,
            torch.randn(1, 192),
        )
    else:  # a released-layout folder (build_tiny.py's real size): its parts and built-in voice
        from tts_core.models.chatterbox.model import ChatterboxTurboModel

        model = ChatterboxTurboModel.from_pretrained(folder, quantize="none")
        t3, flow, hift, voice = model.t3, model.flow, model.hift, model.builtin_voice
    with torch.inference_mode():
        prefill, per_token = t3_times(t3)
    speech = torch.randint(0, 6561, (1, n_tokens))
    final = torch.cat([speech, torch.full((1, 3), 4299)], dim=1)
    noise = StreamNoise(1, n_tokens + 3, voice.prompt_feat.shape[1] + 2)
    start = time.perf_counter()
    whole = S3GenStream(flow, hift, voice, noise, WHOLE_UTTERANCE).push(final, True).numpy()
    whole_s = time.perf_counter() - start
    seconds, t3_s = whole.size / 24000, prefill + (n_tokens + 1) * per_token
    rows = []
    for spec in chunkings:
        chunking, (first, every) = as_chunking(spec), spec[:2]
        stream, pieces, passes = (
            S3GenStream(flow, hift, voice, noise, chunking),
            [],
            [],
        )
        cuts = chunking.pass_points(n_tokens)
        for n in [*cuts, None]:
            start = time.perf_counter()
            audio = stream.push(final if n is None else speech[:, :n], n is None).numpy()
            passes.append((n or n_tokens, time.perf_counter() - start, audio.size))
            pieces.append(audio)
        audio = np.concatenate(pieces)
        assert audio.shape == whole.shape
        made = next(p for p in passes if p[2] > 0)  # the first pass that made audio
        first_audio = (
            prefill + made[0] * per_token + sum(p[1] for p in passes[: passes.index(made) + 1])
        )
        rows.append(
            dict(
                model="real-size random" if folder is None else folder.name,
                seed=1,
                first_tokens=first,
                chunk_tokens=every,
                flow_prompt=chunking.flow_prompt,
                flow_context=chunking.flow_context,
                tokens=n_tokens,
                audio_s=seconds,
                chunks=sum(p[2] > 0 for p in passes),
                snr_db=snr_db(whole, audio),
                first_audio_s=first_audio,
                rtf=(t3_s + sum(p[1] for p in passes)) / seconds,
                whole_rtf=(t3_s + whole_s) / seconds,
                t3_prefill_s=prefill,
                t3_token_s=per_token,
                flow_hift_passes_s=[p[1] for p in passes],
            )
        )
    return rows


def print_table(rows: list[dict]) -> None:
    print(
        f"{'model':28} {'seed':>4} {'first':>5} {'every':>5} {'window':>7} {'tokens':>6} "
        f"{'chunks':>6} {'SNR dB':>7} {'first audio s':>13} {'RTF':>6} {'whole RTF':>9}"
    )
    for r in rows:
        window = f"{r.get('flow_prompt') or 'all'}/{r.get('flow_context') or 'all'}"
        print(
            f"{r['model']:28} {r['seed']:>4} {r['first_tokens']:>5} {r['chunk_tokens']:>5} "
            f"{window:>7} {r['tokens']:>6} {r['chunks']:>6} {r['snr_db']:>7.1f} "
            f"{r['first_audio_s']:>13.3f} {r['rtf']:>6.2f} {r['whole_rtf']:>9.2f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tiny", action="store_true")
    parser.add_argument("--real-size", action="store_true")
    parser.add_argument("--tokens", type=int, default=75)
    parser.add_argument(
        "--real-folder",
        type=Path,
        help="--real-size from this folder's weights "
        "and built-in voice (build_tiny.py --variant chatterbox-turbo-real-random)",
    )
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--chunkings",
        default=",".join(f"{a}:{b}" for a, b in CHUNKINGS),
        help="first:every[:flow_prompt:flow_context] token counts, comma-"
        "separated (0 or left out: the whole prompt / every token)",
    )
    parser.add_argument(
        "--json", type=Path, default=REPO / "benchmarks/results/chatterbox_stream.json"
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    chunkings = [tuple(int(v) for v in pair.split(":")) for pair in args.chunkings.split(",")]
    rows = []
    with torch.inference_mode():
        if args.tiny or not args.real_size:
            rows += tiny_rows(chunkings)
        if args.real_size:
            rows += real_rows(args.tokens, chunkings, args.real_folder)
    print_table(rows)
    load = load_average()
    print(load)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(
        json.dumps(
            {
                "rows": rows,
                "uptime": load,
                "threads": args.threads,
                "cpus": os.cpu_count(),
                "torch": torch.__version__,
            },
            indent=1,
        )
    )
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
