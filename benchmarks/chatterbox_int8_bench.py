"""Chatterbox Turbo's T3 on the 8-bit CPU path (models/chatterbox/quant.py) against float32: the
error (logits SNR, streamed audio SNR, token divergence) and the speed (T3 per token, prefill,
first audio and RTF of `model.stream`).

    .venv/bin/python benchmarks/chatterbox_int8_bench.py [--tiny] [--real-size]
        [--threads 1,2] [--stream-tokens 50] [--json benchmarks/results/chatterbox_int8.json]

(A script of its own rather than a mode of chatterbox_stream_bench.py: that one compares S3Gen
chunkings of one T3; this one two T3 weight formats, with other columns.)

--tiny: both tiny checkpoints, T3 quantized as `from_pretrained(quantize="int8")` does (the
built-in voice and quant.CALIBRATION_TEXT calibrate); logits SNR on a teacher-forced run of
other inputs (the float model's own draws for TEXT, seed 1 and 3, forced into both), and
`model.stream` int8 vs float32 for the same seed: the first draw where the tokens differ and
the audio SNR over the common length.
--real-size: T3 (GPT-2 medium, 24 x 1024) at the released size with random weights in three
recipes: "gpt2-init" (GPT-2's N(0, 0.02) projections, zero biases, torch's default norms and
embeddings: chatterbox_stream_bench.py's), "fixture" (the tiny fixtures' recipe at full size:
N(0, 1/fan_in) projections, wpe N(0, 0.3^2), 0.05 N(0, 1) on every 1-D parameter: every branch
O(1)) and "outliers" ("fixture" with 8 hidden channels of every ln_1 / ln_2 scaled x20: a
synthetic stand-in for the activation outliers trained GPT-2s have; random weights have none).
Calibrated on one random voice (seed 0: 375 prompt tokens, 30 text ids) and measured on
another (seed 1, 50 forced tokens): logits SNR and the worst layer SQNR. Then, on "fixture",
T3 prefill and ms per token (median of 20 forced steps) float32 vs int8 at each thread count,
and `model.stream` (flow and HiFT at the released sizes, random: chatterbox_stream_bench.py's
random_real_size; a random 375/150-token voice) with `--stream-tokens` draws, float32 vs int8,
same seed: first audio, RTF, token divergence and audio SNR. `uptime` is printed with every
timing (a shared machine: load average in every row).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from chatterbox_stream_bench import load_average, snr_db  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
TINY = [REPO / "tests/fixtures" / f"chatterbox-turbo-tiny-{v}" for v in "ab"]
TEXT = "Hello there, this is a tiny test. [chuckle] Okay"
PROMPT_T3, PROMPT_S3, TEXT_TOKENS, FORCED = 375, 150, 30, 50
RECIPES = ("gpt2-init", "fixture", "outliers")
OUTLIER_CHANNELS, OUTLIER_GAIN = 8, 20.0


def load() -> str:
    return load_average().split("load average:")[-1].strip()


def forced_logits(t3, voice: tuple, forced: torch.Tensor) -> torch.Tensor:
    from tts_core.models.chatterbox.sampling import TurboSampling

    seen: list[torch.Tensor] = []
    with torch.inference_mode():
        for _ in t3.draws(*voice, TurboSampling(), None, forced=forced, logits_seen=seen):
            pass
    return torch.cat(seen).double()


def stream_compare(float_model, int8_model, text: str, seed: int, max_new_tokens: int) -> dict:
    """model.stream of both for one seed: timings, first divergent draw, audio SNR."""
    runs = {}
    for name, model in (("float32", float_model), ("int8", int8_model)):
        before = load()
        start, first, pieces, tokens = time.perf_counter(), None, [], []
        for chunk in model.stream(text, seed=seed, max_new_tokens=max_new_tokens):
            first = first or time.perf_counter() - start
            pieces.append(chunk.audio)
            tokens += chunk.tokens.tolist()
        wall = time.perf_counter() - start
        audio = np.concatenate(pieces)
        runs[name] = dict(
            audio=audio,
            tokens=tokens,
            first_audio_s=first,
            wall_s=wall,
            rtf=wall / (audio.size / 24000),
            load=f"{before} -> {load()}",
        )
    a, b = runs["float32"], runs["int8"]
    differ = [i for i, (x, y) in enumerate(zip(a["tokens"], b["tokens"], strict=False)) if x != y]
    same = len(a["tokens"]) == len(b["tokens"]) and not differ
    first_diff = (
        None if same else (differ[0] if differ else min(len(a["tokens"]), len(b["tokens"])))
    )
    n = min(a["audio"].size, b["audio"].size)
    # before the first different draw, less the flow's 3-token lookahead (960 samples a token)
    m = n if first_diff is None else max(first_diff - 3, 0) * 960
    return {
        "tokens_float32": len(a["tokens"]),
        "tokens_int8": len(b["tokens"]),
        "first_divergent_token": first_diff,
        "audio_snr_db": snr_db(a["audio"][:n], b["audio"][:n]),
        "audio_snr_before_divergence_db": snr_db(a["audio"][:m], b["audio"][:m]) if m else None,
        **{
            f"{k}_{name}": r[k]
            for name, r in runs.items()
            for k in ("first_audio_s", "rtf", "wall_s", "load")
        },
    }


def tiny_rows() -> list[dict]:
    from tts_core.models.chatterbox.config import STOP_SPEECH
    from tts_core.models.chatterbox.model import ChatterboxTurboModel

    rows = []
    for folder in TINY:
        float_model = ChatterboxTurboModel.from_pretrained(folder)
        int8_model = ChatterboxTurboModel.from_pretrained(folder, quantize="int8")
        report = int8_model.t3_quantization
        voice = float_model.builtin_voice
        for seed in (1, 3):
            tokens = float_model.generate(TEXT, seed=seed).tokens
            forced = torch.cat([tokens, torch.tensor([STOP_SPEECH])])  # + STOP: its logits too
            cond = (voice.speaker_emb, voice.t3_prompt_tokens, float_model.text_ids(TEXT))
            logits = (
                forced_logits(float_model.t3, cond, forced),
                forced_logits(int8_model.t3, cond, forced),
            )
            row = dict(
                model=folder.name,
                seed=seed,
                kernel=_kernel(int8_model.t3),
                logits_snr_db=_snr(*logits),
                calibration_logits_snr_db=report.logits_snr_db,
                min_layer_sqnr_db=report.min_sqnr_db,
                worst_layer=report.worst(1)[0][0],
            )
            row.update(stream_compare(float_model, int8_model, TEXT, seed, 1000))
            rows.append(row)
    return rows


def _snr(reference: torch.Tensor, other: torch.Tensor) -> float:
    from tts_core.quant.linear import sqnr_db

    return sqnr_db(reference, other)


def _kernel(t3) -> str:
    from tts_core.quant.linear import Int8Linear

    layer = next(m for m in t3.modules() if isinstance(m, Int8Linear))
    return f"native {layer.kernel_isa}" if layer.packed else "torch._int_mm"


def real_t3(recipe: str):
    """T3 at the released size with random weights in `recipe` (module doc)."""
    from tts_core.models.chatterbox.config import ChatterboxSizes
    from tts_core.models.chatterbox.gpt2 import Conv1D
    from tts_core.models.chatterbox.t3 import T3Turbo

    torch.manual_seed(0)
    t3 = T3Turbo(ChatterboxSizes().t3).eval()
    with torch.no_grad():
        for module in t3.modules():
            if isinstance(module, Conv1D):
                std = 0.02 if recipe == "gpt2-init" else module.weight.shape[0] ** -0.5
                module.weight.normal_(0.0, std)
                module.bias.zero_()
        if recipe != "gpt2-init":
            t3.tfmr.wpe.weight.normal_(0.0, 0.3)
            for param in t3.parameters():
                if param.ndim == 1:
                    param.add_(0.05 * torch.randn_like(param))
        if recipe == "outliers":
            g = torch.Generator().manual_seed(7)
            channels = torch.randperm(t3.tfmr.wpe.weight.shape[1], generator=g)[:OUTLIER_CHANNELS]
            for block in t3.tfmr.h:
                for norm in (block.ln_1, block.ln_2):
                    norm.weight[channels] *= OUTLIER_GAIN
                    norm.bias[channels] *= OUTLIER_GAIN
    return t3


def random_voice(seed: int, prompt: int = PROMPT_T3) -> tuple:
    g = torch.Generator().manual_seed(seed)
    return (
        torch.randn(1, 256, generator=g),
        torch.randint(0, 6561, (1, prompt), generator=g),
        torch.randint(0, 50000, (1, TEXT_TOKENS), generator=g),
    )


def real_error_rows() -> list[dict]:
    from tts_core.models.chatterbox.quant import quantize_t3

    rows = []
    for recipe in RECIPES:
        t3 = real_t3(recipe)
        evaluation = random_voice(1)
        forced = torch.randint(0, 6561, (FORCED,), generator=torch.Generator().manual_seed(2))
        reference = forced_logits(t3, evaluation, forced)
        start = time.perf_counter()
        report = quantize_t3(t3, *random_voice(0))  # calibration, smoothing, rounding, check
        quantize_s = time.perf_counter() - start
        rows.append(
            dict(
                recipe=recipe,
                kernel=_kernel(t3),
                quantize_s=quantize_s,
                logits_snr_db=_snr(reference, forced_logits(t3, evaluation, forced)),
                calibration_logits_snr_db=report.logits_snr_db,
                min_layer_sqnr_db=report.min_sqnr_db,
                worst_layers=report.worst(3),
            )
        )
        print(
            f"  {recipe}: logits {rows[-1]['logits_snr_db']:.1f} dB, worst layer "
            f"{report.worst(1)[0][0]} {report.min_sqnr_db:.1f} dB  (load {load()})",
            flush=True,
        )
        del t3
    return rows


def t3_times(t3, steps: int = 20) -> tuple[float, float]:
    """(prefill s, median s per token) with forced tokens (chatterbox_stream_bench.py's)."""
    from tts_core.models.chatterbox.sampling import TurboSampling

    forced = torch.randint(0, 6561, (steps,), generator=torch.Generator().manual_seed(3))
    stamps = [time.perf_counter()]
    with torch.inference_mode():
        for _ in t3.draws(*random_voice(1), TurboSampling(), None, forced=forced):
            stamps.append(time.perf_counter())
    gaps = np.diff(stamps)
    return float(gaps[0]), float(statistics.median(gaps[1:]))


def real_speed_rows(threads: list[int], repeat: int = 3) -> list[dict]:
    from tts_core.models.chatterbox.quant import quantize_t3

    float_t3 = real_t3("fixture")
    int8_t3 = copy.deepcopy(float_t3)
    quantize_t3(int8_t3, *random_voice(0))
    kernel = _kernel(int8_t3)
    rows = []
    for n in threads:
        torch.set_num_threads(n)
        for name, t3 in (("float32", float_t3), ("int8", int8_t3)):
            t3_times(t3, 4)  # warm
            best = None
            for _ in range(repeat):  # the best of `repeat` runs, float and int8 alternated
                before = load()
                prefill, token = t3_times(t3)
                if best is None or token < best["token_ms"]:
                    best = dict(
                        threads=n,
                        weights=name,
                        prefill_s=prefill,
                        token_ms=token * 1e3,
                        load=f"{before} -> {load()}",
                    )
            best["kernel"] = kernel if name == "int8" else "torch addmm"
            rows.append(best)
            print(
                f"  {n} thread(s) {name}: prefill {best['prefill_s']:.2f} s, "
                f"{best['token_ms']:.1f} ms/token  (load {best['load']})",
                flush=True,
            )
    return rows


def real_stream_rows(threads: list[int], tokens: int) -> list[dict]:
    sys.path.insert(0, str(REPO / "benchmarks"))
    from chatterbox_batch_bench import real_size_model
    from chatterbox_stream_bench import random_real_size

    from tts_core.models.chatterbox.quant import quantize_turbo

    model = real_size_model()
    _, model.flow, model.hift = random_real_size()
    model.t3 = real_t3("fixture")
    int8 = copy.copy(model)
    int8.t3 = copy.deepcopy(model.t3)
    quantize_turbo(int8, "int8")
    rows = []
    for n in threads:
        torch.set_num_threads(n)
        row = dict(threads=n, max_new_tokens=tokens, **stream_compare(model, int8, TEXT, 1, tokens))
        rows.append(row)
        print(f"  {n} thread(s): first audio {row['first_audio_s_float32']:.2f} / "
              f"{row['first_audio_s_int8']:.2f} s, RTF {row['rtf_float32']:.2f} / "
              f"{row['rtf_int8']:.2f} (float32 / int8), audio SNR {row['audio_snr_db']:.1f} dB, "
              f"first divergent token {row['first_divergent_token']}  (load {row['load_int8']})",
              flush=True)  # fmt: skip
    return rows


def print_tables(result: dict) -> None:
    if result.get("tiny"):
        print(
            "\ntiny | seed | kernel | logits SNR dB | min layer SQNR | tokens f/i | "
            "first diff | audio SNR dB (common length / before the first diff)"
        )
        for r in result["tiny"]:
            print(
                f"{r['model']} | {r['seed']} | {r['kernel']} | {r['logits_snr_db']:.1f} | "
                f"{r['min_layer_sqnr_db']:.1f} | {r['tokens_float32']}/{r['tokens_int8']} | "
                f"{r['first_divergent_token']} | {r['audio_snr_db']:.1f} / "
                f"{_db(r['audio_snr_before_divergence_db'])}"
            )
    if result.get("real_error"):
        print("\nreal-size recipe | logits SNR dB (held out) | calibration | min layer SQNR dB")
        for r in result["real_error"]:
            print(
                f"{r['recipe']} | {r['logits_snr_db']:.1f} | {r['calibration_logits_snr_db']:.1f}"
                f" | {r['min_layer_sqnr_db']:.1f} ({r['worst_layers'][0][0]})"
            )
    if result.get("real_speed"):
        print("\nthreads | weights | prefill s | ms/token | load average (1, 5, 15 min)")
        for r in result["real_speed"]:
            print(
                f"{r['threads']} | {r['weights']} | {r['prefill_s']:.2f} | {r['token_ms']:.1f} "
                f"| {r['load']}"
            )
    if result.get("real_stream"):
        print(
            "\nthreads | first audio s f32/int8 | RTF f32/int8 | tokens | first diff | "
            "audio SNR dB (common / before the first diff) | load (int8 run)"
        )
        for r in result["real_stream"]:
            print(
                f"{r['threads']} | {r['first_audio_s_float32']:.2f}/{r['first_audio_s_int8']:.2f}"
                f" | {r['rtf_float32']:.2f}/{r['rtf_int8']:.2f} | {r['tokens_float32']} | "
                f"{r['first_divergent_token']} | {r['audio_snr_db']:.1f} / "
                f"{_db(r['audio_snr_before_divergence_db'])} | {r['load_int8']}"
            )


def _db(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tiny", action="store_true")
    parser.add_argument("--real-size", action="store_true")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--stream-tokens", type=int, default=50)
    parser.add_argument("--skip", default="", help="real-size parts to skip: error,speed,stream")
    parser.add_argument(
        "--json", type=Path, default=REPO / "benchmarks/results/chatterbox_int8.json"
    )
    args = parser.parse_args()
    threads = [int(t) for t in args.threads.split(",")]
    skip = set(filter(None, args.skip.split(",")))
    result: dict = {
        "cpu": _cpu(),
        "cpus": os.cpu_count(),
        "torch": torch.__version__,
        "load_start": load_average(),
    }
    torch.set_num_threads(max(threads))
    if args.tiny or not args.real_size:
        result["tiny"] = tiny_rows()
    if args.real_size:
        if "error" not in skip:
            result["real_error"] = real_error_rows()
        if "speed" not in skip:
            result["real_speed"] = real_speed_rows(threads)
        if "stream" not in skip:
            result["real_stream"] = real_stream_rows(threads, args.stream_tokens)
    result["load_end"] = load_average()
    print_tables(result)
    print(result["load_end"])
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=1, default=str))
    print(f"wrote {args.json}")


def _cpu() -> str:
    from tts_core.quant.speed import cpu_model

    return cpu_model()


if __name__ == "__main__":
    main()
