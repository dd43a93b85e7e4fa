"""The CustomVoice and VoiceDesign checkpoints: loading, the Python contract, batching.

Parity with the official outputs is tests/qwen3/test_family_parity.py; here: the checkpoint
types load from the released layout with strict keys (no speaker encoder), speaker ids and
the dialect switch come from the checkpoint's own config, a voice only works on the type it
was made for, `non_streaming_mode` defaults to the official default of the type, the 0.6B
CustomVoice refuses an instruction the official would drop silently, and a preset / designed
row gives the same bits alone and in a batch with other rows of its model.
"""

from __future__ import annotations

import json
import shutil
from functools import cache
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

import tts_core
from tts_core.backends.qwen3 import served_loop
from tts_core.models.checkpoint import CheckpointError
from tts_core.models.qwen3_tts.config import ConfigError, parse_config
from tts_core.models.qwen3_tts.prompt import codec_control_ids
from tts_core.models.qwen3_tts.serving.fed import FedRequest

from .conftest import check_audio, fixture_path, load_ref_clip, served_weights, weight_formats

CV, VD, BASE = "qwen3-tiny-cv", "qwen3-tiny-vd", "qwen3-tiny-a"
TEXT = "Preset and designed voices, served like cloned ones."


@cache
def model(name: str, weights: str = "none"):
    return tts_core.load_model(fixture_path(name), quantize=weights, warm_chunks=())


def _copy(tmp_path: Path, name: str) -> Path:
    """An editable copy: the JSON and model files copied, the rest linked."""
    source, folder = fixture_path(name), tmp_path / name
    for path in source.rglob("*"):
        if path.is_dir():
            continue
        target = folder / path.relative_to(source)
        target.parent.mkdir(parents=True, exist_ok=True)
        if path.suffix == ".json" or path.name == "model.safetensors":
            shutil.copy(path, target)
        else:
            target.symlink_to(path)
    return folder


def _edit_config(folder: Path, edit) -> None:  # noqa: ANN001
    path = folder / "config.json"
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))


# --- loading ------------------------------------------------------------------------------------


def test_types_load_without_a_speaker_encoder():
    cv, vd = model(CV), model(VD)
    assert (cv.model_type, vd.model_type) == ("custom_voice", "voice_design")
    assert cv.speaker_encoder is None and vd.speaker_encoder is None
    raw = json.loads((fixture_path(CV) / "config.json").read_text())["talker_config"]
    assert cv.speakers == tuple(raw["spk_id"]) and vd.speakers == () and model(BASE).speakers == ()
    # the dialect ids are chosen by a speaker, never named as a language (as the official)
    assert "beijing_dialect" in raw["codec_language_id"]
    assert not any("dialect" in language for language in cv.languages)


def test_a_speaker_encoder_in_a_custom_voice_file_fails_the_strict_key_check(tmp_path):
    folder = _copy(tmp_path, CV)
    path = folder / "model.safetensors"
    state = load_file(str(path))
    state["speaker_encoder.fc.weight"] = torch.zeros(2, 2, dtype=torch.bfloat16)
    save_file(state, str(path))
    with pytest.raises(CheckpointError, match="unexpected speaker_encoder"):
        tts_core.load_model(folder, warm_chunks=())


def test_a_base_file_declared_custom_voice_is_refused(tmp_path):
    folder = _copy(tmp_path, BASE)
    _edit_config(folder, lambda d: d.update(tts_model_type="custom_voice"))
    with pytest.raises(CheckpointError, match="custom_voice"):
        tts_core.load_model(folder, warm_chunks=())


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda t: t["spk_is_dialect"].update(serena="martian_dialect"), "spk_is_dialect"),
        (lambda t: t["spk_id"].update(serena=5000), "spk_id"),
        (lambda t: t["spk_id"].update(serena="3066"), "spk_id"),
    ],
)
def test_bad_speaker_tables_are_config_errors(edit, message):
    data = json.loads((fixture_path(CV) / "config.json").read_text())
    edit(data["talker_config"])
    with pytest.raises(ConfigError, match=message):
        parse_config(data)


# --- speaker ids and the dialect switch come from the checkpoint ---------------------------------


def test_dialect_switch_follows_the_config():
    cfg = model(CV).config
    ids = cfg.talker.codec_language_id
    assert ids["english"] in codec_control_ids(cfg, "english", "dylan")  # no switch for English
    assert ids["beijing_dialect"] in codec_control_ids(cfg, "auto", "dylan")
    assert ids["sichuan_dialect"] in codec_control_ids(cfg, "chinese", "eric")
    assert codec_control_ids(cfg, "auto", "serena") == codec_control_ids(cfg, "auto")


