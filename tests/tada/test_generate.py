"""Whole seeded generations against the official `generate()` (goldens `gen_*`, `extra_*`), from
the same encoded prompt (the official encoder's output, stored): the input sequence, every
output token (forced and sampled) and every duration equal; the acoustic vectors and the audio
within the float32 error model (5 E, E from the official float64 rerun of the whole
generation), the audio the same length. `extra` continues 3 steps past the text (sampled
tokens). Noise temperature 0.5 as the goldens (make_goldens.GEN_OPTIONS: the random tiny flow
head needs it)."""

from __future__ import annotations

import pytest
import torch

from tts_core.models.tada.checkpoint import load_decoder, load_lm
from tts_core.models.tada.flow_head import FlowOptions
from tts_core.models.tada.generate import (
    GenerateOptions,
    Prompt,
    expand_for_decoder,
    generate,
    leading_silence,
)
from tts_core.models.tada.text import normalize_text
from tts_core.models.tada.tokenizer import TadaTokenizer

from .conftest import check_fp32, tensor

TEXT = "Please call Stella. Ask her to bring these things."  # make_goldens.GEN_TEXT
SEEDS = {"gen": 15, "extra": 16}
EXTRA_STEPS = {"gen": 0, "extra": 3}


def prompt_of(goldens) -> Prompt:
    return Prompt(
        tensor(goldens, "prompt_token_values")[0],
        tensor(goldens, "prompt_token_positions")[0],
        str(goldens["prompt_normalized_text"]),
        int(goldens["prompt_audio_len"][0]),
    )


@pytest.mark.parametrize("case", ["gen", "extra"])
def test_generation_matches_official(tiny_folder, goldens, case):
    lm = load_lm(tiny_folder / "model")
    tokenizer = TadaTokenizer.from_folder(tiny_folder / "model")
    decoder = load_decoder(tiny_folder / "codec")
    options = GenerateOptions(
        flow=FlowOptions(noise_temperature=0.5), extra_steps=EXTRA_STEPS[case]
    )
    generator = torch.Generator().manual_seed(SEEDS[case])
    with torch.no_grad():
        out = generate(lm, tokenizer, prompt_of(goldens), normalize_text(TEXT), options, generator)
        assert out.output_ids.tolist() == goldens[f"{case}_output_ids"].tolist()
        assert out.time_before.tolist() == goldens[f"{case}_time_before"].tolist()
        print(check_fp32(out.acoustic, goldens, f"{case}_acoustic"))
        expanded, masks = expand_for_decoder(out.encoded, out.time_before[0])
        wav = decoder.decode(expanded, masks)[0, 0, leading_silence(out.time_before[0]) :]
        print(check_fp32(wav, goldens, f"{case}_audio"))


def test_input_sequence_matches_official(tiny_folder, goldens):
    from tts_core.models.tada.generate import build_inputs

    lm = load_lm(tiny_folder / "model")
    tokenizer = TadaTokenizer.from_folder(tiny_folder / "model")
    inputs = build_inputs(tokenizer, lm, prompt_of(goldens), normalize_text(TEXT), 5)
    assert inputs.ids.tolist() == goldens["gen_input_ids"].tolist()
