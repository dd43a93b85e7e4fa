"""Robustness of the goldens: does the official model give the same codes in float64?

Every golden code comes from an argmax/argmin (talker, code predictor, Mimi RVQ). If the
official model loaded in float64 picks the very same codes as in float32, no decision sits
within float32 rounding of a tie, so a correct float32 reimplementation (which differs from
the official one only in rounding) must reproduce them exactly.
"""

from __future__ import annotations

from pathlib import Path

import torch
from build_talker import run_case
from qwen_tts import Qwen3TTSModel


@torch.no_grad()
def fp64_agreement(folder: Path, cases, ref_audio, clip16_path: Path, tensors: dict) -> dict:
    """{golden key: True when the float64 official run gives the same codes}."""
    tts = Qwen3TTSModel.from_pretrained(str(folder), dtype=torch.float64)
    item = tts.create_voice_clone_prompt(ref_audio=(ref_audio, 24000), ref_text="x")[0]
    item16 = tts.create_voice_clone_prompt(ref_audio=str(clip16_path), ref_text="x")[0]
    result = {
        "ref_codes": torch.equal(item.ref_code.long(), tensors["ref_codes"]),
        "ref16_codes": torch.equal(item16.ref_code.long(), tensors["ref16_codes"]),
        "cp_codes": torch.equal(_cp_codes(tts, tensors), tensors["cp_codes"]),
    }
    for case in cases:
        _wav, rec = run_case(tts, case, ref_audio)
        result[f"{case.key}_codes"] = torch.equal(rec.codes[0].long(), tensors[f"{case.key}_codes"])
    return result


def _cp_codes(tts, tensors: dict) -> torch.Tensor:
    talker = tts.model.talker
    hidden = tensors["cp_past_hidden"].double()
    c0 = tensors["cp_c0"]
    embeds = torch.cat([hidden[None, None], talker.get_input_embeddings()(c0[None])], dim=1)
    out = talker.code_predictor.generate(
        inputs_embeds=embeds, max_new_tokens=15, do_sample=False, return_dict_in_generate=True
    )
    return out.sequences[0].long()
