"""Codec decoder cost per second of audio: exact stateful streaming vs window re-decoding.

    .venv/bin/python benchmarks/decoder_modes.py --checkpoint /tmp/qwen3-0.6B-random \
        --dtype float32 --frames 48 --threads 2 --json out.json

All modes run in steady state: they first take `--prefix` frames of left context (as a long
clip would have), then `--frames` new frames arrive one at a time and the time to turn them into
audio is divided by the audio produced (frames x 80 ms).
- stateful t=1 / t=C: `decode_step` on each frame / each C-frame chunk, every frame decoded once.
- window W=80, E=12: every 12 frames the last 80 are decoded again from zero state.
- window W=25+8, E=8: every 8 frames the 8 new ones with 25 frames of left context (33 in all),
  the official `chunked_decode` context of 25 frames at streaming cadence.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from window_decoder import WindowDecoder

from tts_core.models.qwen3_tts.codec import SpeechTokenizer

FRAME_S = 0.08
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
WINDOW_MODES = {"window_w80_e12": (80, 12), "window_w25ctx_e8": (25 + 8, 8)}


def random_codes(frames: int, quantizers: int, size: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(0)
    return torch.randint(0, size, (1, quantizers, frames), generator=generator)  # (1, n_q, T)


def stateful_cost(decoder, prefix: torch.Tensor, codes: torch.Tensor, step: int) -> float:
    """Seconds of compute per audio second for decode_step with `step` frames per call."""
    state = decoder.init_state(1)
    decoder.decode_step(prefix, state)
    start = time.perf_counter()
    for first in range(0, codes.shape[-1], step):
        decoder.decode_step(codes[..., first : first + step], state)
    return (time.perf_counter() - start) / (codes.shape[-1] * FRAME_S)


def window_cost(decoder, prefix: torch.Tensor, codes: torch.Tensor, window: int, every: int):
    """Seconds per audio second of window mode fed one frame at a time (flush not counted)."""
    streamer = WindowDecoder(decoder, window=window, emit_every=every)
    streamer.start(prefix)
    start = time.perf_counter()
    for index in range(codes.shape[-1]):
        streamer.feed(codes[..., index : index + 1])
    return (time.perf_counter() - start) / (codes.shape[-1] * FRAME_S)


def run(args: argparse.Namespace) -> dict:
    torch.set_num_threads(args.threads)
    folder = args.checkpoint / "speech_tokenizer"
    decoder = SpeechTokenizer.from_folder(folder, device="cpu", dtype=DTYPES[args.dtype]).decoder
    cfg = decoder.config
    codes = random_codes(args.prefix + args.frames, cfg.num_quantizers, cfg.codebook_size)
    prefix, new = codes[..., : args.prefix], codes[..., args.prefix :]
    decoder(prefix[..., :8])  # warm-up: allocator and kernels
    result = {
        "checkpoint": str(args.checkpoint),
        "dtype": args.dtype,
        "threads": torch.get_num_threads(),
        "prefix_frames": args.prefix,
        "frames": args.frames,
        "stateful_t1": stateful_cost(decoder, prefix, new, 1),
        f"stateful_t{args.chunk}": stateful_cost(decoder, prefix, new, args.chunk),
    }
    for name, (window, every) in WINDOW_MODES.items():
        result[name] = window_cost(decoder, prefix, new, window, every)
    result["window_w80_e12_over_stateful_t1"] = result["window_w80_e12"] / result["stateful_t1"]
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoint", type=Path, required=True)
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="float32")
    ap.add_argument("--frames", type=int, default=48, help="new frames (a multiple of 12 and 8)")
    ap.add_argument("--prefix", type=int, default=80, help="left-context frames given first")
    ap.add_argument("--chunk", type=int, default=6, help="frames per decode_step, second mode")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    result = run(args)
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
