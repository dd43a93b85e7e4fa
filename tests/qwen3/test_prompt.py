"""Voice-clone prompt layout: prefill embeddings and trailing text equal the official ones.

Embedding rows are exact lookups; text rows go through the float32 text projection, so the bound
is (1 + 4) x the golden's float32 error E (tests/qwen3/conftest.py; E ~5e-7 prefill, ~1e-7 text).
"""

from __future__ import annotations

import pytest
import torch

from tts_core.models.qwen3_tts.model import Voice
from tts_core.models.qwen3_tts.prompt import codec_control_ids

from .conftest import check_fp32, golden_voice, shared_model


def _prompt(model, text: str, voice: Voice, language: str):
    with torch.inference_mode():
        return model._prompt(text, voice, language)


@pytest.mark.parametrize("mode", ["icl", "xvec"])
def test_prefill_and_trailing_equal_official(tiny_checkpoint, goldens, mode) -> None:
    case = goldens.cases[mode]
    prompt = _prompt(
        shared_model(tiny_checkpoint), case["text"], golden_voice(goldens, mode), case["language"]
    )
    assert prompt.prefill.shape[1] == case["prefill_len"]
    assert prompt.trailing.shape[0] == case["trailing_len"]
    check_fp32(prompt.prefill[0], goldens, f"{mode}_prefill_embeds")
    check_fp32(prompt.trailing, goldens, f"{mode}_trailing_text")


def test_xvector_layout_lengths(tiny_checkpoint, goldens) -> None:
    # auto: 3 role + 5 control/speaker/pad + 1 first text token; an explicit language adds one.
    model = shared_model(tiny_checkpoint)
    voice = golden_voice(goldens, "xvec")
    text = "One two three four."
    tokens = len(model.text_tokenizer.encode(text))
    auto = _prompt(model, text, voice, "auto")
    named = _prompt(model, text, voice, "German")
    assert auto.prefill.shape[1] == 9 and named.prefill.shape[1] == 10
    assert auto.trailing.shape[0] == tokens  # text tokens 1.. plus tts_eos
    assert auto.text_tokens == tokens
    assert torch.equal(auto.trailing, named.trailing)


def test_icl_puts_short_text_in_the_prefill(tiny_checkpoint, goldens) -> None:
    # Reference frames R: the ICL part is R + 1 long whatever the text length (when it fits).
    model = shared_model(tiny_checkpoint)
    voice = golden_voice(goldens, "icl")
    frames = voice.ref_codes.shape[0]
    prompt = _prompt(model, "Hi.", voice, "auto")
    assert prompt.prefill.shape[1] == 8 + frames + 1
    assert torch.allclose(prompt.trailing, model.special.pad[None])


def test_icl_long_text_spills_into_trailing(tiny_checkpoint, goldens) -> None:
    model = shared_model(tiny_checkpoint)
    voice = golden_voice(goldens, "icl")
    frames = voice.ref_codes.shape[0]
    text = "word " * (frames + 10)
    ref_tokens = len(model.text_tokenizer.encode(voice.ref_text))
    text_tokens = len(model.text_tokenizer.encode(text.strip()))
    prompt = _prompt(model, text.strip(), voice, "auto")
    assert prompt.prefill.shape[1] == 8 + frames + 1
    assert prompt.trailing.shape[0] == ref_tokens + text_tokens + 1 - (frames + 1)


def test_control_ids_come_from_the_config(tiny_checkpoint) -> None:
    config = shared_model(tiny_checkpoint).config
    talker = config.talker
    assert codec_control_ids(config, "Auto") == [2155, 2156, 2157]
    for name, lang_id in talker.codec_language_id.items():
        assert codec_control_ids(config, name.upper()) == [2154, 2156, lang_id, 2157]
    assert len(talker.codec_language_id) == 10
    with pytest.raises(ValueError, match="unsupported language"):
        codec_control_ids(config, "klingon")
