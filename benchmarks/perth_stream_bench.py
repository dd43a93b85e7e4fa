"""Per-chunk Perth watermark on a stream: detection, audible joins, cost (BENCHMARKS.md).

    .venv/bin/python benchmarks/perth_stream_bench.py [--threads N] [--repeats R]

The clip: the Chatterbox reference clip (tests/fixtures/chatterbox-ref-44k.wav, 7 s) at 24 kHz.
For each chunking (first chunk, then later chunks, in seconds; 0.32 / 1.0 is the Chatterbox
backends' default, StreamChunking 15 / 25 tokens) two ways are printed:
* each chunk watermarked alone (keep_length=True) and the chunks concatenated: detection, SNR
  against the whole-clip watermark, the largest sample step at a join (and the plain clip's
  there), and the high-pass spike: the largest ratio over the whole-clip watermark of the energy
  of the 2nd difference (a high-pass) in any +-1 ms window, in dB (a click shows as a spike);
* StreamWatermarker (the backends' way: left context, a held-back tail crossfaded into the next
  pass): detection of the joined audio and of each released piece alone, SNR, the same spike
  against the whole-clip watermark and against the plain clip, and its cost per chunk;
then the detector on short slices (0.2-0.4 s) of the whole-clip watermark, of the stream and of
the plain clip, and the cost of one apply by chunk length (median over repeats).
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from pathlib import Path

import numpy as np
import soundfile as sf
import torch

from tts_core.audio.analysis import resample
from tts_core.audio.perth_watermark import (
    STREAM_CONTEXT,
    STREAM_HOLDBACK,
    PerthWatermarker,
    StreamWatermarker,
)

SR = 24_000
CLIP = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "chatterbox-ref-44k.wav"
CHUNKINGS = ((0.32, 1.0), (0.4, 0.4), (1.0, 2.0), (0.2, 0.2), (0.32, 0.32))
COST_SECONDS = (0.2, 0.4, 1.0, 2.0)
SHORT_SECONDS = (0.2, 0.3, 0.4)


def chunk_bounds(n: int, first: float, later: float) -> list[tuple[int, int]]:
    bounds, start, size = [], 0, int(first * SR)
    while start < n:
        bounds.append((start, min(n, start + size)))
        start, size = start + size, int(later * SR)
    return bounds


def snr(ref: np.ndarray, other: np.ndarray) -> float:
    n = min(len(ref), len(other))
    noise = np.sum((ref[:n].astype(np.float64) - other[:n]) ** 2)
    return float(10 * np.log10(np.sum(ref[:n].astype(np.float64) ** 2) / max(noise, 1e-30)))


def hp_spike(y: np.ndarray, ref: np.ndarray, half: int = SR // 1000) -> float:
    """The largest ratio, in dB, of y's high-pass energy (2nd difference, squared) over ref's
    in any +-1 ms window: a click in y that ref lacks shows as a spike."""
    window = np.ones(2 * half)
    ey = np.convolve(np.diff(y.astype(np.float64), 2) ** 2, window, "valid")
    er = np.convolve(np.diff(ref.astype(np.float64), 2) ** 2, window, "valid")
    return float(10 * np.log10(np.max((ey + 1e-12) / (er + 1e-12))))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, torch "
        f"{torch.__version__}, {args.threads} thread(s), load average "
        f"{os.getloadavg()[0]:.1f}"
    )
    clip, rate = sf.read(CLIP, dtype="float32")
    plain = resample(clip, rate, SR)
    wm = PerthWatermarker()
    whole = wm.apply(plain, SR, keep_length=True)
    steps = np.abs(np.diff(plain))
    print(
        f"clip {len(plain) / SR:.2f} s; whole-clip watermark: SNR {snr(plain, whole):.1f} dB, "
        f"detect {wm.detect(whole, SR):.0f} (score {wm.score(whole, SR):.3f}), plain detect "
        f"{wm.detect(plain, SR):.0f} (score {wm.score(plain, SR):.3f}); largest step of the "
        f"clip {steps.max():.4f}, 99.9th percentile {np.quantile(steps, 0.999):.4f}"
    )
    print(
        f"high-pass spike of the whole-clip watermark over the plain clip: "
        f"{hp_spike(whole, plain):+.1f} dB"
    )
    for first, later in CHUNKINGS:
        bounds = chunk_bounds(len(plain), first, later)
        pieces = [
            wm.apply(plain[a:b], SR, keep_length=True) if b - a >= 800 else plain[a:b]
            for a, b in bounds
        ]
        naive = np.concatenate(pieces)
        joins = [a for a, _ in bounds[1:]]
        step = max(abs(float(naive[j] - naive[j - 1])) for j in joins)
        step_plain = max(abs(float(plain[j] - plain[j - 1])) for j in joins)
        stream = StreamWatermarker(wm, SR, context=STREAM_CONTEXT, holdback=STREAM_HOLDBACK)
        start = time.perf_counter()
        out = [
            stream.push(plain[a:b], final=i == len(bounds) - 1) for i, (a, b) in enumerate(bounds)
        ]
        cost = (time.perf_counter() - start) / len(bounds)
        joined = np.concatenate(out)
        scores = [wm.score(p, SR) for p in out if len(p) >= 800]
        print(f"chunks {first:g} s then {later:g} s ({len(bounds)}):\n"
              f"  each chunk alone: detect {wm.detect(naive, SR):.0f}; SNR vs whole-clip "
              f"watermark {snr(whole, naive):.1f} dB; largest join step {step:.4f} (plain "
              f"there {step_plain:.4f}); high-pass spike vs whole-clip watermark "
              f"{hp_spike(naive, whole):+.1f} dB\n"
              f"  StreamWatermarker: detect {wm.detect(joined, SR):.0f}, pieces alone "
              f"{sum(s >= 0.5 for s in scores)}/{len(scores)} (least score {min(scores):.3f}); "
              f"SNR vs whole-clip watermark {snr(whole, joined):.1f} dB; high-pass spike vs "
              f"whole-clip watermark {hp_spike(joined, whole):+.1f} dB, vs plain "
              f"{hp_spike(joined, plain):+.1f} dB; {cost * 1000:.0f} ms per chunk")  # fmt: skip
    stream = StreamWatermarker(wm, SR, context=STREAM_CONTEXT, holdback=STREAM_HOLDBACK)
    bounds = chunk_bounds(len(plain), 0.32, 1.0)
    streamed = np.concatenate(
        [stream.push(plain[a:b], final=i == len(bounds) - 1) for i, (a, b) in enumerate(bounds)]
    )
    for seconds in SHORT_SECONDS:
        size = int(seconds * SR)
        starts = range(0, len(plain) - size + 1, size)
        found = {
            name: sum(wm.detect(y[a : a + size], SR) == 1.0 for a in starts)
            for name, y in (("whole", whole), ("stream", streamed), ("plain", plain))
        }
        print(
            f"detector on {seconds:g} s slices ({len(starts)}): found in {found['whole']} of "
            f"the whole-clip watermark's, {found['stream']} of the stream's (0.32/1 s), "
            f"{found['plain']} of the plain clip's"
        )
    for seconds in COST_SECONDS:
        piece = plain[SR : SR + int(seconds * SR)]
        wm.apply(piece, SR, keep_length=True)  # warm
        times = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            wm.apply(piece, SR, keep_length=True)
            times.append(time.perf_counter() - start)
        cost = float(np.median(times))
        print(
            f"cost: {seconds:g} s chunk {cost * 1000:.0f} ms ({cost / seconds:.3f} s per s of "
            f"audio)"
        )
    print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
