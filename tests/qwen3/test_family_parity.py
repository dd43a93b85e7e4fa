"""Acceptance: CustomVoice and VoiceDesign reproduce the official qwen-tts greedy output.

For every case of tools/oracle/family_cases.py (per type: non_streaming_mode True and False,
with and without `instruct`; CustomVoice also the dialect switch), our `preset_voice` /
`design_voice` + `generate(greedy=True, non_streaming_mode=...)` gives the official codes bit
for bit (official `generate_custom_voice` / `generate_voice_design`), and the prompt (prefill
embeddings and trailing text vectors), the first talker logits and hidden state, and the audio
within the float32 error model of tests/qwen3/conftest.py (the bound the Base parity tests use:
(1 + 4) x the golden's own float32 error E, and 4 E from the official run in pure float64).
Codes equality is portable: the oracle checks that the float64 official run picks the same
codes, every decision >= 73x twice its float32 error away from a tie (cases.json).
`stream` with small chunks gives the codes of `generate` and its audio within float32 rounding.

The prompt differences between the types that these cases verify (each by the prefill
parity of the cases named):
* speaker entry: a CustomVoice prompt carries the preset's row of the talker's codec input
  embedding, C(spk_id[name]), where Base carries the x-vector (every cv_ case); VoiceDesign
  carries none, its codec control column one entry shorter (every vd_ case);
* dialect: dylan with "auto" takes beijing_dialect's language id (cv instruct_nonstream), eric
  with "chinese" sichuan_dialect's (cv instruct_stream), dylan with "english" stays English
  (cv plain_stream); serena (no dialect) with "auto" keeps the no-language layout
  (cv plain_nonstream);
* instruct: T(`<|im_start|>user\\n{instruct}<|im_end|>\\n`) before the role positions (the
  instruct_ cases); none without it (the plain_ cases);
* non_streaming_mode True: all text in the prefill as T(text) + C(codec_pad), then tts_eos +
  C(codec_pad), tts_pad + C(codec_bos); trailing [tts_pad] (the _nonstream cases); False: the
  first text token with C(codec_bos), the rest one per frame then tts_eos (the _stream cases);
* the default of `non_streaming_mode` is True for both types (test_default_mode_is_the_official);
* Base in non_streaming_mode (tiny-a's x-vector and ICL cases): the x-vector prompt ends as
  above; the ICL part becomes [S + C(codec_pad)] ++ [K + tts_pad], trailing [tts_pad]
  (test_base_non_streaming_mode_matches_official).
"""

from __future__ import annotations

from functools import cache

import pytest
import torch

import tts_core

from .conftest import check_audio, check_fp32, fixture_path, fp32_pair_bound, load_goldens
from .test_end_to_end_parity import describe_codes

CHECKPOINTS = ("qwen3-tiny-cv", "qwen3-tiny-vd")
KEYS = ("plain_nonstream", "plain_stream", "instruct_nonstream", "instruct_stream")
CASES = [(name, key) for name in CHECKPOINTS for key in KEYS]


@cache
def _model(name: str):
    return tts_core.load_model(fixture_path(name), warm_chunks=())


def _voice(model, case: dict):  # noqa: ANN001
    if case["speaker"] is not None:
        return model.preset_voice(case["speaker"], instruct=case["instruct"])
    return model.design_voice(case["instruct"])


def _request(case: dict) -> dict:
    return {
        "language": case["language"],
        "non_streaming_mode": case["non_streaming_mode"],
        "greedy": True,
        "max_new_tokens": case["max_new_tokens"],
    }


@pytest.mark.parametrize(("name", "key"), CASES)
def test_prompt_matches_official(name: str, key: str) -> None:
    goldens = load_goldens(name)
    case, model = goldens.cases[key], _model(name)
    request = _request(case)
    prompt, _settings = model.plan(case["text"], _voice(model, case), **request)
    assert prompt.prefill.shape[1] == case["prefill_len"]
    assert prompt.trailing.shape[0] == case["trailing_len"]
    check_fp32(prompt.prefill[0], goldens, f"{key}_prefill_embeds")
    check_fp32(prompt.trailing, goldens, f"{key}_trailing_text")


@pytest.mark.parametrize("name", CHECKPOINTS)
def test_special_text_vectors_match_official(name: str) -> None:
    check_fp32(_model(name).special.pad, load_goldens(name), "tts_pad_embed")


@pytest.mark.parametrize(("name", "key"), CASES)
def test_prefill_logits_and_hidden_match_official(name: str, key: str) -> None:
    goldens = load_goldens(name)
    case, model = goldens.cases[key], _model(name)
    with torch.inference_mode():
        prompt, _ = model.plan(case["text"], _voice(model, case), **_request(case))
        caches = model.talker.new_caches(1, prompt.prefill.shape[1])
        logits, hidden = model.talker(prompt.prefill, caches, start=0)
    check_fp32(logits[0], goldens, f"{key}_prefill_logits")
    check_fp32(hidden[0], goldens, f"{key}_past_hidden")


