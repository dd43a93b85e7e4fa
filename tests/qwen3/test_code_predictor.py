"""Code predictor: 15 greedy passes per frame give the official codes.

Exact equality is portable: every golden choice has a float64 top-2 gap >= 143 x twice the
float32 logit error (cases.json "decision_margins"; tests/fixtures/README.md).
"""

from __future__ import annotations

import torch

from .conftest import TINY_CHECKPOINTS, fixture_path, shared_model


def _argmax(logits: torch.Tensor) -> torch.Tensor:
    return logits.argmax(dim=-1)


def _predict(model, goldens) -> torch.Tensor:
    talker = model.talker
    predictor = talker.code_predictor
    with torch.inference_mode():
        c0_embed = talker.codec_embed(goldens["cp_c0"])  # (1, H)
        past_hidden = goldens["cp_past_hidden"][None]  # (1, H)
        return predictor.predict(past_hidden, c0_embed, predictor.new_caches(1), _argmax)[0]


def test_codes_match_official(tiny_checkpoint, goldens) -> None:
    codes = _predict(shared_model(tiny_checkpoint), goldens)
    assert codes.shape == (15,)
    assert torch.equal(codes, goldens["cp_codes"])


def test_reused_cache_gives_the_same_codes(tiny_checkpoint, goldens) -> None:
    # The per-frame cache is reused without clearing: stale entries must never be read.
    model = shared_model(tiny_checkpoint)
    predictor = model.talker.code_predictor
    caches = predictor.new_caches(1)
    with torch.inference_mode():
        noise = torch.randn(1, model.talker.cfg.stack.hidden_size)
        predictor.predict(noise, noise, caches, _argmax)  # fill the cache with other values
        c0_embed = model.talker.codec_embed(goldens["cp_c0"])
        codes = predictor.predict(goldens["cp_past_hidden"][None], c0_embed, caches, _argmax)
    assert torch.equal(codes[0], goldens["cp_codes"])


def test_fixtures_cover_both_predictor_layouts() -> None:
    """Both branches of the talker -> predictor projection are loaded and checked against the
    goldens above: tiny-a's equal widths (no projection in its file) and tiny-b's 24 -> 16. A
    model that built the other branch would not load (the strict key check: missing or
    unexpected small_to_mtp_projection keys), and one that applied it wrongly would miss the
    golden codes."""
    kinds = set()
    for name in TINY_CHECKPOINTS:
        projection = shared_model(fixture_path(name)).talker.code_predictor.small_to_mtp_projection
        kinds.add(type(projection).__name__)
    assert kinds == {"Identity", "Linear"}
