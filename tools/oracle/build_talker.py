"""The tiny talker + code predictor + speaker encoder (official classes), and EOS calibration."""

from __future__ import annotations

from pathlib import Path

import torch
from cases import EOS_FRAME_RANGE, Case
from init_weights import randomize, round_to_bf16
from oracle_hooks import EOS, NUM_AUDIO_CODES, Capture
from qwen_tts import Qwen3TTSModel
from qwen_tts.core.models import Qwen3TTSConfig, Qwen3TTSForConditionalGeneration

MIN_NEW_TOKENS = 2
MIN_RELATIVE_GAP = 0.05  # EOS logit vs best code logit, at every step up to the stop


def build_model(config: dict, seed: int) -> Qwen3TTSForConditionalGeneration:
    """Official top-level model from `config` (JSON dict) with seeded weights at bf16 values."""
    model = Qwen3TTSForConditionalGeneration(Qwen3TTSConfig(**config)).eval()
    randomize(model, seed)
    round_to_bf16(model)
    return model


def greedy_kwargs(case: Case) -> dict:
    return dict(
        do_sample=False,
        subtalker_dosample=False,
        repetition_penalty=1.0,
        max_new_tokens=case.max_new_tokens,
    )


def run_case(tts: Qwen3TTSModel, case: Case, ref_audio):
    """One official greedy generate_voice_clone call under Capture -> (wav, Captured)."""
    with Capture(tts) as rec:
        wavs, _sr = tts.generate_voice_clone(
            text=case.text,
            language=case.language,
            ref_audio=(ref_audio, 24000),
            ref_text=case.ref_text,
            x_vector_only_mode=case.ref_text is None,
            **greedy_kwargs(case),
        )
    return wavs[0], rec


def _stop_plan(scores, best_code, lo: int, hi: int):
    """Pick (frame, beta) so beta*scores first beats best_code at `frame` in [lo, hi]."""
    running_min = float("inf")
    for t in range(MIN_NEW_TOKENS, len(scores)):
        if scores[t] <= 0:
            continue
        ratio = best_code[t] / scores[t]
        if lo <= t <= hi and ratio < running_min * (1 - 3 * MIN_RELATIVE_GAP):
            return t, (ratio * running_min) ** 0.5
        running_min = min(running_min, ratio)
    return None


def _first_eos(eos_logits, best_code) -> int | None:
    for t in range(MIN_NEW_TOKENS, len(eos_logits)):
        if eos_logits[t] > best_code[t]:
            return t
    return None


def _hidden_and_best(tts, case: Case, ref_audio):
    """(steps, H) final-norm hiddens and (steps,) best audio-code logit of a greedy run."""
    _wav, rec = run_case(tts, case, ref_audio)
    hidden = torch.stack(rec.talker_hidden).double()
    best_code = torch.stack(rec.talker_logits)[:, :NUM_AUDIO_CODES].double().amax(-1)
    return hidden, best_code


def _never_stops(row: torch.Tensor, runs) -> bool:
    # Every allowed EOS decision stays clearly below the best code logit.
    for hidden, best in runs:
        eos = hidden @ row.double()
        if bool((eos[MIN_NEW_TOKENS:] > best[MIN_NEW_TOKENS:] * (1 - MIN_RELATIVE_GAP)).any()):
            return False
    return True


@torch.no_grad()
def calibrate_eos(folder: Path, model, stop: Case, keep: list[Case], ref_audio, seed: int) -> int:
    """Rewrite codec_head's EOS row: greedy `stop` ends on EOS mid-way, `keep` cases never do.

    The EOS row only changes which id wins, never a hidden state, so one greedy run per case
    with the current weights gives every final-norm hidden h_t and best code logit m_t; a row
    beta*u (u a seeded unit vector) then stops first at the step t where beta*u.h_t > m_t.
    Returns the number of frames the `stop` run will produce (= the EOS step).
    """
    tts = Qwen3TTSModel.from_pretrained(str(folder), dtype=torch.float32)
    hidden, best_code = _hidden_and_best(tts, stop, ref_audio)
    others = [_hidden_and_best(tts, case, ref_audio) for case in keep]
    gen = torch.Generator().manual_seed(seed + 99)
    for _attempt in range(500):
        u = torch.randn(hidden.shape[1], generator=gen, dtype=torch.float64)
        u /= u.norm()
        plan = _stop_plan((hidden @ u).tolist(), best_code.tolist(), *EOS_FRAME_RANGE)
        if plan is None:
            continue
        frame, beta = plan
        row = (beta * u).to(torch.bfloat16)
        eos_logits = hidden @ row.double()
        gaps = (eos_logits - best_code).abs() / best_code.abs()
        if (
            _first_eos(eos_logits.tolist(), best_code.tolist()) == frame
            and float(gaps[: frame + 1].min()) > MIN_RELATIVE_GAP
            and _never_stops(row, others)
        ):
            model.talker.codec_head.weight[EOS] = row.float()
            print(f"EOS row calibrated: stops at frame {frame} (beta {beta:.3f})")
            return frame
    raise RuntimeError("no EOS row found that stops inside EOS_FRAME_RANGE")
