"""The LM and its flow head against the official goldens (float32 error model, 5 E):
* `lm_*`: embeddings of a random teacher-forced sequence, a 5-position prefill (causal, from
  position 0) then one cached step per position (layers.Span over our KVCache, as the official
  forward_one_step over its DynamicCache): hidden states and logits (tied in a, untied in b);
* `head_*`: the flow head's velocity, and the 10-step log-SNR Euler solve with acoustic CFG 1.6
  on the cosine schedule from the stored noise and conditions."""

from __future__ import annotations

import torch

from tts_core.models.layers import Span
from tts_core.models.tada.checkpoint import load_lm
from tts_core.models.tada.flow_head import FlowOptions, solve

from .conftest import check_fp32, tensor

PREFILL = 5


def test_lm_prefill_and_steps_match_golden(tiny_folder, goldens):
    lm = load_lm(tiny_folder / "model")
    ids = tensor(goldens, "lm_in_ids")
    embeds = lm.embed(
        ids,
        tensor(goldens, "lm_in_acoustic"),
        tensor(goldens, "lm_in_masks"),
        tensor(goldens, "lm_in_before"),
        tensor(goldens, "lm_in_after"),
    )
    steps = ids.shape[1]
    caches = lm.new_caches(1, steps, torch.float32, "cpu")
    with torch.no_grad():
        hidden = [lm.hidden(embeds[:, :PREFILL], Span(caches, 0))]
        hidden += [lm.hidden(embeds[:, t : t + 1], Span(caches, t)) for t in range(PREFILL, steps)]
        hidden = torch.cat(hidden, dim=1)
        print(check_fp32(embeds, goldens, "lm_embeds"))
        print(check_fp32(hidden, goldens, "lm_hidden"))
        print(check_fp32(lm.logits(hidden), goldens, "lm_logits"))


def test_flow_head_matches_golden(tiny_folder, goldens):
    lm = load_lm(tiny_folder / "model")
    x, t = tensor(goldens, "head_in_x"), tensor(goldens, "head_in_t")
    cond = tensor(goldens, "head_in_cond").squeeze(1)
    neg = tensor(goldens, "head_in_neg_cond").squeeze(1)
    with torch.no_grad():
        velocity = lm.prediction_head(x, t, lm.condition(cond))
        print(check_fp32(velocity, goldens, "head_velocity"))
        solved = solve(
            lm.prediction_head,
            tensor(goldens, "head_in_noise"),
            cond,
            neg,
            FlowOptions(),
            lm.cfg.acoustic_dim,
            lm.condition,
        )
        print(check_fp32(solved, goldens, "head_solved"))


def test_shared_llama3_frequencies_equal_chatterbox_english():
    """layers.llama3_inverse_frequencies with Chatterbox English's constants gives its
    (transformers-checked) frequencies bit for bit: one function for both Llamas."""
    from tts_core.models.chatterbox.english_t3 import llama3_inverse_frequencies as english
    from tts_core.models.layers import llama3_inverse_frequencies

    assert torch.equal(llama3_inverse_frequencies(64, 500000.0, 8.0, 1.0, 4.0, 8192), english(64))
