"""8-bit layers: exact error bounds, rows independent of their batch, accuracy on the tiny
checkpoints (fixture-only checks: random tiny weights, see benchmarks/int8_accuracy.py for
the real-size figures), and the load_model switch.

The int8 layers need an int8 matmul: where the CPU has none, their tests skip and say what goes
unchecked; the switch's tests run everywhere ("auto" then keeps the float model)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from tts_core.models.layers import Span
from tts_core.models.qwen3_tts import quantize as quantize_module
from tts_core.models.qwen3_tts.model import load_model
from tts_core.quant.linear import Int8Linear, sqnr_db

from .conftest import int8_available, needs_int8

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from int8_accuracy import compare  # noqa: E402


@needs_int8("Int8Linear's shapes, bias, dtype and all-zero rows are")
def test_output_shape_bias_and_zero_rows():
    layer = Int8Linear(torch.randn(24, 40), torch.randn(24))
    x = torch.randn(3, 5, 40)
    x[1, 2] = 0  # an all-zero row quantizes to zeros, not 0/0
    y = layer(x)
    assert y.shape == (3, 5, 24) and y.dtype == torch.float32 and torch.isfinite(y).all()
    assert torch.equal(y[1, 2], layer.bias)
    assert layer(x.bfloat16()).dtype == torch.bfloat16


@needs_int8("Int8Linear's rounding bound is")
def test_error_is_within_the_rounding_bound():
    """|y - x W^T| <= sum_j (|x_j| s_w/2 + |W_j| s_x/2 + s_x s_w/4): each factor is off by at
    most half its quantization step, and the int32 accumulation is exact. The float reference
    adds its own rounding, far below (1e-4 relative covers it)."""
    g = torch.Generator().manual_seed(0)
    w, x = torch.randn(64, 256, generator=g), torch.randn(8, 256, generator=g) * 3
    layer = Int8Linear(w)
    s_w = (w.abs().amax(1) / 127)[None, :]  # (1, out)
    s_x = x.abs().amax(1, keepdim=True) / 127  # (rows, 1)
    bound = (x.abs() @ torch.ones(256, 64)) * s_w / 2 + (w.abs().sum(1))[None] * s_x / 2
    bound = bound + 256 * s_x * s_w / 4
    error = (layer(x) - F.linear(x, w)).abs()
    assert (error <= bound * (1 + 1e-4) + 1e-5).all()
    assert sqnr_db(F.linear(x, w), layer(x)) > 30


@needs_int8("Int8Linear's per-row independence is")
def test_a_row_is_bit_identical_alone_and_inside_a_batch_of_8():
    """Activations are quantized per row and int32 sums are exact, so nothing of the other
    rows reaches a row: the property continuous batching needs (issue: batch invariance)."""
    g = torch.Generator().manual_seed(1)
    layer = Int8Linear(torch.randn(512, 1024, generator=g) * 0.02)
    rows = torch.randn(8, 1024, generator=g) * torch.logspace(-2, 2, 8)[:, None]  # mixed scales
    batch = layer(rows)
    for i in range(8):
        assert torch.equal(layer(rows[i : i + 1])[0], batch[i])


@needs_int8("the int8 talker stack's batch invariance is")
def test_a_quantized_layer_stack_is_batch_invariant(tiny_checkpoint: Path):
    model = load_model(tiny_checkpoint, quantize="int8")
    stack = model.talker.model
    g = torch.Generator().manual_seed(2)
    hidden = model.config.talker.stack.hidden_size
    x = torch.randn(8, 5, hidden, generator=g) * torch.logspace(-1, 1, 8)[:, None, None]
    with torch.inference_mode():
        batch = stack(x, Span(stack.new_caches(8, 8, x.dtype, x.device)), model.talker.rope)
        for i in range(8):
            caches = stack.new_caches(1, 8, x.dtype, x.device)
            alone = stack(x[i : i + 1], Span(caches), model.talker.rope)
            assert torch.equal(alone[0], batch[i])


# The tiny checkpoints measured (float vs int8, teacher-forced 60 frames, this AMD EPYC):
# layer SQNR >= 39.5 dB, logits SQNR 37-49 dB, min cosine >= 0.9991, argmax agreement >= 0.96.
# Integer parts are exact on any CPU and float rounding (~1e-7 relative) is far below the
# quantization noise (~1e-2 relative), so these bounds leave ~2x (6 dB) and hold on any x86.
MIN_LOGITS_SQNR_DB = 30.0
MIN_COSINE = 0.995
MIN_ARGMAX_AGREEMENT = 0.9


@needs_int8("the int8 model's accuracy (SQNR, cosine, argmax) is")
def test_accuracy_on_the_tiny_checkpoints(tiny_checkpoint: Path):
    float_model = load_model(tiny_checkpoint)
    int8_model = load_model(tiny_checkpoint, quantize="int8")
    report = int8_model.quantization
    heads = len(int8_model.talker.code_predictor.lm_head)
    # tiny-b has a talker -> predictor projection (24 -> 16), quantized where it holds the bound
    projection = isinstance(int8_model.talker.code_predictor.small_to_mtp_projection, Int8Linear)
    assert projection == ("code_predictor.small_to_mtp_projection" in report.layer_sqnr_db)
    assert projection == isinstance(
        float_model.talker.code_predictor.small_to_mtp_projection, torch.nn.Linear
    )
    assert report.applied and len(report.layer_sqnr_db) == heads + projection + 4 * (
        len(int8_model.talker.model.layers) + len(int8_model.talker.code_predictor.model.layers)
    )
    assert report.min_sqnr_db >= quantize_module.MIN_SQNR_DB
    result = compare(float_model, int8_model, frames=60)
    for part in ("talker", "code_predictor"):
        assert result[f"{part}_logits_sqnr_db"] >= MIN_LOGITS_SQNR_DB, result
        assert result[f"{part}_logits_min_cosine"] >= MIN_COSINE, result
        assert result[f"{part}_argmax_agreement"] >= MIN_ARGMAX_AGREEMENT, result


@needs_int8("the int8 model's generate/stream is")
def test_quantized_model_speaks_and_streams_like_it_generates(tiny_checkpoint: Path, goldens):
    from .conftest import check_audio, fp32_pair_bound, golden_voice

    model = load_model(tiny_checkpoint, quantize="int8")
    voice = golden_voice(goldens, "xvec")
    result = model.generate("Hello there.", voice, seed=3, max_new_tokens=20)
    assert result.audio.size == result.codes.shape[0] * 1920
    check_audio(result.audio)
    chunks = list(
        model.stream(
            "Hello there.", voice, seed=3, max_new_tokens=20, first_chunk_frames=2, chunk_frames=3
        )
    )
    assert torch.equal(torch.cat([c.codes for c in chunks]), result.codes)
    # other chunk sizes round the float32 decoder differently (error model: conftest.py)
    streamed = np.concatenate([c.audio for c in chunks])
    assert np.abs(streamed - result.audio).max() <= fp32_pair_bound(goldens, "decoder_wav")
    assert model.weight_format == "int8"


def test_load_model_switch(tiny_checkpoint: Path, monkeypatch):
    assert load_model(tiny_checkpoint).quantization is None
    assert load_model(tiny_checkpoint, quantize="none").weight_format == "float32"
    auto = load_model(tiny_checkpoint, quantize="auto").weight_format
    assert auto == ("int8" if int8_available() else "float32")  # no int8 matmul: float
    with pytest.raises(ValueError, match="one of"):
        load_model(tiny_checkpoint, quantize="int2")  # "int4": the 4-bit code predictor
    with pytest.raises(ValueError, match="CPU path"):
        load_model(tiny_checkpoint, device="cuda", quantize="int8")


def test_auto_keeps_the_float_model_untouched_when_a_layer_falls_short(
    tiny_checkpoint: Path, goldens, monkeypatch
):
    """`auto` measures first and changes nothing unless every layer holds the bound: the float
    model it keeps gives the same codes as one never offered int8."""
    from .conftest import golden_voice

    monkeypatch.setattr(quantize_module, "MIN_SQNR_DB", 200.0)
    kept = load_model(tiny_checkpoint, quantize="auto")
    assert kept.quantization is None and kept.weight_format == "float32"
    plain = load_model(tiny_checkpoint)
    voice = golden_voice(goldens, "icl")
    a = kept.generate("Hello there.", voice, greedy=True, max_new_tokens=12)
    b = plain.generate("Hello there.", voice, greedy=True, max_new_tokens=12)
    assert torch.equal(a.codes, b.codes) and np.array_equal(a.audio, b.audio)


def _plant_outlier(model, channel: int = 3, factor: float = 50.0) -> None:
    """Every layer's input norm makes `channel` `factor`x larger and q/k/v read it `factor`x
    smaller: the float model computes the same function, but one activation channel now
    dwarfs the others, as trained LLM activations do."""
    with torch.no_grad():
        for stack in (model.talker.model, model.talker.code_predictor.model):
            for layer in stack.layers:
                layer.input_layernorm.weight[channel] *= factor
                for proj in (
                    layer.self_attn.q_proj,
                    layer.self_attn.k_proj,
                    layer.self_attn.v_proj,
                ):
                    proj.weight[:, channel] /= factor


@needs_int8("SmoothQuant's outlier handling is")
@pytest.mark.parametrize("smooth", [False, True])
def test_smoothing_handles_an_activation_outlier_channel(tiny_checkpoint: Path, smooth: bool):
    """Per-row scales set by one outlier channel leave the other channels ~6 bits: smoothing
    (scales folded into the norm) must win back what the outlier costs."""
    model = load_model(tiny_checkpoint)
    _plant_outlier(model)
    report = quantize_module.quantize_model(model, smooth=smooth)
    qkv = [v for k, v in report.layer_sqnr_db.items() if k.endswith("qkv_proj")]
    if smooth:
        assert min(qkv) >= quantize_module.MIN_SQNR_DB, report.worst()
    else:
        assert min(qkv) < quantize_module.MIN_SQNR_DB - 3, report.worst()  # the problem is real


@needs_int8("the per-layer SQNR fallback of the projection is")
def test_a_projection_below_the_bound_stays_float_and_decides_nothing(monkeypatch):
    """The talker -> predictor projection has no norm to smooth into: below the bound it keeps
    its float weights, and the rest is quantized all the same."""
    from .conftest import fixture_path

    model = load_model(fixture_path("qwen3-tiny-b"))
    monkeypatch.setattr(quantize_module, "MIN_SQNR_DB", 200.0)
    report = quantize_module.quantize_model(model)
    assert report.applied and "code_predictor.small_to_mtp_projection" not in report.layer_sqnr_db
    assert isinstance(model.talker.code_predictor.small_to_mtp_projection, torch.nn.Linear)
    assert isinstance(model.talker.code_predictor.lm_head[0], Int8Linear)
