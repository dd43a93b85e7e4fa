"""`--quantize auto` decides by speed as well as accuracy: int8 is served only where it is faster
than the float layers on this CPU (quant/speed.py's speed_check, timed at load and cached) and every
layer holds the SQNR bound. The timing is forced here (measure_speed monkeypatched); the tiny
fixtures are below MIN_TIMED_BYTES, so each test that wants them timed lowers it."""

from __future__ import annotations

import json
import logging
import math

import pytest
from torch import nn

from tts_core.models import native
from tts_core.models.qwen3_tts import quantize as quantize_module
from tts_core.models.qwen3_tts.model import load_model
from tts_core.models.qwen3_tts.quantize import Qwen3Int8
from tts_core.quant import quantize as toolkit
from tts_core.quant import speed
from tts_core.quant.linear import Int8Linear
from tts_core.quant.speed import SpeedCheck

from .conftest import fixture_path, needs_int8

TINY = fixture_path("qwen3-tiny-a")


def _check(int8_ms: tuple[float, float], float_ms: tuple[float, float] = (2.0, 4.0)) -> SpeedCheck:
    """A forced measurement: ms at 1 and 8 rows."""
    return SpeedCheck(
        "native test",
        "float32",
        dict(zip((1, 8), int8_ms, strict=True)),
        dict(zip((1, 8), float_ms, strict=True)),
    )


@pytest.fixture
def timed(monkeypatch, tmp_path):
    """The tiny models are timed too, with an empty cache; `timed(check)` makes every
    measurement return `check` and counts the measurements (the list it returns)."""
    monkeypatch.setattr(speed, "MIN_TIMED_BYTES", 0)
    monkeypatch.setenv("TTS_CORE_CACHE", str(tmp_path))

    def force(check: SpeedCheck) -> list[int]:
        calls: list[int] = []

        def measure(model, repeats=speed.SPEED_REPEATS):  # noqa: ANN001, ANN202
            calls.append(1)
            return check

        monkeypatch.setattr(speed, "measure_speed", measure)
        return calls

    return force


