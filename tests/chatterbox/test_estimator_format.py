"""S3Gen's estimator format chosen by `auto` (tts_core/models/chatterbox/estimator_format.py) on
the tiny Turbo checkpoints: the gate refuses a format that fails it, the chosen format's mel is
within its gate of float32 and a stream approximates the whole pass as in float32, the
decision is saved once and read back, and a format is taken only where the speed verdict says
it is faster. The verdict is injected (`timer`): nothing here depends on timing.

Every test has its own cache folder ($TTS_CORE_CACHE = a temp folder)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from tts_core.models.chatterbox import estimator_format as ef
from tts_core.models.chatterbox.chunking import StreamChunking
from tts_core.models.chatterbox.model import ChatterboxTurboModel
from tts_core.quant import store
from tts_core.quant.linear import Int8Linear, sqnr_db

from .conftest import FIXTURES
from .test_streaming import GEN_TEXT, STREAM_SNR_DB, snr_db

TINY_A = FIXTURES / "chatterbox-turbo-tiny-a"
HERE = ef.candidate_formats()

pytestmark = pytest.mark.skipif(not HERE, reason="no int8 or bf16 path on this CPU")


def verdict(**ms: float):  # noqa: ANN201
    """A timer giving fixed ms a call (float32 10 unless given)."""
    return lambda estimator, inputs, layers: {"float32": 10.0, **ms}


@pytest.fixture(autouse=True)
def cache(monkeypatch, tmp_path):  # noqa: ANN201
    monkeypatch.setenv("TTS_CORE_CACHE", str(tmp_path))
    monkeypatch.delenv(store.ENV, raising=False)
    return tmp_path / store.FOLDER / ef.DECISIONS_FILE


def float_model() -> ChatterboxTurboModel:
    return ChatterboxTurboModel.from_pretrained(TINY_A)  # quantize None: all float32


def floats_of(model: ChatterboxTurboModel) -> dict[str, nn.Linear]:
    return ef.projections(model.flow.decoder.estimator)


def test_a_forced_bound_keeps_every_float_module():
    model = float_model()
    before = floats_of(model)
    report = ef.choose_estimator_format(model, "auto", verdict(int8=1.0, bfloat16=1.0), 200.0)
    assert report.chosen == "float32" and "no format keeps the mel >= 200 dB" in report.decision
    after = floats_of(model)
    assert after.keys() == before.keys() and all(after[k] is before[k] for k in before)
    assert ef.estimator_format(model.flow.decoder.estimator) == "float32"


@pytest.mark.skipif("int8" not in HERE, reason="no int8 path")
def test_a_perturbed_layer_fails_the_gate(monkeypatch):
    """int8 with one projection's weights scaled by 1.5 (that layer's output at 6 dB SQNR)
    is refused; the other format is judged on its own."""
    real = ef.CONVERTERS["int8"]
    first = next(iter(floats_of(float_model())))

    def broken(linear: nn.Linear) -> nn.Module:
        if linear is floats_of_model[first]:
            return Int8Linear(linear.weight * 1.5, linear.bias)
        return real(linear)

    model = float_model()
    floats_of_model = floats_of(model)
    monkeypatch.setitem(ef.CONVERTERS, "int8", broken)
    report = ef.choose_estimator_format(model, "auto", verdict(int8=1.0, bfloat16=5.0))
    assert report.mel_snr_db["int8"] < ef.MIN_MEL_SNR_DB
    assert report.chosen == ("bfloat16" if "bfloat16" in HERE else "float32")


@pytest.mark.parametrize("fmt", HERE)
def test_the_chosen_format_is_within_its_gate_and_streams_as_float32_does(fmt):
    """The chosen format's mel holds MIN_MEL_SNR_DB against float32 on the calibration pass
    and on a generated clip's mel, and streaming stays within test_streaming's bound of the
    whole pass in that format (both run the converted estimator)."""
    model = float_model()
    reference = ef.calibration_mel(model)
    seed = 14
    whole_float = model.generate(GEN_TEXT, seed=seed, stream_noise=True)
    others = {f: 20.0 for f in HERE if f != fmt}
    report = ef.choose_estimator_format(model, "auto", verdict(**{fmt: 1.0}, **others))
    assert report.chosen == fmt and ef.estimator_format(model.flow.decoder.estimator) == fmt
    assert sqnr_db(reference, ef.calibration_mel(model)) >= ef.MIN_MEL_SNR_DB
    assert report.mel_snr_db[fmt] >= ef.MIN_MEL_SNR_DB
    whole = model.generate(GEN_TEXT, seed=seed, stream_noise=True)
    assert torch.equal(whole.tokens, whole_float.tokens)  # T3 untouched
    # the clip's audio against float32's, same tokens and noise: measured int8 63.3-69.3 dB,
    # bfloat16 76.0-81.8 (tiny-a/b, seeds 1, 3, 14); held to the mel's gate
    assert snr_db(whole_float.audio, whole.audio) >= ef.MIN_MEL_SNR_DB
    # stream vs whole in the format: measured as float32's to 0.1 dB (38.9-48.6 dB)
    chunks = list(model.stream(GEN_TEXT, seed=seed, chunking=StreamChunking()))
    audio = np.concatenate([c.audio for c in chunks])
    assert audio.shape == whole.audio.shape
    assert snr_db(whole.audio, audio) >= STREAM_SNR_DB


def test_a_format_is_taken_only_where_it_is_faster(cache):
    slower = {f: 11.0 for f in HERE}
    model = float_model()
    report = ef.choose_estimator_format(model, "auto", verdict(**slower))
    assert report.chosen == "float32" and "faster" in report.decision
    assert ef.estimator_format(model.flow.decoder.estimator) == "float32"
    cache.unlink()  # the float32 decision was saved: decide again
    ranked = {f: 2.0 + i for i, f in enumerate(reversed(HERE))}  # the last candidate fastest
    model = float_model()
    assert ef.choose_estimator_format(model, "auto", verdict(**ranked)).chosen == HERE[-1]


def test_the_tiny_checkpoints_are_not_timed_and_stay_float32():
    """Without a verdict the test checkpoints (calls cost Python, not FLOPs) stay float32: what
    every parity test's `auto` load loaded before."""
    model = ChatterboxTurboModel.from_pretrained(TINY_A, quantize="auto")
    assert model.estimator_format.chosen == "float32"
    assert "too small to time" in model.estimator_format.decision
    assert "S3Gen" not in model.format_decision  # T3's, as before


