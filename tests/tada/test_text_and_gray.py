"""Text normalisation and the Gray-coded durations against the official (goldens `gray_*`,
`prompt_normalized_text`; hume-tada's text.py behaviour on a few sentences written here from
its rules and checked with it in the oracle venv)."""

from __future__ import annotations

import torch

from tts_core.models.tada import gray_code
from tts_core.models.tada.text import normalize_text

from .conftest import tensor


def test_gray_code_matches_golden(tiny_folder, goldens):
    bits = goldens["gray_code"].shape[-1]
    assert torch.equal(
        gray_code.encode(tensor(goldens, "gray_values"), bits), tensor(goldens, "gray_code")
    )
    decoded = gray_code.decode(tensor(goldens, "gray_noisy"), bits)
    assert torch.equal(decoded, tensor(goldens, "gray_noisy_decoded"))
    assert torch.equal(
        gray_code.decode(tensor(goldens, "gray_code"), bits), tensor(goldens, "gray_values")
    )


def test_prompt_text_normalized_as_the_official(goldens):
    assert normalize_text("Hello there, this is a tiny test.") == str(
        goldens["prompt_normalized_text"]
    )


def test_normalize_rules():
    assert normalize_text("Please call Stella. Ask her!") == "Please call stella. Ask her!"
    assert normalize_text("“Well” — said he: (fine); ok…") == "Well, said he, fine. Ok..."
    assert normalize_text("a , b ?c") == "A, b?C"
