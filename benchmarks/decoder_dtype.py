"""Codec decoder: cost per dtype and chunk size, first-chunk cost, bfloat16 accuracy.

Real geometry from a released `speech_tokenizer/config.json`, random weights, CPU:

1. Speed, each dtype in fresh processes (the first call of a process or of a new input shape
   pays one-time costs, so every "first" number comes from a process that has decoded nothing):
   - cold:   first and second `decode_step` of a 2-frame chunk, then of a 6-frame chunk;
   - warmed: `decoder.warm_up((2, 6))` (its time), then the first 2- and 6-frame chunks of a new
             stream (x-vector voice: fresh state) and of a stream whose attention window is full
             (ICL voice: state after the reference frames), then the steady cost at chunk sizes
             1, 2, 6 (median call after the window is full; ms per call and per frame).
   Every number is the least over --repeat fresh processes (all runs are kept in the JSON);
   within a process, steady costs are the median call.
2. Accuracy (with --accuracy): max abs error and SNR against a float64 run of the same weights,
   for float32 and bfloat16, full pass and 2-frame stream, on the well-conditioned decoder of
   tests/qwen3/test_streaming_decoder.py and on the real-size random decoder.

    .venv/bin/python benchmarks/decoder_dtype.py --threads 2 --accuracy --json out.json

Timings print os.getloadavg(): on a shared 2-core box, compare numbers taken at similar load.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import torch

from tts_core.models.qwen3_tts.codec import CodecDecoder, load_speech_tokenizer_config

ROOT = Path(__file__).resolve().parents[1]

DEFAULT_CONFIG = ROOT / "assets/checkpoints/Qwen3-TTS-12Hz-0.6B-Base/speech_tokenizer"
TINY_CONFIG = ROOT / "tests/fixtures/qwen3-tiny-a/speech_tokenizer"
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
STEADY_CALLS = {1: 10, 2: 8, 6: 5}


def _codes(frames: int, size: int, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, size, (1, 16, frames), generator=generator)


def _decoder(config: Path, dtype: torch.dtype) -> CodecDecoder:
    return CodecDecoder.from_config(load_speech_tokenizer_config(config).decoder).set_dtype(dtype)


def _ms(decoder: CodecDecoder, codes: torch.Tensor, state) -> float:
    began = time.perf_counter()
    decoder.decode_step(codes, state)
    return 1000 * (time.perf_counter() - began)


def child_cold(decoder: CodecDecoder) -> dict:
    codes = _codes(20, decoder.config.codebook_size)
    state, out = decoder.init_state(1), {}
    out["t2_first_ms"] = _ms(decoder, codes[..., 0:2], state)
    out["t2_second_ms"] = _ms(decoder, codes[..., 2:4], state)
    out["t6_first_ms"] = _ms(decoder, codes[..., 4:10], state)
    out["t6_second_ms"] = _ms(decoder, codes[..., 10:16], state)
    return out


def child_warmed(decoder: CodecDecoder, chunks: tuple[int, ...]) -> dict:
    size = decoder.config.codebook_size
    out = {"warm_up_ms": {k: 1000 * v for k, v in decoder.warm_up(chunks).items()}}
    codes = _codes(20, size, seed=1)
    state = decoder.init_state(1)  # x-vector stream: fresh state
    out["t2_first_ms"] = _ms(decoder, codes[..., 0:2], state)
    out["t2_second_ms"] = _ms(decoder, codes[..., 2:4], state)
    state = decoder.init_state(1)
    out["t6_first_ms"] = _ms(decoder, codes[..., 4:10], state)
    out["t6_second_ms"] = _ms(decoder, codes[..., 10:16], state)
    # ICL stream: the attention window is already full after the reference frames.
    window = decoder.config.sliding_window - 1
    full = decoder.init_state(1)
    decoder.decode_step(_codes(window, size, seed=2), full)
    stream = full.clone()
    out["icl_t2_first_ms"] = _ms(decoder, codes[..., 0:2], stream)
    out["icl_t2_second_ms"] = _ms(decoder, codes[..., 2:4], stream)
    steady = {}
    for chunk, calls in STEADY_CALLS.items():
        stream, more = full.clone(), _codes(chunk * calls, size, seed=3)
        times = sorted(
            _ms(decoder, more[..., i * chunk : (i + 1) * chunk], stream) for i in range(calls)
        )
        median = times[len(times) // 2]
        steady[chunk] = {"ms_per_call": median, "ms_per_frame": median / chunk}
    out["steady"] = steady
    return out


def run_child(args: argparse.Namespace, kind: str, dtype: str) -> dict:
    """The child's numbers, each the least over --repeat fresh processes (on a shared box, other
    processes only ever add time: 2 threads spin-waiting on a busy core can cost seconds)."""
    command = [sys.executable, __file__, "--child", kind, "--dtype", dtype]
    command += ["--threads", str(args.threads), "--config", str(args.config)]
    runs, loads = [], []
    for _ in range(args.repeat):
        done = subprocess.run(command, check=True, capture_output=True, text=True)
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
        loads.append(os.getloadavg())
    result = _least(runs)
    result["runs"], result["loadavg"] = runs, loads
    return result


def _least(runs: list):
    if isinstance(runs[0], dict):
        return {key: _least([run[key] for run in runs]) for key in runs[0]}
    return min(runs)


# ------------------------------------------------------------------------------------ accuracy
def _error(ours: torch.Tensor, exact: torch.Tensor) -> dict:
    diff = ours.double() - exact.double()
    noise = float(diff.pow(2).sum())
    signal = float(exact.double().pow(2).sum())
    snr = math.inf if noise == 0 else 10 * math.log10(signal / noise)
    return {"max_abs": float(diff.abs().max()), "snr_db": snr}


def _stream(decoder: CodecDecoder, codes: torch.Tensor, chunk: int) -> torch.Tensor:
    state = decoder.init_state(1)
    pieces = [
        decoder.decode_step(codes[..., i : i + chunk], state)
        for i in range(0, codes.shape[-1], chunk)
    ]
    return torch.cat(pieces, dim=-1)[0]


def accuracy(name: str, decoder: CodecDecoder, frames: int, seed: int) -> dict:
    """Errors of float32 and bfloat16 runs against float64 runs of the same float32 weights."""
    codes = _codes(frames, decoder.config.codebook_size, seed)
    exact = copy.deepcopy(decoder).set_dtype(torch.float64)(codes)[0, 0]
    bf16 = copy.deepcopy(decoder).set_dtype(torch.bfloat16)
    rounded = copy.deepcopy(bf16).set_dtype(torch.float64)  # bf16 weights, float64 arithmetic
    full32, full16 = decoder(codes)[0, 0], bf16(codes)[0, 0]
    stream16 = _stream(bf16, codes, 2)
    result = {
        "frames": frames,
        "exact_rms": float(exact.pow(2).mean().sqrt()),
        "exact_peak": float(exact.abs().max()),
        "float32_full": _error(full32, exact),
        "bfloat16_full": _error(full16, exact),
        "bfloat16_stream_t2": _error(stream16, exact),
        "bfloat16_stream_t2_vs_bfloat16_full": _error(stream16, full16),
        "bfloat16_weights_float64_math": _error(rounded(codes)[0, 0], exact),
    }
    e32, e16 = result["float32_full"]["max_abs"], result["bfloat16_full"]["max_abs"]
    result["amplification_float32"] = e32 / 2.0**-24  # error / unit roundoff
    result["amplification_bfloat16"] = e16 / 2.0**-9
    print(
        f"\n{name}: {frames} frames, exact rms {result['exact_rms']:.3f} "
        f"peak {result['exact_peak']:.3f}"
    )
    for key in (
        "float32_full",
        "bfloat16_full",
        "bfloat16_stream_t2",
        "bfloat16_stream_t2_vs_bfloat16_full",
        "bfloat16_weights_float64_math",
    ):
        row = result[key]
        print(f"  {key:38s} max|err| {row['max_abs']:.2e}  SNR {row['snr_db']:6.1f} dB")
    print(
        f"  amplification: float32 {result['amplification_float32']:.2f} x 2^-24, "
        f"bfloat16 {result['amplification_bfloat16']:.2f} x 2^-9"
    )
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=DEFAULT_CONFIG)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--dtypes", default="float32,bfloat16")
    parser.add_argument("--repeat", type=int, default=3, help="fresh processes per measurement")
    parser.add_argument("--accuracy", action="store_true", help="also measure bf16 error")
    parser.add_argument("--accuracy-frames", type=int, default=12)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--child", choices=("cold", "warmed"), help=argparse.SUPPRESS)
    parser.add_argument("--dtype", default="float32", help=argparse.SUPPRESS)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    if args.child:
        decoder = _decoder(args.config, DTYPES[args.dtype])
        with torch.inference_mode():
            result = child_cold(decoder) if args.child == "cold" else child_warmed(decoder, (2, 6))
        print(json.dumps(result))
        return

    report: dict = {"threads": args.threads, "config": str(args.config), "speed": {}}
    print(f"codec decoder, real geometry, random weights, CPU, {args.threads} threads")
    header = (
        f"{'dtype':9s} {'':7s} {'t=2 first':>9s} {'second':>7s} {'t=6 first':>9s} {'second':>7s}"
    )
    for name in args.dtypes.split(","):
        cold = run_child(args, "cold", name)
        warmed = run_child(args, "warmed", name)
        report["speed"][name] = {"cold": cold, "warmed": warmed}
        print(header)
        for label, row in (("cold", cold), ("warmed", warmed)):
            print(
                f"{name:9s} {label:7s} {row['t2_first_ms']:9.0f} {row['t2_second_ms']:7.0f} "
                f"{row['t6_first_ms']:9.0f} {row['t6_second_ms']:7.0f}   (ms, least of "
                f"{args.repeat}; 1-min loadavg {' '.join(f'{x[0]:.2f}' for x in row['loadavg'])})"
            )
        warm = warmed["warm_up_ms"]
        print(
            f"  warm_up(2, 6): {' + '.join(f'{v:.0f}' for v in warm.values())} ms; ICL stream "
            f"t=2 first {warmed['icl_t2_first_ms']:.0f}, second {warmed['icl_t2_second_ms']:.0f} ms"
        )
        for chunk, row in sorted(warmed["steady"].items(), key=lambda kv: int(kv[0])):
            print(
                f"  steady t={chunk}: {row['ms_per_call']:6.1f} ms/call "
                f"{row['ms_per_frame']:6.1f} ms/frame (80 ms of audio per frame)"
            )

    if args.accuracy:
        torch.set_num_threads(args.threads)
        with torch.inference_mode():
            tiny = load_speech_tokenizer_config(TINY_CONFIG).decoder
            conditioned = CodecDecoder.from_config(
                dataclasses.replace(tiny, sliding_window=8), seed=7
            )
            report["accuracy"] = {
                "well_conditioned_tiny": accuracy(
                    "well-conditioned tiny decoder (test_streaming_decoder)", conditioned, 40, 12
                ),
                "real_size_random": accuracy(
                    "real-size random decoder",
                    CodecDecoder.from_config(load_speech_tokenizer_config(args.config).decoder),
                    args.accuracy_frames,
                    0,
                ),
            }
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2))
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