def test_none_and_int8_leave_the_estimator_float32():
    for mode in (None, "none", "int8"):
        model = ChatterboxTurboModel.from_pretrained(TINY_A, quantize=mode)
        assert model.estimator_format is None
        assert ef.estimator_format(model.flow.decoder.estimator) == "float32"


def test_the_decision_is_saved_and_read_back(cache, monkeypatch):
    fmt = HERE[0]
    first = float_model()
    report = ef.choose_estimator_format(first, "auto", verdict(**{f: 1.0 for f in HERE}))
    assert report.saved_in is None and cache.is_file()

    def forbidden(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        raise AssertionError("decided again although a saved decision exists")

    monkeypatch.setattr(ef, "decide", forbidden)
    second = float_model()
    loaded = ef.choose_estimator_format(second, "auto")
    assert loaded.saved_in == str(cache) and loaded.chosen == report.chosen == fmt
    assert loaded.mel_snr_db == report.mel_snr_db and loaded.decision == report.decision
    assert ef.estimator_format(second.flow.decoder.estimator) == fmt
    a, b = first.generate(GEN_TEXT, seed=3), second.generate(GEN_TEXT, seed=3)
    assert np.array_equal(a.audio, b.audio)


def test_auto_names_the_kept_format_after_t3s(monkeypatch):
    """Through from_pretrained: the decision follows T3's in format_decision (the backend's
    weight_format_reason, /v1/models) where a format is kept."""
    monkeypatch.setattr(ef, "MIN_TIMED_WEIGHTS", 0)
    monkeypatch.setattr(ef, "timed_call_ms", verdict(**{f: 1.0 for f in HERE}))
    model = ChatterboxTurboModel.from_pretrained(TINY_A, quantize="auto")
    assert model.estimator_format.chosen != "float32"
    assert model.format_decision.endswith(model.estimator_format.described)
    assert "; S3Gen estimator " in model.format_decision


def test_slower_is_timed_again_before_it_is_believed():
    """A first verdict of "slower" (a busy moment) is measured again; each format keeps its
    best time of the two."""
    verdicts = [{f: 11.0 for f in HERE}, {f: 1.0 for f in HERE}]
    calls = []

    def timer(estimator, inputs, layers):  # noqa: ANN001, ANN202
        calls.append(1)
        return {"float32": 10.0, **verdicts[len(calls) - 1]}

    model = float_model()
    report = ef.choose_estimator_format(model, "auto", timer)
    assert len(calls) == 2 and report.chosen in HERE
    assert all(report.call_ms[f] == 1.0 for f in HERE)


def test_the_timer_times_every_format_and_leaves_float32():
    """The real timer (its figures only checked for being times): the estimator comes back
    with its own float32 modules."""
    model = float_model()
    estimator, calls = model.flow.decoder.estimator, []
    ef.calibration_mel(model, calls)
    floats = floats_of(model)
    layers = {"float32": floats} | {f: ef.converted(floats, f) for f in HERE}
    ms = ef.timed_call_ms(estimator, calls[0], layers)
    assert ms.keys() == layers.keys() and all(0 < v < float("inf") for v in ms.values())
    assert all(floats_of(model)[k] is floats[k] for k in floats)
