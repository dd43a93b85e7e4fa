"""Talker prefill against the official goldens, and the static KV cache against a full pass.

Bounds from the float32 error model of tests/qwen3/conftest.py: against a golden (1 + 4) E, E its
own float32 error (prefill logits ~3e-6, hidden ~4e-7, tts_pad ~6e-8); our cached steps against
our full pass (two float32 evaluations of the same talker) 2 x 4 E of the prefill golden."""

from __future__ import annotations

import pytest
import torch

from .conftest import check_fp32, fp32_pair_bound, golden_voice, load_goldens, shared_model


@pytest.mark.parametrize("mode", ["icl", "xvec"])
def test_prefill_logits_and_hidden_match_official(tiny_checkpoint, goldens, mode) -> None:
    model = shared_model(tiny_checkpoint)
    case = goldens.cases[mode]
    with torch.inference_mode():
        prompt = model._prompt(case["text"], golden_voice(goldens, mode), case["language"])
        caches = model.talker.new_caches(1, prompt.prefill.shape[1])
        logits, hidden = model.talker(prompt.prefill, caches, start=0)
    assert logits.dtype == torch.float32 and logits.shape == (1, 3072)
    check_fp32(logits[0], goldens, f"{mode}_prefill_logits")
    check_fp32(hidden[0], goldens, f"{mode}_past_hidden")


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
    goldens = load_goldens(tiny_checkpoint.name)
    assert (logits - full_logits).abs().max() <= fp32_pair_bound(goldens, "xvec_prefill_logits")
    assert (hidden - full_hidden).abs().max() <= fp32_pair_bound(goldens, "xvec_past_hidden")


def test_cache_overflow_is_an_error(tiny_checkpoint) -> None:
    talker = shared_model(tiny_checkpoint).talker
    embeds = torch.zeros(1, 3, talker.cfg.stack.hidden_size)
    with torch.inference_mode(), pytest.raises(RuntimeError, match="overflow"):
        talker(embeds, talker.new_caches(1, 2), start=0)


def test_special_text_vectors_match_official(tiny_checkpoint, goldens) -> None:
    pad = shared_model(tiny_checkpoint).special.pad
    check_fp32(pad, goldens, "tts_pad_embed")