@pytest.mark.parametrize(("name", "key"), CASES)
def test_generate_matches_official(name: str, key: str) -> None:
    goldens = load_goldens(name)
    case, model = goldens.cases[key], _model(name)
    result = model.generate(case["text"], _voice(model, case), **_request(case))
    codes, golden = torch.as_tensor(result.codes).long(), goldens[f"{key}_codes"]
    assert torch.equal(codes, golden), describe_codes(codes, golden)
    check_fp32(torch.as_tensor(result.audio), goldens, f"{key}_audio")
    check_audio(result.audio)
    assert result.stop_reason == case["stop_reason"]


@pytest.mark.parametrize(("name", "key"), CASES)
def test_small_chunk_stream_equals_generate(name: str, key: str) -> None:
    """Chunks of 2 then 5 frames: every boundary crosses the decoder's carried state; the
    stream's codes are generate's (one engine), its audio within float32 rounding of it and
    within the bound of the official."""
    goldens = load_goldens(name)
    case, model = goldens.cases[key], _model(name)
    voice, request = _voice(model, case), _request(case)
    whole = model.generate(case["text"], voice, **request)
    chunks = list(
        model.stream(case["text"], voice, first_chunk_frames=2, chunk_frames=5, **request)
    )
    assert [c.frames for c in chunks[:2]] == [2, 5]
    assert [c.final for c in chunks] == [False] * (len(chunks) - 1) + [True]
    audio = torch.cat([torch.as_tensor(c.audio) for c in chunks])
    assert torch.equal(torch.cat([c.codes for c in chunks]), torch.as_tensor(whole.codes))
    # the codec decodes other chunk shapes (2, 5, ... vs generate's 25): two float32
    # evaluations of one decoder, within 2 x 4 E of each other (conftest's error model)
    gap = float((audio - torch.as_tensor(whole.audio)).abs().max())
    assert gap <= fp32_pair_bound(goldens, f"{key}_audio"), gap
    assert chunks[-1].stop_reason == whole.stop_reason
    check_fp32(audio, goldens, f"{key}_audio")


@pytest.mark.parametrize("name", CHECKPOINTS)
def test_default_mode_is_the_official(name: str) -> None:
    """No non_streaming_mode: the official default of these types (True) -> its golden."""
    goldens = load_goldens(name)
    case, model = goldens.cases["instruct_nonstream"], _model(name)
    request = {k: v for k, v in _request(case).items() if k != "non_streaming_mode"}
    result = model.generate(case["text"], _voice(model, case), **request)
    assert torch.equal(torch.as_tensor(result.codes), goldens["instruct_nonstream_codes"])


def test_goldens_cover_both_modes_with_and_without_instruct() -> None:
    for name in CHECKPOINTS:
        goldens = load_goldens(name)
        seen = {
            (c["non_streaming_mode"], c["instruct"] is not None) for c in goldens.cases.values()
        }
        assert seen == {(True, True), (True, False), (False, True), (False, False)}
        assert all(goldens.meta["fp64_codes_agree"].values())
        for case in goldens.cases.values():
            assert goldens[f"{case['key']}_codes"].shape == (case["frames"], 16)


# --- Base in non_streaming_mode (official generate_voice_clone(..., non_streaming_mode=True)) --
# tiny-a's two cases with its golden voice (tests/fixtures/qwen3-tiny-a.nonstream.golden): the
# x-vector prompt ends like the other types' (all text + C(codec_pad), tts_eos, tts_pad +
# C(codec_bos)); the ICL part is [S + C(codec_pad)] ++ [K + tts_pad] with trailing [tts_pad].
BASE, BASE_NONSTREAM = "qwen3-tiny-a", "qwen3-tiny-a.nonstream"


@pytest.mark.parametrize("mode", ["icl", "xvec"])
def test_base_non_streaming_mode_matches_official(mode: str) -> None:
    from .conftest import golden_voice

    goldens, voice_goldens = load_goldens(BASE_NONSTREAM), load_goldens(BASE)
    case, model = goldens.cases[mode], _model(BASE)
    voice = golden_voice(voice_goldens, mode)
    request = {
        "language": case["language"],
        "greedy": True,
        "max_new_tokens": case["max_new_tokens"],
        "non_streaming_mode": True,
    }
    prompt, _ = model.plan(case["text"], voice, **request)
    assert prompt.prefill.shape[1] == case["prefill_len"] and prompt.trailing.shape[0] == 1
    check_fp32(prompt.prefill[0], goldens, f"{mode}_prefill_embeds")
    result = model.generate(case["text"], voice, **request)
    codes, golden = torch.as_tensor(result.codes).long(), goldens[f"{mode}_codes"]
    assert torch.equal(codes, golden), describe_codes(codes, golden)
    check_fp32(torch.as_tensor(result.audio), goldens, f"{mode}_audio")
    streaming = model.plan(case["text"], voice, **{**request, "non_streaming_mode": False})[0]
    assert streaming.prefill.shape != prompt.prefill.shape  # the two modes really differ
