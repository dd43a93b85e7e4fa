"""The upstream streaming pull request's two generate() fixes, behind the official behaviour
(GenerateOptions.joint_text, min_trim_frames; both off by default, which test_generate.py holds
to the official goldens):

* joint tokenization: the transcript and the text as one string with a space; the transcript's
  own tokens come first unchanged (its alignment to the clip still holds), the sequence decodes
  to "transcript text" (the official one glues them: "test.Hello"), and where the seam's tokens
  differ the generation reads them;
* the leading-silence trim at least `min_trim_frames` frames: the audio is the official audio
  with the extra frames' samples cut from its start, bit for bit (the decode is the same), and
  model.stream drops the same samples (same length as generate)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tts_core.models.tada.flow_head import FlowOptions
from tts_core.models.tada.generate import (
    FRAME_RATE,
    SAMPLE_RATE,
    GenerateOptions,
    Generation,
    leading_silence,
    text_tokens,
)
from tts_core.models.tada.model import TadaModel
from tts_core.models.tada.text import normalize_text

from .test_generate import TEXT, prompt_of

SEAM_TEXTS = ["Hello there.", ".Hello", "these things", TEXT]
OPTIONS = GenerateOptions(flow=FlowOptions(noise_temperature=0.5))


@pytest.fixture(scope="module")
def models() -> dict:
    return {}


def model_of(models: dict, folder) -> TadaModel:  # noqa: ANN001
    if folder not in models:
        models[folder] = TadaModel.from_folders(folder / "model", folder / "codec")
    return models[folder]


@pytest.mark.parametrize("text", SEAM_TEXTS)
def test_joint_tokens_keep_the_transcript_and_the_space(tiny_folder, goldens, models, text):
    tokenizer = model_of(models, tiny_folder).tokenizer
    transcript = str(goldens["prompt_normalized_text"])
    own = tokenizer.encode(transcript)
    separate = text_tokens(tokenizer, transcript, text, joint=False)
    joint = text_tokens(tokenizer, transcript, text, joint=True)
    assert separate == own + tokenizer.encode(text)  # the official
    assert joint[: len(own)] == own
    assert tokenizer.decode(separate) == transcript + text
    assert tokenizer.decode(joint) == f"{transcript} {text}"
    assert joint != separate


def test_joint_text_reaches_the_generation(tiny_folder, goldens, models):
    """The LM's input sequence carries the joint tokens after the unchanged prefix and
    transcript; the acoustic prompt part is laid out as before; the generation runs to audio."""
    model, voice = model_of(models, tiny_folder), prompt_of(goldens)
    text = normalize_text(TEXT)
    official = Generation(model.lm, model.tokenizer, voice, text, OPTIONS)
    fixed = Generation(
        model.lm, model.tokenizer, voice, text, GenerateOptions(flow=OPTIONS.flow, joint_text=True)
    )
    transcript = len(model.tokenizer.encode(voice.text))
    assert not torch.equal(official.inputs.ids, fixed.inputs.ids)
    width = official.inputs.ids.shape[1] - len(model.tokenizer.encode(text)) - 5
    assert torch.equal(official.inputs.ids[:, :width], fixed.inputs.ids[:, :width])
    assert width > transcript
    assert torch.equal(official.inputs.acoustic, fixed.inputs.acoustic)
    assert torch.equal(official.inputs.before, fixed.inputs.before)
    joint = GenerateOptions(flow=OPTIONS.flow, joint_text=True)
    audio = model.generate(voice, TEXT, joint, seed=15)
    assert audio.size > 0 and np.isfinite(audio).all()


def test_trim_clamp_arithmetic():
    frame = SAMPLE_RATE // FRAME_RATE  # 480 samples
    assert leading_silence(torch.tensor([2, 7])) == 2 * frame  # official: the first duration
    assert leading_silence(torch.tensor([2, 7]), 5) == 5 * frame  # clamped up to 100 ms
    assert leading_silence(torch.tensor([9, 7]), 5) == 9 * frame  # longer: unchanged


def test_min_trim_cuts_more_of_the_same_audio(tiny_folder, goldens, models):
    """With the clamp above the first token's duration the audio is the official audio less
    the extra frames' samples at its start, bit for bit; model.stream cuts the same."""
    model, voice = model_of(models, tiny_folder), prompt_of(goldens)
    official = model.generate(voice, TEXT, OPTIONS, seed=15)
    first = Generation(
        model.lm,
        model.tokenizer,
        voice,
        normalize_text(TEXT),
        OPTIONS,
        torch.Generator().manual_seed(15),
    )
    first.prefill()
    before = first.next_frame().before
    clamp = max(before + 2, 5)
    options = GenerateOptions(flow=OPTIONS.flow, min_trim_frames=clamp)
    clamped = model.generate(voice, TEXT, options, seed=15)
    cut = (clamp - before) * SAMPLE_RATE // FRAME_RATE
    assert clamped.tobytes() == official[cut:].tobytes()
    streamed = np.concatenate([c.audio for c in model.stream(voice, TEXT, options, seed=15)])
    assert streamed.shape == clamped.shape
