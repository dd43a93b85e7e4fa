"""Float64 goldens, the goldens' own float32 error, and how far every golden code is from a tie.

One official run per checkpoint in pure float64 (`pure_fp64.pure_float64`: the official
modules with their float32 casts lifted, so the run is the exact value of the float32
computation up to float64 rounding, ~1e-16 x the network's amplification):

* `codes_agree`: the float64 run picks the very same codes as the float32 goldens (reference
  encode at 24 kHz and 16 kHz, code predictor, both generation cases);
* `audio`: the codec decoder's output in float64 for `decoder_codes` and for the codes behind
  each case's audio (stored as `<key>_fp64`: the references for the float64 parity checks);
* `fp32_error`: max |float32 golden - float64 value| for every float golden, i.e. the float32
  rounding error of the official computation on the machine that made the goldens; the tests
  derive their float32 bounds from it;
* `decision_margins`: for every greedy / nearest-code decision, the float64 gap between the
  chosen and the runner-up logit (or distance), divided by twice the largest float32 error on
  that logit row (2x: both entries may err in opposite directions). Another CPU's float32 run
  can only pick differently where its error on the row exceeds this run's by that factor.

The generation cases get the float32 golden voice (reference codes and speaker embedding as
float32 values), so every float64 quantity has exactly the inputs of its float32 golden.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from build_talker import greedy_kwargs
from oracle_hooks import Capture, RvqDistances, official_mel, talker_choice_logits, tts_pad
from pure_fp64 import pure_float64
from qwen_tts import Qwen3TTSModel
from qwen_tts.inference.qwen3_tts_model import VoiceClonePromptItem

F64 = torch.float64


def _max_abs(a: torch.Tensor, b: torch.Tensor) -> float:
    assert a.shape == b.shape, (a.shape, b.shape)
    return float((a.to(F64) - b.to(F64)).abs().max()) if a.numel() else 0.0


def _ratio(gap: float, error: float) -> float:
    return gap / (2 * error) if error > 0 else float("inf")


def _argmax_margin(l32: torch.Tensor, l64: torch.Tensor) -> tuple[float, float]:
    """(float64 top-1 minus top-2 gap, max float32 error) over one logit row (-inf = masked)."""
    allowed = torch.isfinite(l64)
    top = torch.topk(l64[allowed], 2).values
    return float(top[0] - top[1]), _max_abs(l32[allowed], l64[allowed])


def _argmin_margins(d32: torch.Tensor, d64: torch.Tensor) -> list[tuple[float, float]]:
    """(gap, max error) for each row of an (N, codebook) distance matrix."""
    low = torch.topk(d64, 2, dim=-1, largest=False).values
    errors = (d32.to(F64) - d64).abs().amax(-1)
    return [(float(g), float(e)) for g, e in zip(low[:, 1] - low[:, 0], errors, strict=True)]


def _summary(pairs: list[tuple[float, float]]) -> dict:
    ratios = [_ratio(g, e) for g, e in pairs]
    worst = int(np.argmin(ratios))
    return {
        "decisions": len(pairs),
        "min_gap_over_2x_fp32_error": round(ratios[worst], 1),
        "at_gap": float(f"{pairs[worst][0]:.4g}"),
        "at_fp32_error": float(f"{pairs[worst][1]:.4g}"),
        "min_gap": float(f"{min(g for g, _ in pairs):.4g}"),
        "max_fp32_error": float(f"{max(e for _, e in pairs):.4g}"),
    }


def _decode64(tts, codes: torch.Tensor) -> torch.Tensor:
    """The official codec decoder in float64 (the wrapper's decode would cast to float32)."""
    with torch.inference_mode():
        return tts.model.speech_tokenizer.model.decode(codes[None], return_dict=False)[0][0]


@torch.no_grad()
def float64_run(folder: Path, cases, ref_audio, clip16_path: Path, tensors, f32) -> dict:
    """`f32`: float32-run records {"rvq": [dists], "rvq16": [...], "cp_logits": [...],
    "<key>": Captured}. Returns {"codes_agree", "fp32_error", "decision_margins", "audio"}."""
    with pure_float64():
        tts = Qwen3TTSModel.from_pretrained(str(folder), dtype=F64)
        with RvqDistances() as rvq:
            item = tts.create_voice_clone_prompt(ref_audio=(ref_audio, 24000), ref_text="x")[0]
        with RvqDistances() as rvq16:
            item16 = tts.create_voice_clone_prompt(ref_audio=str(clip16_path), ref_text="x")[0]
        values = {
            "ref_mel": official_mel(ref_audio.astype(np.float64)),
            "speaker_embedding": item.ref_spk_embedding,
            "ref16_speaker_embedding": item16.ref_spk_embedding,
            "decoder_wav": _decode64(tts, tensors["decoder_codes"]),
            "tts_pad_embed": tts_pad(tts),
        }
        cp_codes, cp_logits = _cp_codes(tts, tensors)
        agree = {
            "ref_codes": torch.equal(item.ref_code.long(), tensors["ref_codes"]),
            "ref16_codes": torch.equal(item16.ref_code.long(), tensors["ref16_codes"]),
            "cp_codes": torch.equal(cp_codes, tensors["cp_codes"]),
        }
        margins = {
            "rvq": _argmin_margins_all(f32["rvq"] + f32["rvq16"], rvq + rvq16),
            "code_predictor": [
                _argmax_margin(a, b) for a, b in zip(f32["cp_logits"], cp_logits, strict=True)
            ],
            "talker": [],
        }
        for case in cases:
            rec = _run_case64(tts, case, tensors)
            key, rec32 = case.key, f32[case.key]
            codes = rec.codes[0].long()
            agree[f"{key}_codes"] = torch.equal(codes, tensors[f"{key}_codes"])
            if not agree[f"{key}_codes"]:
                continue  # no decision-by-decision pairing without the same path
            full = _decode64(tts, rec.decode_codes[0].long())
            values[f"{key}_audio"] = full[full.shape[0] - tensors[f"{key}_audio"].shape[0] :]
            values[f"{key}_prefill_embeds"] = rec.prefill_embeds[0]
            values[f"{key}_trailing_text"] = rec.trailing_text[0]
            values[f"{key}_prefill_logits"] = rec.talker_logits[0]
            values[f"{key}_past_hidden"] = rec.talker_hidden[0]
            pairs = zip(rec32.talker_logits, rec.talker_logits, strict=True)
            for step, (a, b) in enumerate(pairs):
                margins["talker"].append(
                    _argmax_margin(talker_choice_logits(a, step), talker_choice_logits(b, step))
                )
            for a, b in zip(rec32.cp_logits, rec.cp_logits, strict=True):
                margins["code_predictor"].append(_argmax_margin(a, b))
    fp32_error = {k: float(f"{_max_abs(tensors[k], v):.4g}") for k, v in values.items()}
    audio = {k: v.to(F64).contiguous() for k, v in values.items() if k.endswith(("_wav", "_audio"))}
    return {
        "codes_agree": agree,
        "fp32_error": fp32_error,
        "decision_margins": {k: _summary(v) for k, v in margins.items()},
        "audio": audio,
    }


def _argmin_margins_all(d32: list, d64: list) -> list[tuple[float, float]]:
    assert len(d32) == len(d64), (len(d32), len(d64))
    return [pair for a, b in zip(d32, d64, strict=True) for pair in _argmin_margins(a, b)]


def _run_case64(tts, case, tensors: dict):
    """The official greedy generate_voice_clone in float64 with the float32 golden voice."""
    icl = case.ref_text is not None
    prompt = VoiceClonePromptItem(
        ref_code=tensors["ref_codes"] if icl else None,
        ref_spk_embedding=tensors["speaker_embedding"].to(F64),
        x_vector_only_mode=not icl,
        icl_mode=icl,
        ref_text=case.ref_text,
    )
    with Capture(tts) as rec:
        tts.generate_voice_clone(
            text=case.text,
            language=case.language,
            voice_clone_prompt=[prompt],
            **greedy_kwargs(case),
        )
    return rec


def code_predictor_logits(talker, hidden: torch.Tensor, c0: torch.Tensor):
    """Official greedy code predictor -> (15 codes, the 15 logit rows it chose from)."""
    logits = []
    hooks = [
        h.register_forward_hook(lambda _m, _i, out: logits.append(out[0, -1].detach().clone()))
        for h in talker.code_predictor.lm_head
    ]
    embeds = torch.cat([hidden[None, None], talker.get_input_embeddings()(c0[None])], dim=1)
    try:
        out = talker.code_predictor.generate(
            inputs_embeds=embeds, max_new_tokens=15, do_sample=False, return_dict_in_generate=True
        )
    finally:
        for h in hooks:
            h.remove()
    return out.sequences[0].long(), logits


def _cp_codes(tts, tensors: dict):
    hidden = tensors["cp_past_hidden"].to(F64)
    return code_predictor_logits(tts.model.talker, hidden, tensors["cp_c0"])
