"""Times the official qwen-tts==0.1.1 on a checkpoint folder (runs in the oracle venv).

    PYTHONPATH=tools/oracle/stubs .oracle-venv/bin/python benchmarks/official_bench.py \
        --checkpoint /tmp/qwen3-0.6B-random --frames 20 --dtype float32 --json out.json

Splits the official generate_voice_clone into its talker loop (`model.generate`: prefill,
talker steps and the 15 code-predictor passes per frame) and its decoder
(`speech_tokenizer.decode`, one pass over reference + generated frames, after generation).
The per-frame talker + code-predictor cost is the slope between a short and a long run,
so the prefill does not inflate it. The official code gives no audio before the whole clip
is done, so its time to first audio is the whole-clip time.
"""

from __future__ import annotations

import argparse
import functools
import json
import resource
import time
from pathlib import Path

import soundfile as sf
import torch
from common import FRAME_S, LANGUAGE, REF_CLIP, REF_TEXT, TEXT
from qwen_tts import Qwen3TTSModel


class Timer:
    """Wraps a bound method, recording the wall time of each call (and its sequence length)."""

    def __init__(self, owner, name: str) -> None:
        self.owner, self.name = owner, name
        self.calls: list[tuple[float, int]] = []  # (seconds, inputs_embeds length or 0)
        self.inner = getattr(owner, name)

    @property
    def seconds(self) -> float:
        return sum(seconds for seconds, _ in self.calls)

    def __enter__(self) -> Timer:
        @functools.wraps(self.inner)  # keeps the signature HF generate inspects
        def timed(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return self.inner(*args, **kwargs)
            finally:
                embeds = kwargs.get("inputs_embeds")
                length = embeds.shape[1] if embeds is not None else 0
                self.calls.append((time.perf_counter() - t0, length))

        setattr(self.owner, self.name, timed)
        return self

    def __exit__(self, *exc) -> None:
        delattr(self.owner, self.name)  # back to the class method


def talker_split(forward: Timer, predictor: Timer) -> dict:
    """Prefill, talker step and code predictor from the talker's forward calls.

    The official talker forward runs the code predictor (`code_predictor.generate`, 15 codes)
    inside every decode step, so a step's own cost is its forward time minus that call's.
    """
    prefill = [s for s, n in forward.calls if n > 1]
    steps = [s for s, n in forward.calls if n <= 1]
    predictor_s = [s for s, _ in predictor.calls]
    count = max(len(steps), 1)
    return {
        "prefill_ms": 1000 * sum(prefill),
        "talker_step_ms": 1000 * (sum(steps) - sum(predictor_s)) / count,
        "code_predictor_ms": 1000 * sum(predictor_s) / max(len(predictor_s), 1),
    }


def suppress_eos(tts) -> None:
    """Zero the EOS row of codec_head (as the random checkpoints already are): exactly N frames."""
    eos = tts.model.config.talker_config.codec_eos_token_id
    with torch.no_grad():
        tts.model.talker.codec_head.weight[eos].zero_()


def run_once(tts, prompt, frames: int, greedy: bool) -> dict:
    kwargs = dict(max_new_tokens=frames + 1)  # at most max_new_tokens - 1 frames
    if greedy:
        kwargs.update(do_sample=False, subtalker_dosample=False, repetition_penalty=1.0)
    else:
        torch.manual_seed(0)
    talker = tts.model.talker
    with (
        Timer(tts.model, "generate") as gen,
        Timer(tts.model.speech_tokenizer, "decode") as dec,
        Timer(talker, "forward") as forward,
        Timer(talker.code_predictor, "generate") as predictor,
    ):
        t0 = time.perf_counter()
        wavs, sr = tts.generate_voice_clone(
            text=TEXT, language=LANGUAGE, voice_clone_prompt=prompt, **kwargs
        )
        total = time.perf_counter() - t0
    got = round(len(wavs[0]) / 1920)
    if got != frames:
        raise RuntimeError(f"asked for {frames} frames, got {got}: is EOS suppressed?")
    split = talker_split(forward, predictor)
    return {"total_s": total, "talker_s": gen.seconds, "decoder_s": dec.seconds, **split}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--checkpoint", type=Path, required=True)
    ap.add_argument("--frames", type=int, default=20)
    ap.add_argument("--short-frames", type=int, default=4)
    ap.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--sampled", action="store_true", help="official default sampling")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    if not 1 <= args.short_frames < args.frames:
        ap.error("need 1 <= --short-frames < --frames")
    if args.threads:
        torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype)

    t0 = time.perf_counter()
    tts = Qwen3TTSModel.from_pretrained(str(args.checkpoint), dtype=dtype)
    load_s = time.perf_counter() - t0
    suppress_eos(tts)
    ref, sr = sf.read(REF_CLIP, dtype="float32")
    t0 = time.perf_counter()
    prompt = tts.create_voice_clone_prompt(ref_audio=(ref, sr), ref_text=REF_TEXT)
    voice_s = time.perf_counter() - t0
    ref_frames = int(prompt[0].ref_code.shape[0])

    greedy = not args.sampled
    run_once(tts, prompt, args.short_frames, greedy)  # warm-up
    short = run_once(tts, prompt, args.short_frames, greedy)
    full = run_once(tts, prompt, args.frames, greedy)
    per_frame_talker = (full["talker_s"] - short["talker_s"]) / (args.frames - args.short_frames)
    decoded = ref_frames + args.frames
    result = {
        "impl": "official qwen-tts 0.1.1",
        "dtype": args.dtype,
        "threads": torch.get_num_threads(),
        "greedy": greedy,
        "frames": args.frames,
        "ref_frames": ref_frames,
        "load_s": load_s,
        "voice_prompt_s": voice_s,
        "whole_clip_s": full["total_s"],
        "time_to_first_audio_s": full["total_s"],
        "talker_loop_s": full["talker_s"],
        "talker_and_code_predictor_ms_per_frame": 1000 * per_frame_talker,
        "prefill_and_setup_s": full["talker_s"] - per_frame_talker * args.frames,
        "prefill_ms": full["prefill_ms"],
        "talker_step_ms": full["talker_step_ms"],
        "code_predictor_ms": full["code_predictor_ms"],
        "decoder_s": full["decoder_s"],
        "decoder_ms_per_frame": 1000 * full["decoder_s"] / decoded,
        "rtf": full["total_s"] / (args.frames * FRAME_S),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
