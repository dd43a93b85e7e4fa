"""Forced alignment against the official (goldens `aligner_*`): from the official aligner's CTC
logits on the reference clip, the transcript's token positions and frame marks are equal."""

from __future__ import annotations

import math

import torch

from tts_core.models.tada.alignment import align_tokens, token_alignment
from tts_core.models.tada.tokenizer import TadaTokenizer

from .conftest import tensor


def test_alignment_matches_golden(tiny_folder, goldens):
    tokenizer = TadaTokenizer.from_folder(tiny_folder / "model")
    logits = tensor(goldens, "aligner_logits")[0]
    tokens = tensor(goldens, "aligner_text_tokens")[0]
    frames = math.ceil(goldens["prompt_audio"].shape[1] / 24000 * 50)
    positions, marks = token_alignment(logits, tokens, frames, tokenizer.eos_id)
    assert positions.tolist() == goldens["aligner_positions"][0].tolist()
    assert marks.tolist() == goldens["aligner_masks"][0].tolist()


def test_alignment_maximises_the_score():
    """On a small case the programme's choice is the best of all increasing assignments."""
    import itertools

    scores = torch.tensor(
        [[0.0, 5.0, 1.0], [3.0, 0.0, 2.0], [1.0, 4.0, 0.0], [0.0, 1.0, 6.0], [2.0, 0.0, 1.0]]
    )
    best = max(
        itertools.combinations(range(5), 3),
        key=lambda c: sum(float(scores[f, j]) for j, f in enumerate(c)),
    )
    assert align_tokens(scores) == list(best)


def test_aligner_logits_match_golden(tiny_folder, goldens):
    """The wav2vec2 CTC network on the reference clip (resampled to 16 kHz) within 5 E."""
    from tts_core.models.tada.checkpoint import load_aligner

    from .conftest import check_fp32

    tokenizer = TadaTokenizer.from_folder(tiny_folder / "model")
    aligner = load_aligner(tiny_folder / "codec", tokenizer.vocab_size)
    with torch.no_grad():
        logits = aligner.logits(tensor(goldens, "prompt_audio"))
    print(check_fp32(logits, goldens, "aligner_logits"))