def test_speaker_rows_and_dialects_are_read_from_the_checkpoint(tmp_path):
    """Give serena eric's row and dialect in config.json: her prompt becomes eric's."""
    folder = _copy(tmp_path, CV)

    def edit(data: dict) -> None:
        talker = data["talker_config"]
        talker["spk_id"]["serena"] = talker["spk_id"]["eric"]
        talker["spk_is_dialect"]["serena"] = talker["spk_is_dialect"]["eric"]

    _edit_config(folder, edit)
    edited = tts_core.load_model(folder, warm_chunks=())
    as_eric = edited.plan(TEXT, edited.preset_voice("Serena"), "auto")[0]  # case-insensitive
    eric = model(CV).plan(TEXT, model(CV).preset_voice("eric"), "auto")[0]
    serena = model(CV).plan(TEXT, model(CV).preset_voice("serena"), "auto")[0]
    assert torch.equal(as_eric.prefill, eric.prefill)
    assert not torch.equal(serena.prefill, eric.prefill)


# --- the Python contract --------------------------------------------------------------------------


def test_voices_work_on_their_own_type_only():
    cv, vd, base = model(CV), model(VD), model(BASE)
    audio, rate = load_ref_clip()
    cloned = base.create_voice(audio, rate)
    preset, designed = cv.preset_voice("serena"), vd.design_voice("A calm voice.")
    assert (preset.mode, designed.mode, cloned.mode) == ("preset", "design", "xvector")
    for target, voice in ((cv, cloned), (cv, designed), (vd, preset), (base, preset)):
        with pytest.raises(ValueError, match="cannot be used with this"):
            target.plan(TEXT, voice)
    with pytest.raises(ValueError, match="create_voice clones"):
        cv.create_voice(audio, rate)
    with pytest.raises(ValueError, match="preset_voice needs a 'custom_voice'"):
        base.preset_voice("serena")
    with pytest.raises(ValueError, match="design_voice needs a 'voice_design'"):
        cv.design_voice("A calm voice.")
    with pytest.raises(ValueError, match="unknown speaker 'vivian'"):
        cv.preset_voice("vivian")


def test_empty_instruct_is_no_instruct():
    cv, vd = model(CV), model(VD)
    assert cv.preset_voice("dylan", instruct="").instruct is None
    assert vd.design_voice("").instruct is None and vd.design_voice(None).instruct is None
    with_none = cv.plan(TEXT, cv.preset_voice("dylan"))[0].prefill
    assert torch.equal(cv.plan(TEXT, cv.preset_voice("dylan", ""))[0].prefill, with_none)
    longer = cv.plan(TEXT, cv.preset_voice("dylan", "Whisper."))[0].prefill
    assert longer.shape[1] > with_none.shape[1]


@pytest.mark.parametrize("name", [CV, VD])
def test_non_streaming_mode_defaults_to_the_official_default(name):
    """CustomVoice and VoiceDesign: True (the whole text in the prompt, trailing = [tts_pad])."""
    m = model(name)
    voice = m.preset_voice("serena") if name == CV else m.design_voice("A calm voice.")
    default = m.plan(TEXT, voice)[0]
    whole = m.plan(TEXT, voice, non_streaming_mode=True)[0]
    fed = m.plan(TEXT, voice, non_streaming_mode=False)[0]
    assert torch.equal(default.prefill, whole.prefill) and whole.trailing.shape[0] == 1
    assert fed.trailing.shape[0] == fed.text_tokens  # text 1.. then tts_eos, one per frame
    with pytest.raises(ValueError, match="non_streaming_mode"):
        m.plan(TEXT, voice, non_streaming_mode="yes")


def test_base_default_stays_streaming_text():
    """Base: the official default False (generate_voice_clone), for both clone modes."""
    base = model(BASE)
    audio, rate = load_ref_clip()
    for voice in (base.create_voice(audio, rate), base.create_voice(audio, rate, ref_text="Hi.")):
        default = base.plan(TEXT, voice)[0]
        assert torch.equal(
            default.prefill, base.plan(TEXT, voice, non_streaming_mode=False)[0].prefill
        )
        whole = base.plan(TEXT, voice, non_streaming_mode=True)[0]
        assert whole.trailing.shape[0] == 1 and whole.prefill.shape != default.prefill.shape


