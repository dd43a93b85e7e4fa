"""How close is the int8 model to the float one? Teacher-forced over N frames, same inputs.

Both models read the same prompt and the same code frames (teacher forcing: each step gets the
given frame, not its own choice), so every difference comes from quantization alone:
- per-layer output SQNR on the calibration run (quantize_model's report);
- talker logits and code-predictor logits at every step: SQNR and cosine against float;
- argmax agreement: the fraction of steps where int8 would choose the same code as float;
- free-running greedy codes: the fraction of frames identical before the first difference.

What it proves: how much quantization moves the numbers of *this* checkpoint. Random weights
have no trained outlier channels, so on released weights the numbers may differ (smoothing is
there for that); greedy codes of random weights have small logit gaps, which makes argmax
agreement a pessimistic figure.

    .venv/bin/python benchmarks/int8_accuracy.py --model assets/checkpoints/0.6B --frames 60
    .venv/bin/python benchmarks/int8_accuracy.py --model tests/fixtures/qwen3-tiny-a
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch

from tts_core.models.qwen3_tts.model import Qwen3TTSModel, Voice, load_model
from tts_core.models.qwen3_tts.quantize import quantize_model
from tts_core.quant.linear import sqnr_db

TEXT = "The teacher-forced comparison reads this sentence, then the same frames in both models."


@torch.inference_mode()
def teacher_forced_logits(
    model: Qwen3TTSModel, codes: torch.Tensor, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """codes (N, G) -> talker logits (N, V) and code-predictor logits (N, G-1, V'), float32."""
    talker = model.talker
    hidden_size = model.config.talker.stack.hidden_size
    embedding = torch.randn(hidden_size, generator=torch.Generator().manual_seed(seed)) * 0.1
    voice = Voice(speaker_embedding=embedding.to(model.device, model.dtype))
    prompt = model._prompt(TEXT, voice, "english")
    start = prompt.prefill.shape[1]
    caches = talker.new_caches(1, start + codes.shape[0] + 1)
    cp_caches = talker.code_predictor.new_caches(1)
    logits, hidden = talker(prompt.prefill, caches, start=0)
    talker_logits, cp_logits = [], []
    for index, frame in enumerate(codes):
        talker_logits.append(logits[0])
        forced, seen = iter(frame[1:].tolist()), []

        def choose(step_logits: torch.Tensor, forced=forced, seen=seen) -> torch.Tensor:
            seen.append(step_logits[0])
            return torch.tensor([next(forced)], device=step_logits.device)

        talker.code_predictor.predict(hidden, talker.codec_embed(frame[:1]), cp_caches, choose)
        cp_logits.append(torch.stack(seen))
        trailing = prompt.trailing
        text = trailing[index] if index < trailing.shape[0] else model.special.pad
        step = (talker.frame_embed(frame[None]) + text).view(1, 1, -1)
        logits, hidden = talker(step, caches, start=start + index)
    return torch.stack(talker_logits).float(), torch.stack(cp_logits).float()


def random_codes(model: Qwen3TTSModel, frames: int, seed: int = 0) -> torch.Tensor:
    """(frames, G) codes in the valid ranges (audio ids only for c0)."""
    cfg = model.config.talker
    g = torch.Generator().manual_seed(seed)
    c0 = torch.randint(0, cfg.vocab_size - 1024, (frames, 1), generator=g)
    rest = torch.randint(
        0, cfg.code_predictor.vocab_size, (frames, cfg.num_code_groups - 1), generator=g
    )
    return torch.cat([c0, rest], dim=1).to(model.device)


def compare(float_model: Qwen3TTSModel, int8_model: Qwen3TTSModel, frames: int) -> dict:
    codes = random_codes(float_model, frames)
    ref_t, ref_cp = teacher_forced_logits(float_model, codes)
    q_t, q_cp = teacher_forced_logits(int8_model, codes)
    cosine_t = torch.nn.functional.cosine_similarity(ref_t, q_t, dim=-1)
    cosine_cp = torch.nn.functional.cosine_similarity(ref_cp, q_cp, dim=-1)
    return {
        "frames": frames,
        "talker_logits_sqnr_db": sqnr_db(ref_t, q_t),
        "code_predictor_logits_sqnr_db": sqnr_db(ref_cp, q_cp),
        "talker_logits_min_cosine": float(cosine_t.min()),
        "code_predictor_logits_min_cosine": float(cosine_cp.min()),
        "talker_argmax_agreement": float((ref_t.argmax(-1) == q_t.argmax(-1)).float().mean()),
        "code_predictor_argmax_agreement": float(
            (ref_cp.argmax(-1) == q_cp.argmax(-1)).float().mean()
        ),
    }


def greedy_prefix_agreement(float_model, int8_model, frames: int) -> dict:  # noqa: ANN001
    """Free-running greedy generation from the same prompt: frames identical from the start."""
    voice = Voice(
        speaker_embedding=torch.zeros(
            float_model.config.talker.stack.hidden_size,
            device=float_model.device,
            dtype=float_model.dtype,
        )
    )
    a = _codes(float_model, voice, frames)
    b = _codes(int8_model, voice, frames)
    n = min(len(a), len(b))
    same = int((a[:n] == b[:n]).all(dim=1).long().cumprod(0).sum()) if n else 0
    return {
        "greedy_frames": n,
        "greedy_identical_prefix_frames": same,
        "greedy_frames_identical": int((a[:n] == b[:n]).all(dim=1).sum()),
    }


def _codes(model: Qwen3TTSModel, voice: Voice, frames: int) -> torch.Tensor:
    """Greedy frames (at most `frames`; EOS may stop sooner), no length cap."""
    prompt, settings = model.plan(
        TEXT, voice, "english", greedy=True, length_cap=False, max_new_tokens=frames + 1
    )
    frames = list(model.frames(prompt, settings))
    return torch.stack(frames) if frames else torch.zeros(0, 16, dtype=torch.long)


def load_pair(model: str) -> tuple[Qwen3TTSModel, Qwen3TTSModel, dict]:
    """(float model, int8 model, quantization report) from a checkpoint folder, or from a folder
    of released configs (random weights, the same seed for both)."""
    folder = Path(model)
    if (folder / "model.safetensors").is_file():
        float_model, int8_model = load_model(folder), load_model(folder)
    else:
        float_model = Qwen3TTSModel.from_config(folder, with_codec=False)
        int8_model = Qwen3TTSModel.from_config(folder, with_codec=False)
    report = quantize_model(int8_model)
    layers = report.layer_sqnr_db
    summary = {
        "min_layer_sqnr_db": report.min_sqnr_db,
        "worst_layers": report.worst(5),
        "layers": len(layers),
        "layers_below_30_db": sum(v < 30 for v in layers.values()),
    }
    return float_model, int8_model, summary


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True, help="checkpoint folder or folder of configs")
    p.add_argument("--frames", type=int, default=60)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json", default=None)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    started = time.perf_counter()
    float_model, int8_model, result = load_pair(args.model)
    result.update(compare(float_model, int8_model, args.frames))
    result.update(greedy_prefix_agreement(float_model, int8_model, min(args.frames, 30)))
    result.update(
        model=args.model,
        seconds=round(time.perf_counter() - started, 1),
        load_average=os.getloadavg(),
    )
    for key, value in result.items():
        print(f"{key:36s} {value}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1, default=str))


if __name__ == "__main__":
    main()
