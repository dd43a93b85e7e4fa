"""Turbo's T3 int8 saved once, like Qwen3-TTS's (tts_core/quant/store.py): the first int8 /
auto start calibrates and saves; the second reads the file (logged), with no calibration, speed
check or rounding, and its T3 and its audio are the first start's bit for bit. An `auto` float
decision is remembered too.

Every test has its own cache folder ($TTS_CORE_CACHE = a temp folder)."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest
import torch

from tts_core.models import native
from tts_core.models.chatterbox import quant
from tts_core.models.chatterbox.config import t3_file
from tts_core.models.chatterbox.model import ChatterboxTurboModel
from tts_core.quant import quantize as toolkit
from tts_core.quant import speed, store
from tts_core.quant.linear import Int8Linear, int8_matmul_available

from .conftest import FIXTURES

TINY_A = FIXTURES / "chatterbox-turbo-tiny-a"
TEXT = "Hello there, this is a tiny test. [chuckle] Okay"

pytestmark = pytest.mark.skipif(
    native.int8_linear() is None and not int8_matmul_available(),
    reason="no int8 matmul on this CPU: nothing int8 to save",
)


@pytest.fixture
def cache(monkeypatch, tmp_path) -> Path:
    """An empty cache of this test's own; the folder the int8 files go to."""
    monkeypatch.setenv("TTS_CORE_CACHE", str(tmp_path))
    monkeypatch.delenv(store.ENV, raising=False)
    return tmp_path / store.FOLDER


@pytest.fixture
def calibrations(monkeypatch) -> list[int]:
    """Counts the teacher-forced calibration runs (the real ones run)."""
    calls: list[int] = []
    real = quant.calibrate

    def counted(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(quant, "calibrate", counted)
    return calls


def _forbidden(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
    raise AssertionError("quantized again although a saved T3 exists")


def _forbid_quantizing(monkeypatch) -> None:
    for module, name in ((toolkit, "quantize"), (speed, "speed_check"), (speed, "measure_speed")):
        monkeypatch.setattr(module, name, _forbidden)


def _assert_same_t3(first: ChatterboxTurboModel, second: ChatterboxTurboModel) -> None:
    """Every T3 tensor equal (dtype and bits), the same module types in the same places."""
    a, b = first.t3.state_dict(), second.t3.state_dict()
    assert sorted(a) == sorted(b)
    for key, value in a.items():
        assert value.dtype == b[key].dtype and torch.equal(value, b[key]), key
    types = {name: type(m).__name__ for name, m in first.t3.named_modules()}
    assert types == {name: type(m).__name__ for name, m in second.t3.named_modules()}


def test_the_second_start_reads_the_saved_t3_bit_for_bit(cache, calibrations, monkeypatch, caplog):
    first = ChatterboxTurboModel.from_pretrained(TINY_A, quantize="int8")
    report = first.t3_quantization
    assert calibrations and report.applied and report.saved_in is None
    (path,) = store.saved_files(cache)
    assert path.name.startswith(store.file_sha256(TINY_A / t3_file(TINY_A), None)[:12])
    calibrations.clear()
    _forbid_quantizing(monkeypatch)
    caplog.set_level(logging.INFO, logger=store.__name__)
    second = ChatterboxTurboModel.from_pretrained(TINY_A, quantize="int8")
    loaded = second.t3_quantization
    assert calibrations == [] and loaded.saved_in == str(path)
    assert loaded.to_json() == report.to_json()  # SQNR, logits SNR, decision: from the file
    assert f"quantize: {report.decision} (saved in {path} at an earlier load)" in caplog.text
    assert second.format_decision == f"{first.format_decision} (saved in {path} at an earlier load)"
    assert quant.t3_weight_format(second) == "int8"
    assert any(isinstance(m, Int8Linear) for m in second.t3.modules())
    _assert_same_t3(first, second)
    a, b = first.generate(TEXT, seed=5), second.generate(TEXT, seed=5)
    assert torch.equal(a.tokens, b.tokens) and np.array_equal(a.audio, b.audio)


def test_a_float_decision_of_auto_is_remembered(cache, calibrations, monkeypatch):
    """`auto` keeping float32 (here: the bound set above every layer) is saved too: the next
    start neither calibrates nor rounds, and says what the first start decided."""
    monkeypatch.setattr(quant, "MIN_SQNR_DB", 200.0)
    first = ChatterboxTurboModel.from_pretrained(TINY_A, quantize="auto")
    assert first.t3_quantization is None and first.format_decision.startswith("kept float32: ")
    assert calibrations == [1]
    (path,) = store.saved_files(cache)
    calibrations.clear()
    _forbid_quantizing(monkeypatch)
    second = ChatterboxTurboModel.from_pretrained(TINY_A, quantize="auto")
    assert calibrations == [] and second.t3_quantization is None
    assert quant.t3_weight_format(second) == "float32"
    assert second.format_decision == f"{first.format_decision} (saved in {path} at an earlier load)"


def test_the_key_names_the_files_t3_is_computed_from(cache):
    """The T3 weights, the calibration voice (conds.pt), the tokenizer that reads the
    calibration text and the sizes: a change in any of them is another file."""
    opened = store.Int8Store.open(quant.T3Int8, TINY_A, torch.float32, None, False)
    named = set(opened.key["checkpoint"])
    assert {t3_file(TINY_A), "conds.pt", "vocab.json", "merges.txt"} <= named
    assert named == {
        name for name in quant.T3Int8.identity_files(TINY_A) if (TINY_A / name).is_file()
    }