def test_a_0b6_custom_voice_refuses_an_instruction_instead_of_dropping_it(tmp_path):
    """The official generate_custom_voice sets instruct None when tts_model_size is "0b6"."""
    folder = _copy(tmp_path, CV)
    _edit_config(folder, lambda d: d.update(tts_model_size="0b6"))
    small = tts_core.load_model(folder, warm_chunks=())
    assert not small.instruct_supported and model(CV).instruct_supported
    with pytest.raises(ValueError, match="drops `instruct`"):
        small.preset_voice("serena", instruct="Speak angrily.")
    plain = small.preset_voice("serena")  # no instruction: fine
    assert (
        small.plan(TEXT, plain)[0].prefill.shape
        == model(CV).plan(TEXT, model(CV).preset_voice("serena"))[0].prefill.shape
    )
    smuggled = model(CV).preset_voice("serena", "Speak angrily.")  # made on the 1.7B
    with pytest.raises(ValueError, match="does not follow instructions"):
        small.plan(TEXT, smuggled)


# --- one batch engine ------------------------------------------------------------------------------

WEIGHTS = weight_formats("the int8 layers' batch invariance (bit for bit) for these types is")


def _rows(name: str, weights: str) -> list[tuple[str, object, dict]]:
    """Rows of one model in both text modes, with and without instruct, sampled and greedy."""
    m = model(name, weights)
    if name == CV:
        voices = [
            m.preset_voice("serena"),
            m.preset_voice("dylan", "Slowly, warmly."),
            m.preset_voice("eric", "用愤怒的语气"),
            m.preset_voice("dylan"),
        ]
    else:
        voices = [
            m.design_voice("A deep voice."),
            m.design_voice(None),
            m.design_voice("Bright and fast."),
            m.design_voice("A whisper."),
        ]
    texts = [TEXT, "Short one.", "今天天气很好。", "A third text, a little longer than the others."]
    return [
        (
            texts[i],
            voice,
            {
                "max_new_tokens": 12,
                "seed": 7 + i,
                "greedy": i == 0,
                "non_streaming_mode": i % 2 == 0,
                "language": ("auto", "chinese")[i == 2],
            },
        )
        for i, voice in enumerate(voices)
    ]


def _collect(chunks) -> tuple[torch.Tensor, np.ndarray, list]:  # noqa: ANN001
    chunks = list(chunks)
    return torch.cat([c.codes for c in chunks]), np.concatenate([c.audio for c in chunks]), chunks


@pytest.mark.parametrize("weights", WEIGHTS)
@pytest.mark.parametrize("name", [CV, VD])
def test_rows_give_the_same_bits_alone_and_batched(name, weights):
    """A CustomVoice / VoiceDesign model serves only its own voices (a Base voice is refused),
    so a row's batch partners are rows of its own type: other speakers, instructions, text
    modes, seeds; chunked prefill (5 positions a step) mixes prompt and decode steps."""
    m = model(name, weights)
    rows = _rows(name, weights)
    alone = [_collect(m.stream(text, voice, **kw)) for text, voice, kw in rows]
    scheduler = served_loop(m, max_batch=4, prefill_chunk=5)
    try:
        streams = [scheduler.submit(text, voice, **kw) for text, voice, kw in rows]
        batched = [_collect(stream) for stream in streams]
    finally:
        scheduler.close()
    for i, (got, expected) in enumerate(zip(batched, alone, strict=True)):
        assert torch.equal(got[0], expected[0]), f"row {i}: codes differ"
        assert np.array_equal(got[1], expected[1]), f"row {i}: audio differs"
        check_audio(got[1])
    assert max(c.batch_size for got in batched for c in got[2]) > 1  # they ran together


def test_served_format_loads_for_both_types():
    """quantize='auto'/'int8' calibrates with `silent_voice`: a voice of the model's own type."""
    for name in (CV, VD):
        m = model(name, served_weights())
        assert m.silent_voice().model_type == m.model_type


@pytest.mark.parametrize("name", [CV, VD])
def test_fed_text_gives_the_whole_texts_chunks_in_streaming_text_mode(name):
    """Text fed in pieces (serving/fed.py) is always the streaming-text layout: its chunks
    equal those of the whole text with non_streaming_mode=False; True is refused."""
    from .test_text_feed import _feed_and_collect

    m = model(name, served_weights())
    voice = m.preset_voice("dylan", "Slowly.") if name == CV else m.design_voice("A calm voice.")
    text = "Fed a word at a time, as a language model would send it."
    kwargs = {"max_new_tokens": 24, "seed": 3}
    scheduler = served_loop(m, max_batch=2, prefill_chunk=7)
    try:
        whole = _collect(scheduler.submit(text, voice, non_streaming_mode=False, **kwargs))
        words = text.split(" ")
        pieces = [word + " " for word in words[:-1]] + words[-1:]  # joined: the text
        fed = _feed_and_collect(scheduler, voice, text, pieces, kwargs, pause=True)
        assert torch.equal(fed[0], whole[0]) and np.array_equal(fed[1], whole[1])
        with pytest.raises(ValueError, match="non_streaming_mode=False"):
            FedRequest(scheduler, voice, non_streaming_mode=True)
    finally:
        scheduler.close()
