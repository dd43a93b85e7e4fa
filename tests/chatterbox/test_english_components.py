"""The English model's parts against the official chatterbox-tts 0.1.7 goldens on both tiny
English checkpoints: the text front end (exact ids), the T3 conditioning (perceiver over the
prompt's speech tokens, speaker and emotion positions), T3's raw logits of both CFG rows
teacher-forced on the golden's tokens, T3's free-running draws (exact), the regular CFM flow
(10 cosine steps with CFG) and HiFT. Float bounds: english_common.py (5 E, E from the oracle's
float64 rerun of the same step)."""

from __future__ import annotations

import numpy as np
import torch

from tts_core.models.chatterbox.english import spoken_tokens
from tts_core.models.chatterbox.english_t3 import (
    LLAMA3_ROPE,
    EnglishSampling,
    llama3_inverse_frequencies,
)

from .conftest import check_fp32
from .english_common import TEXTS, TOKENIZER_TEXTS, case, each_checkpoint, english_model, seeds


@each_checkpoint
def test_text_ids_exact(name):
    english_folder, english_goldens = case(name)
    tokenizer = english_model(english_folder).tokenizer
    for i, text in enumerate(TEXTS + TOKENIZER_TEXTS):
        assert tokenizer.encode(text) == english_goldens[f"text_ids_{i}"].tolist(), text


@each_checkpoint
def test_text_ids_carry_start_and_stop(name):
    english_folder, english_goldens = case(name)
    ids = english_model(english_folder).text_ids(TEXTS[0])
    assert ids[0].tolist() == english_goldens["t3_text_tokens"].tolist()
    assert int(ids[0, 0]) == 255 and int(ids[0, -1]) == 0


@each_checkpoint
def test_perceiver_and_conditioning(name):
    english_folder, english_goldens = case(name)
    model = english_model(english_folder)
    voice = model.builtin_voice
    exaggeration = float(english_goldens["meta_cond_exaggeration"])
    with torch.inference_mode():
        prompt = model.t3.speech_emb(voice.t3_prompt_tokens)
        prompt = prompt + model.t3.speech_pos_emb(voice.t3_prompt_tokens.shape[1], "cpu")
        perceiver = model.t3.cond_enc.perceiver(prompt)
    cond = model.t3.conditioning(voice.speaker_emb, voice.t3_prompt_tokens, exaggeration)
    assert cond.shape[1] == 34  # speaker + 32 perceiver queries + emotion
    check_fp32(perceiver[0], english_goldens, "t3_perceiver")
    check_fp32(cond[0], english_goldens, "t3_cond")


@each_checkpoint
def test_t3_logits_teacher_forced(name):
    """Both CFG rows' raw logits (prefill's last position, then one per step) fed the golden's
    tokens: a wrong logit shows here even where it does not flip a draw."""
    english_folder, english_goldens = case(name)
    model = english_model(english_folder)
    voice = model.builtin_voice
    cond = model.t3.conditioning(voice.speaker_emb, voice.t3_prompt_tokens, 0.5)
    ids = torch.from_numpy(english_goldens["t3_text_tokens"])[None]
    golden = english_goldens["t3_logits"]  # (steps, 2, V)
    forced = torch.from_numpy(english_goldens["t3_tokens"][: len(golden)])
    out = model.t3.generate(cond, ids, EnglishSampling(), None, forced=forced)
    check_fp32(torch.stack(out.logits), english_goldens, "t3_logits")


@each_checkpoint
def test_t3_draws_exact(name):
    english_folder, english_goldens = case(name)
    model = english_model(english_folder)
    voice = model.builtin_voice
    cond = model.t3.conditioning(voice.speaker_emb, voice.t3_prompt_tokens, 0.5)
    ids = torch.from_numpy(english_goldens["t3_text_tokens"])[None]
    generator = torch.Generator().manual_seed(seeds(english_goldens)["t3"])
    out = model.t3.generate(cond, ids, EnglishSampling(), generator)
    assert out.draws.tolist() == english_goldens["t3_tokens"].tolist()
    assert out.stop_reason == "eos" and int(out.draws[-1]) == 6562


@each_checkpoint
def test_flow_mel(name):
    english_folder, english_goldens = case(name)
    model = english_model(english_folder)
    tokens = torch.from_numpy(english_goldens["flow_tokens"])[None]
    generator = torch.Generator().manual_seed(seeds(english_goldens)["flow"])
    mel = model.tokens_to_mel(tokens, model.builtin_voice, generator)
    assert mel.shape[2] == 2 * tokens.shape[1]
    check_fp32(mel[0], english_goldens, "flow_mel")


@each_checkpoint
def test_hift_wav(name):
    english_folder, english_goldens = case(name)
    model = english_model(english_folder)
    mel = torch.from_numpy(english_goldens["flow_mel"])[None]
    generator = torch.Generator().manual_seed(seeds(english_goldens)["hift"])
    with torch.inference_mode():
        wav = model.hift.inference(mel, generator)
    check_fp32(wav[0], english_goldens, "hift_wav")


def test_spoken_tokens_is_drop_invalid_then_below_6561():
    draws = torch.tensor([5, 7000, 6561, 10, 8000, 20, 6562, 30])
    assert spoken_tokens(draws).tolist() == [10, 20]  # after the start id, before the stop id
    assert spoken_tokens(torch.tensor([1, 2, 6563])).tolist() == [1, 2]
    assert spoken_tokens(torch.tensor([6562])).tolist() == []


def test_llama3_rope_frequencies():
    """HF's llama3 scaling at the released head dim: high frequencies kept, the lowest divided
    by the factor 8, the middle band between."""
    base = 1.0 / (500000.0 ** (torch.arange(0, 64, 2).float() / 64))
    scaled = llama3_inverse_frequencies(64)
    wavelen = 2 * np.pi / base
    high = wavelen < LLAMA3_ROPE["original_max_position_embeddings"] / 4
    low = wavelen > LLAMA3_ROPE["original_max_position_embeddings"]
    assert torch.equal(scaled[high], base[high])
    assert torch.equal(scaled[low], base[low] / 8)
    middle = ~high & ~low
    assert bool(((scaled[middle] < base[middle]) & (scaled[middle] > base[middle] / 8)).all())
