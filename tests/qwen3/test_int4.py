"""The 4-bit format (quant/int4.py), its kernel (models/native/int4_linear.c) and the code
predictor in 4 bits (models/qwen3_tts/int4.py).

The kernel computes Int8Linear's definition over the effective int8 weights m * w4, so it must
equal the torch path (torch._int_mm over those weights) bit for bit, and a row's output must not
depend on the other rows; the fallback where the kernel does not run gives the same numbers.
"""

from __future__ import annotations

import copy
import json
import math

import pytest
import torch

from tts_core.models import native
from tts_core.models.qwen3_tts import int4 as predictor_int4
from tts_core.models.qwen3_tts.model import load_model
from tts_core.quant.int4 import (
    GROUP,
    MULT_MAX,
    W4_MAX,
    Int4Linear,
    effective_int8,
    quantize_int4,
)
from tts_core.quant.linear import int8_matmul_available

from . import test_batching
from .conftest import fixture_path

pytestmark = pytest.mark.skipif(not int8_matmul_available(), reason="no int8 matmul here")
needs_kernel = pytest.mark.skipif(
    native.int4_linear() is None, reason="no C compiler, or no AVX-512 VNNI for the 4-bit kernel"
)
TINY = fixture_path("qwen3-tiny-a")
# (out, in): out not a multiple of 16 (padded block), one group, the code predictor's widest
SHAPES = [(40, 64), (16, 32), (48, 96), (256, 3072)]


@pytest.fixture
def fresh_kernel_lookup():
    native.int8_linear.cache_clear()
    yield
    native.int8_linear.cache_clear()


def _weight(out: int, inp: int, seed: int = 0) -> torch.Tensor:
    """Gaussian weights with one group 8x larger per row, so group scales differ."""
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(out, inp, generator=g) * 0.05
    w[:, :GROUP] *= 8
    return w


