"""Times our engine (`tts_core`) streaming one clip: one configuration per process.

    .venv/bin/python benchmarks/engine_bench.py --checkpoint /tmp/qwen3-0.6B-random \
        --dtype bfloat16 --frames 20 --threads 2 [--sampled] --json out.json

Runs the public API exactly as the app does (`load_model`, `create_voice`, `stream`) and times
its parts by wrapping four methods (no engine code is changed): `talker.forward` (the prefill),
`Qwen3Runner.talker_step` (the talker steps: `stream` runs the serving engine with one row),
`code_predictor.predict` (the 15 passes of one frame) and `decoder.decode_step` (the first call
warms the decoder on the reference codes; later ones decode the streamed chunks). The EOS row of
`codec_head` is zeroed (as the random checkpoints already are) so exactly `--frames` frames are
generated; the run fails if any other number comes out.
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from pathlib import Path

import soundfile as sf
import torch
from common import FRAME_S, LANGUAGE, REF_CLIP, REF_TEXT, TEXT, Calls, mean_ms, wrap

import tts_core
from tts_core.models.qwen3_tts.serving.runner import Qwen3Runner

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def suppress_eos(model) -> None:
    """Zero the EOS row of codec_head: its logit is then 0, far below the best code logit."""
    with torch.no_grad():
        model.talker.codec_head.weight[model.config.talker.codec_eos_token_id].zero_()


def stream_once(model, voice, frames: int, greedy: bool, first: int, chunk: int) -> dict:
    """One clip through `model.stream`; wall times of setup, first chunk and the whole clip."""
    start = time.perf_counter()
    chunks = model.stream(
        TEXT,
        voice,
        language=LANGUAGE,
        greedy=greedy,
        seed=None if greedy else 0,
        max_new_tokens=frames + 1,  # at most max_new_tokens - 1 frames
        first_chunk_frames=first,
        chunk_frames=chunk,
        length_cap=False,
    )
    setup_s = time.perf_counter() - start
    first_audio_s, produced, compute_s = None, 0, 0.0
    for piece in chunks:
        if first_audio_s is None and piece.frames:
            first_audio_s = time.perf_counter() - start
        produced += piece.frames
        compute_s += piece.compute_s
    whole_s = time.perf_counter() - start
    if produced != frames:
        raise RuntimeError(f"asked for {frames} frames, got {produced}: is EOS suppressed?")
    return {"setup_s": setup_s, "ttfa_s": first_audio_s, "whole_s": whole_s, "compute_s": compute_s}


def split(talker: Calls, steps_calls: Calls, predictor: Calls, decoder: Calls) -> dict:
    """Per-part times of one clip from the wrapped calls.

    Decoder calls before the first frame's code predictor warm the decoder on the reference
    codes (no audio is emitted from them); the later ones decode the streamed chunks.
    """
    prefill = [s for s, n in zip(talker.seconds, talker.sizes, strict=True) if n > 1]
    steps = list(steps_calls.seconds)
    first_frame = predictor.starts[0] if predictor.starts else float("inf")
    warm = sum(1 for start in decoder.starts if start < first_frame)
    chunks = decoder.seconds[warm:]
    decoded = sum(decoder.sizes[warm:])
    return {
        "prefill_ms": 1000 * sum(prefill),
        "prefill_positions": max((n for n in talker.sizes if n > 1), default=0),
        "talker_step_ms": mean_ms(steps),
        "code_predictor_ms": mean_ms(predictor.seconds),
        "decoder_ms_per_frame": 1000 * sum(chunks) / max(decoded, 1),
        "decoder_first_chunk_ms": 1000 * chunks[0] if chunks else 0.0,
        "decoder_reference_warmup_ms": 1000 * sum(decoder.seconds[:warm]),
        "reference_frames": sum(decoder.sizes[:warm]),
        "talker_steps": len(steps),
        "parts_sum_ms": 1000 * (sum(steps) + sum(predictor.seconds) + sum(chunks)),
    }


def run(args: argparse.Namespace) -> dict:
    torch.set_num_threads(args.threads)
    start = time.perf_counter()
    dtype = "float32" if args.dtype == "int8" else args.dtype  # int8: float32 activations
    quantize = "int8" if args.dtype == "int8" else None
    decoder = None if args.decoder_dtype == "same" else DTYPES[args.decoder_dtype]
    model = tts_core.load_model(
        args.checkpoint, device="cpu", dtype=DTYPES[dtype], quantize=quantize, decoder_dtype=decoder
    )
    load_s = time.perf_counter() - start
    suppress_eos(model)
    ref, rate = sf.read(REF_CLIP, dtype="float32")
    start = time.perf_counter()
    voice = model.create_voice(ref, rate, ref_text=REF_TEXT)
    voice_s = time.perf_counter() - start

    talker = wrap(model.talker, "forward", lambda a, k: a[0].shape[1])
    steps = wrap(Qwen3Runner, "talker_step", lambda a, k: len(a[1]))  # (runner, seqs, embeds)
    predictor = wrap(model.talker.code_predictor, "predict")
    decoder = wrap(model.speech_tokenizer.decoder, "decode_step", lambda a, k: a[0].shape[-1])
    greedy = not args.sampled
    stream_once(model, voice, min(2, args.frames), greedy, args.first_chunk, args.chunk)  # warm-up
    for calls in (talker, steps, predictor, decoder):
        calls.clear()
    clip = stream_once(model, voice, args.frames, greedy, args.first_chunk, args.chunk)
    parts = split(talker, steps, predictor, decoder)

    # Per-frame overhead outside the three parts (sampling, embeddings, chunk assembly).
    loop_ms = 1000 * clip["whole_s"] - parts["prefill_ms"] - parts["decoder_reference_warmup_ms"]
    other_ms = (loop_ms - 1000 * clip["setup_s"] - parts.pop("parts_sum_ms")) / args.frames
    frame_ms = parts["talker_step_ms"] + parts["code_predictor_ms"] + parts["decoder_ms_per_frame"]
    frame_ms += other_ms
    audio_s = args.frames * FRAME_S
    return {
        "impl": "ours",
        "checkpoint": str(args.checkpoint),
        "dtype": args.dtype,
        "decoder_dtype": args.decoder_dtype,
        "threads": torch.get_num_threads(),
        "greedy": greedy,
        "frames": args.frames,
        "first_chunk_frames": args.first_chunk,
        "chunk_frames": args.chunk,
        "load_s": load_s,
        "voice_prompt_s": voice_s,
        **parts,
        "other_ms_per_frame": other_ms,
        "setup_ms": 1000 * clip["setup_s"],
        "time_to_first_audio_ms": 1000 * clip["ttfa_s"],
        "whole_clip_s": clip["whole_s"],
        "frame_ms": frame_ms,
        "rtf_steady": frame_ms / (1000 * FRAME_S),
        "rtf_whole_clip": clip["compute_s"] / audio_s,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoint", type=Path, required=True)
    ap.add_argument(
        "--dtype",
        choices=[*sorted(DTYPES), "int8"],
        default="float32",
        help="weight format; int8 = 8-bit layers, float32 elsewhere",
    )
    ap.add_argument(
        "--decoder-dtype",
        choices=["same", *sorted(DTYPES)],
        default="same",
        help="the codec decoder's dtype (the app's CPU auto: bfloat16 with native bf16)",
    )
    ap.add_argument("--frames", type=int, default=20)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--sampled", action="store_true", help="checkpoint's default sampling, seed 0")
    ap.add_argument("--first-chunk", type=int, default=2, help="frames in the first chunk")
    ap.add_argument("--chunk", type=int, default=6, help="frames in later chunks")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    result = run(args)
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
