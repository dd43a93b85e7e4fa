"""Codec decoder cost on the real geometry (random weights, no download).

Builds the decoder from a released `speech_tokenizer/config.json` and times, on CPU:
streaming `decode_step` at t=1 and t=4 frames, one full decode of 100 frames, and window mode
(re-decode the last W frames every E frames) per second of audio. Also checks that the streamed
waveform equals the full pass at this size. Prints a table and writes JSON.

    .venv/bin/python benchmarks/decoder_bench.py --threads 2
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from window_decoder import WindowDecoder

from tts_core.models.qwen3_tts.codec import CodecDecoder, load_speech_tokenizer_config

DEFAULT_CONFIG = Path(
    str(
        Path(__file__).resolve().parents[1]
        / "assets/checkpoints/Qwen3-TTS-12Hz-0.6B-Base/speech_tokenizer"
    )
)
SAMPLE_RATE = 24000


def _codes(frames: int, size: int) -> torch.Tensor:
    return torch.randint(0, size, (1, 16, frames), generator=torch.Generator().manual_seed(0))


def time_streaming(decoder: CodecDecoder, codes: torch.Tensor, step: int, warmup: int) -> dict:
    state = decoder.init_state(1)
    pieces = []
    for start in range(0, warmup, step):  # fills the attention window and conv histories
        pieces.append(decoder.decode_step(codes[..., start : start + step], state))
    began = time.perf_counter()
    for start in range(warmup, codes.shape[-1], step):
        pieces.append(decoder.decode_step(codes[..., start : start + step], state))
    elapsed = time.perf_counter() - began
    timed = codes.shape[-1] - warmup
    return {"ms_per_frame": 1000 * elapsed / timed, "frames": timed, "audio": torch.cat(pieces, -1)}


def time_full(decoder: CodecDecoder, codes: torch.Tensor) -> dict:
    began = time.perf_counter()
    wav = decoder(codes)[:, 0]
    elapsed = time.perf_counter() - began
    frames = codes.shape[-1]
    return {"ms_total": 1000 * elapsed, "ms_per_frame": 1000 * elapsed / frames, "audio": wav}


def time_window(decoder: CodecDecoder, codes: torch.Tensor, window: int, every: int) -> dict:
    streamer = WindowDecoder(decoder, window=window, emit_every=every)
    began = time.perf_counter()
    out = [streamer.feed(codes[..., i : i + 1]) for i in range(codes.shape[-1])]
    out.append(streamer.flush())
    elapsed = time.perf_counter() - began
    seconds = sum(piece.shape[0] for piece in out) / SAMPLE_RATE
    return {"s_per_audio_s": elapsed / seconds, "audio_s": seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--config", type=Path, default=DEFAULT_CONFIG, help="speech_tokenizer folder"
    )
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--frames", type=int, default=100, help="frames for the full decode")
    parser.add_argument("--stream-frames", type=int, default=24, help="timed streaming frames")
    parser.add_argument("--window-frames", type=int, default=104, help="frames fed to window mode")
    parser.add_argument("--json", type=Path, default=Path("benchmarks/results/decoder_bench.json"))
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    cfg = load_speech_tokenizer_config(args.config).decoder
    decoder = CodecDecoder.from_config(cfg)
    codes = _codes(max(args.frames, 8 + args.stream_frames, args.window_frames), cfg.codebook_size)

    full = time_full(decoder, codes[..., : args.frames])
    stream_codes = codes[..., : 8 + args.stream_frames]
    step1 = time_streaming(decoder, stream_codes, 1, warmup=8)
    step4 = time_streaming(decoder, stream_codes, 4, warmup=8)
    reference = decoder(stream_codes)[:, 0]
    exact = max(float((s["audio"] - reference).abs().max()) for s in (step1, step4))
    window = time_window(decoder, codes[..., : args.window_frames], window=80, every=12)

    frame_s = cfg.samples_per_frame / SAMPLE_RATE
    rows = [
        (
            "streaming decode_step t=1",
            f"{step1['ms_per_frame']:.1f} ms/frame",
            step1["ms_per_frame"] / 1000 / frame_s,
        ),
        (
            "streaming decode_step t=4",
            f"{step4['ms_per_frame']:.1f} ms/frame",
            step4["ms_per_frame"] / 1000 / frame_s,
        ),
        (
            f"full decode {args.frames} frames",
            f"{full['ms_total']:.0f} ms",
            full["ms_per_frame"] / 1000 / frame_s,
        ),
        ("window W=80 E=12", f"{window['s_per_audio_s']:.3f} s/audio-s", window["s_per_audio_s"]),
    ]
    print(
        f"codec decoder, real geometry (hidden {cfg.hidden_size}, decoder_dim {cfg.decoder_dim}), "
        f"random weights, CPU float32, {args.threads} threads"
    )
    print(f"{'measure':32s} {'cost':>18s} {'RTF':>7s}")
    for name, cost, rtf in rows:
        print(f"{name:32s} {cost:>18s} {rtf:7.3f}")
    print(f"streamed vs full pass max abs diff: {exact:.2e}")

    result = {
        "threads": args.threads,
        "dtype": "float32",
        "stream_t1_ms_per_frame": step1["ms_per_frame"],
        "stream_t4_ms_per_frame": step4["ms_per_frame"],
        "full_frames": args.frames,
        "full_ms_total": full["ms_total"],
        "full_ms_per_frame": full["ms_per_frame"],
        "window_80_12_s_per_audio_s": window["s_per_audio_s"],
        "stream_vs_full_max_abs_diff": exact,
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2))
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