def _no_calibration(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
    raise AssertionError("calibrated although int8 was already ruled out")


def _all_float(model) -> bool:  # noqa: ANN001
    layers = [*model.talker.model.layers, *model.talker.code_predictor.model.layers]
    return all(isinstance(layer.self_attn.q_proj, nn.Linear) for layer in layers) and not any(
        isinstance(m, Int8Linear) for m in model.talker.modules()
    )


@pytest.mark.parametrize("int8_ms", [(3.0, 5.0), (1.0, 5.0), (3.0, 1.0)])
def test_auto_serves_float_where_int8_is_slower_at_any_row_count(
    int8_ms, timed, monkeypatch, caplog
):
    timed(_check(int8_ms))
    monkeypatch.setattr(quantize_module, "calibrate", _no_calibration)
    caplog.set_level(logging.INFO, logger=toolkit.__name__)
    model = load_model(TINY, quantize="auto")
    assert model.quantization is None and model.weight_format == "float32" and _all_float(model)
    assert "kept float32: int8 is slower here" in caplog.text
    report = quantize_module.quantize_model(load_model(TINY), min_sqnr_db=30.0)
    assert not report.applied and not report.speed.int8_faster
    assert report.decision.startswith("kept float32: int8 is slower here (int8 on native test")
    assert "1 row " in report.decision and "8 rows " in report.decision


@needs_int8("auto's choice of int8 where it is faster is")
def test_auto_serves_int8_where_it_is_faster_and_holds_the_sqnr_bound(timed, caplog):
    calls = timed(_check((1.0, 3.0)))
    caplog.set_level(logging.INFO, logger=toolkit.__name__)
    model = load_model(TINY, quantize="auto")
    report = model.quantization
    assert model.weight_format == "int8" and report.applied and calls == [1]
    assert report.speed.int8_faster and report.min_sqnr_db >= quantize_module.MIN_SQNR_DB
    assert report.decision.startswith("int8: every layer >= 30 dB SQNR")
    assert "faster here (int8 on native test vs float32: 1 row 1.0 vs 2.0 ms" in report.decision
    assert report.decision in caplog.text


@needs_int8("auto's SQNR bound after a favourable timing is")
def test_auto_serves_float_where_int8_is_faster_but_inaccurate(timed, monkeypatch):
    timed(_check((1.0, 3.0)))
    monkeypatch.setattr(quantize_module, "MIN_SQNR_DB", 200.0)
    assert load_model(TINY, quantize="auto").weight_format == "float32"
    report = quantize_module.quantize_model(load_model(TINY), min_sqnr_db=200.0)
    assert not report.applied and report.speed.int8_faster
    assert "dB SQNR < 200 dB" in report.decision


@needs_int8("quantize='int8' is")
def test_asking_for_int8_does_not_time_it(timed):
    calls = timed(_check((9.0, 9.0)))  # slower: would keep float under auto
    model = load_model(TINY, quantize="int8")
    assert model.weight_format == "int8" and calls == []
    assert model.quantization.speed is None and model.quantization.decision == "int8: asked for"


@needs_int8("auto on a model too small to time is")
def test_a_model_too_small_to_time_is_decided_by_sqnr_alone(monkeypatch, tmp_path):
    monkeypatch.setenv("TTS_CORE_CACHE", str(tmp_path))
    monkeypatch.setattr(speed, "measure_speed", _no_calibration)
    model = load_model(TINY, quantize="auto")
    assert model.weight_format == "int8" and model.quantization.speed is None
    assert "not timed" in model.quantization.decision


def test_the_measurement_is_cached_per_cpu_kernel_torch_and_model(timed, monkeypatch, tmp_path):
    calls = timed(_check((3.0, 5.0)))
    model = load_model(TINY)
    first = speed.speed_check(Qwen3Int8(model))
    measured = [1] * (1 + speed.SPEED_RETRIES)  # "slower" is measured again first
    assert calls == measured and first.source == "measured"
    again = speed.speed_check(Qwen3Int8(model))
    cache = tmp_path / speed.SPEED_CACHE_FILE
    assert calls == measured and again.source == f"cached in {cache}"
    assert (again.int8_ms, again.float_ms, again.kernel) == (
        first.int8_ms,
        first.float_ms,
        first.kernel,
    )
    (key,) = json.loads(cache.read_text())
    assert {"cpu", "kernel", "torch", "threads", "dtype", "shapes"} <= set(json.loads(key))
    monkeypatch.setattr(speed, "cpu_model", lambda: "another CPU")
    speed.speed_check(Qwen3Int8(model))
    assert calls == measured * 2 and len(json.loads(cache.read_text())) == 2
    cache.write_text("{not json")  # a damaged cache: measured again, rewritten
    speed.speed_check(Qwen3Int8(model))
    assert calls == measured * 3 and len(json.loads(cache.read_text())) == 1


def test_an_unwritable_cache_still_decides(timed, monkeypatch):
    calls = timed(_check((3.0, 5.0)))
    monkeypatch.setenv("TTS_CORE_CACHE", "/dev/null/cache")
    model = load_model(TINY)
    assert not speed.speed_check(Qwen3Int8(model)).int8_faster
    measured = [1] * (1 + speed.SPEED_RETRIES)  # "slower" is measured again first
    assert not speed.speed_check(Qwen3Int8(model)).int8_faster and calls == measured * 2


def test_the_real_measurement_times_both_formats_at_each_row_count():
    """measure_speed itself (not forced) on a tiny model: every number there and positive,
    and the kernel named as Int8Linear will use it."""
    model = load_model(TINY)
    check = speed.measure_speed(Qwen3Int8(model), repeats=1)
    kernel = native.int8_linear()
    assert check.kernel == ("torch._int_mm" if kernel is None else f"native {kernel.isa.name}")
    assert check.float_dtype == "float32"
    for ms in (check.int8_ms, check.float_ms):
        assert set(ms) == set(Qwen3Int8.speed_rows)
        assert all(math.isfinite(v) and v > 0 for v in ms.values())
    assert _all_float(model)  # timing changes nothing in the model


def test_a_slow_measurement_is_measured_again_and_each_best_kept(timed, monkeypatch):
    """Other work on the machine only adds time: a first measurement where int8 looked slower
    (a busy machine) is repeated, each format keeps its best, and int8 wins if it really is
    faster; nothing slower is cached from one noisy measurement."""
    timed(_check((3.0, 5.0)))
    checks = iter([_check((300.0, 500.0)), _check((1.0, 3.0))])
    monkeypatch.setattr(speed, "measure_speed", lambda model, repeats=5: next(checks))
    check = speed.speed_check(Qwen3Int8(load_model(TINY)))
    assert check.int8_faster and check.int8_ms == {1: 1.0, 8: 3.0}