def _rows(count: int, width: int, seed: int = 1) -> torch.Tensor:
    """Rows over 6 decades of scale, one all zero: each row sets its own activation scale."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(count, width, generator=g) * torch.logspace(-3, 3, count)[:, None]
    if count > 2:
        x[1] = 0
    return x


@needs_kernel
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("bias", [False, True])
def test_the_kernel_equals_the_torch_path_bit_for_bit(shape, bias):
    out, inp = shape
    b = torch.randn(out) if bias else None
    layer = Int4Linear.from_float(_weight(out, inp), b)
    assert layer.fallback is None  # the kernel's packed layout
    for rows in (1, 3, 8, 11):  # every tile size and a tail
        x = _rows(rows, inp)
        assert torch.equal(layer(x), layer.forward_reference(x)), rows


@needs_kernel
def test_a_nan_row_gives_nan_as_the_torch_path_does():
    layer = Int4Linear.from_float(_weight(32, 64))
    x = _rows(3, 64)
    x[2, 7] = float("nan")
    torch.testing.assert_close(layer(x), layer.forward_reference(x), rtol=0, atol=0, equal_nan=True)
    assert layer(x)[2].isnan().all() and not layer(x)[:2].isnan().any()


@pytest.mark.parametrize("shape", SHAPES[:3])
def test_where_the_kernel_does_not_run_the_fallback_gives_the_same_numbers(
    shape, monkeypatch, fresh_kernel_lookup
):
    out, inp = shape
    w, x = _weight(out, inp), _rows(9, inp)
    here = Int4Linear.from_float(w)  # the kernel where it runs
    expected, weights = here(x), here.int8_weight()
    monkeypatch.setenv(native.ISA_ENV, "torch")
    native.int8_linear.cache_clear()
    assert native.int4_linear() is None
    fallback = Int4Linear.from_float(w)
    assert fallback.fallback is not None and fallback.fallback.kernel_isa is None
    assert torch.equal(fallback(x), expected)
    assert torch.equal(fallback.int8_weight(), weights)


@pytest.mark.parametrize("shape", SHAPES)
def test_a_rows_output_does_not_depend_on_the_batch(shape):
    out, inp = shape
    layer = Int4Linear.from_float(_weight(out, inp), torch.randn(out))
    x = _rows(11, inp)
    batched = layer(x)
    for r in range(len(x)):
        assert torch.equal(layer(x[r : r + 1]), batched[r : r + 1]), r


@needs_kernel
def test_the_packed_layout_gives_back_the_rounded_weights():
    w = _weight(40, 96)
    w4, mult, scale = quantize_int4(w)
    layer = Int4Linear(w4, mult, scale)
    back_w4, back_mult = layer.unpacked()
    assert torch.equal(back_w4, w4) and torch.equal(back_mult, mult)


def test_rounding_stays_within_half_a_step_of_the_multiplier_that_fits_each_group():
    """Per group, the chosen multiplier's squared error is at most the one that holds the
    group's largest weight without clipping (the search keeps the better of it and one less):
    <= GROUP * (step / 2)^2 with step = that multiplier * s_w."""
    w = _weight(64, 256)
    w4, mult, scale = quantize_int4(w)
    assert w4.min() >= -8 and w4.max() <= W4_MAX and mult.min() >= 1 and mult.max() <= MULT_MAX
    approx = effective_int8(w4, mult).float() * scale[:, None]
    err = (approx - w).pow(2).view(64, -1, GROUP).sum(dim=2)
    groups = w.view(64, -1, GROUP).abs().amax(dim=2)
    fits = (groups / (W4_MAX * scale[:, None])).ceil().clamp(1, MULT_MAX)
    assert (err <= GROUP * (fits * scale[:, None] / 2).pow(2) * (1 + 1e-5)).all()


# ------------------------------------------------------------------------------ the model
@pytest.fixture(scope="module")
def int4_model():
    return load_model(TINY, quantize="int4", warm_chunks=())


def test_quantize_int4_puts_the_code_predictor_in_4_bits(int4_model):
    layers = [m for m in int4_model.talker.code_predictor.modules() if isinstance(m, Int4Linear)]
    # the tiny checkpoint: only o_proj's inputs (4 heads x 16) are a multiple of GROUP
    assert len(layers) == int4_model.talker.cfg.code_predictor.stack.num_hidden_layers
    assert not any(isinstance(m, Int4Linear) for m in int4_model.talker.model.modules())
    assert "code predictor int4 asked for" in int4_model.format_decision
    assert int4_model.weight_format == "int8"


def test_the_4_bit_predictors_rows_do_not_depend_on_the_batch(int4_model):
    predictor = int4_model.talker.code_predictor
    hidden = predictor.model.norm.weight.shape[0]
    g = torch.Generator().manual_seed(3)
    past, c0 = torch.randn(4, hidden, generator=g), torch.randn(4, hidden, generator=g)
    logits = []

    def greedy(x):  # noqa: ANN001, ANN202
        logits.append(x.clone())
        return x.argmax(-1)

    batched = predictor.predict(past, c0, predictor.new_caches(4), greedy, by_row=True)
    batched_logits, logits[:] = torch.stack(logits), []
    for r in range(4):
        one = predictor.new_caches(1)  # by_row: the call the engine makes for one request too
        alone = predictor.predict(past[r : r + 1], c0[r : r + 1], one, greedy, by_row=True)
        assert torch.equal(alone, batched[r : r + 1])
        assert torch.equal(torch.stack(logits)[:, 0], batched_logits[:, r])
        logits[:] = []


def test_the_gate_finds_an_identical_predictor_in_full_agreement(int4_model):
    """The gate's measure itself: the model's own predictor (a copy) agrees on every code and
    gives the very same audio; the 4-bit one of the int8 model is measured on the same frames."""
    int8 = load_model(TINY, quantize="int8", warm_chunks=())
    same = copy.deepcopy(int8.talker.code_predictor)
    seen, frames = predictor_int4.compare_predictors(
        int8, {"same": same, "int4": int4_model.talker.code_predictor}, frames=12
    )
    count = len(frames)  # up to 12: the tiny model may stop earlier
    assert 0 < count <= 12 and frames.shape[1] == int8.talker.cfg.num_code_groups
    assert seen["same"].agreement == 1.0 and seen["same"].frames_equal == count
    assert seen["same"].codes == count * 15 and seen["same"].audio_snr_db == math.inf
    assert 0.0 <= seen["int4"].agreement <= 1.0 and seen["int4"].codes == count * 15


def test_auto_keeps_an_8_bit_predictor_that_stays_in_cache():
    model = load_model(TINY, quantize="auto", warm_chunks=())
    if model.quantization is None:
        pytest.skip("auto kept float here: no int8 to start 4 bits from")
    assert not any(isinstance(m, Int4Linear) for m in model.talker.modules())
    why = "stays in cache" if native.int4_linear() is not None else "no 4-bit kernel"
    assert why in model.format_decision


@needs_kernel
def test_auto_measures_the_gate_once_and_follows_it(monkeypatch, tmp_path):
    """With the size bound lifted, `auto` runs the gate on the tiny checkpoint, keeps its
    outcome, and a later load follows the kept outcome without measuring again."""
    monkeypatch.setenv("TTS_CORE_CACHE", str(tmp_path))
    monkeypatch.setattr(predictor_int4, "MIN_STREAMED_BYTES", 0)
    first = load_model(TINY, quantize="auto", warm_chunks=())
    if first.quantization is None:
        pytest.skip("auto kept float here: no int8 to start 4 bits from")
    (record,) = (tmp_path / "int4").iterdir()
    holds = json.loads(record.read_text())["holds"]
    four = any(isinstance(m, Int4Linear) for m in first.talker.code_predictor.modules())
    assert four == holds and "int4 against int8: greedy codes" in first.format_decision

    def never(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        raise AssertionError("measured again")

    monkeypatch.setattr(predictor_int4, "compare_predictors", never)
    second = load_model(TINY, quantize="auto", warm_chunks=())
    again = any(isinstance(m, Int4Linear) for m in second.talker.code_predictor.modules())
    assert again == holds and "(measured at an earlier load)" in second.format_decision


def test_eight_served_requests_with_the_4_bit_predictor_give_what_they_give_alone():
    """The served engine's batch invariance, checked by test_batching's own test, with the
    code predictor in 4 bits (the tiny checkpoint's o_proj layers: see above)."""
    test_batching.test_eight_requests_in_a_batch_give_what_they_give_alone("qwen3-tiny-a", "int4")
