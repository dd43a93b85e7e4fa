"""Talker prefill against the official goldens, and the static KV cache against a full pass."""

from __future__ import annotations

import pytest
import torch

from .conftest import golden_voice, shared_model

TOLERANCE = 1e-4


@pytest.mark.parametrize("mode", ["icl", "xvec"])
def test_prefill_logits_and_hidden_match_official(tiny_checkpoint, goldens, mode) -> None:
    model = shared_model(tiny_checkpoint)
    case = goldens.cases[mode]
    with torch.inference_mode():
        prompt = model._prompt(case["text"], golden_voice(goldens, mode), case["language"])
        caches = model.talker.new_caches(1, prompt.prefill.shape[1])
        logits, hidden = model.talker(prompt.prefill, caches, start=0)
    assert logits.dtype == torch.float32 and logits.shape == (1, 3072)
    assert (logits[0] - goldens[f"{mode}_prefill_logits"]).abs().max() <= TOLERANCE
    assert (hidden[0] - goldens[f"{mode}_past_hidden"]).abs().max() <= TOLERANCE


def test_cached_steps_equal_one_full_pass(tiny_checkpoint) -> None:
    # Prefill 5 positions then 3 single steps through the static cache must give the same
    # last-position logits as running all 8 positions at once.
    model = shared_model(tiny_checkpoint)
    talker = model.talker
    hidden_size = talker.cfg.stack.hidden_size
    embeds = torch.randn(1, 8, hidden_size, generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        full_logits, full_hidden = talker(embeds, talker.new_caches(1, 8), start=0)
        caches = talker.new_caches(1, 16)  # larger than needed: unused slots must not leak in
        talker(embeds[:, :5], caches, start=0)
        for position in range(5, 8):
            logits, hidden = talker(embeds[:, position : position + 1], caches, start=position)
    assert torch.allclose(logits, full_logits, atol=1e-5)
    assert torch.allclose(hidden, full_hidden, atol=1e-5)


def test_cache_overflow_is_an_error(tiny_checkpoint) -> None:
    talker = shared_model(tiny_checkpoint).talker
    embeds = torch.zeros(1, 3, talker.cfg.stack.hidden_size)
    with torch.inference_mode(), pytest.raises(RuntimeError, match="overflow"):
        talker(embeds, talker.new_caches(1, 2), start=0)


def test_special_text_vectors_match_official(tiny_checkpoint, goldens) -> None:
    pad = shared_model(tiny_checkpoint).special.pad
    assert (pad - goldens["tts_pad_embed"]).abs().max() <= TOLERANCE
