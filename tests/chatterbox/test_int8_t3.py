"""Turbo's T3 on the 8-bit CPU path (models/chatterbox/quant.py) on the tiny checkpoints: each
int8 layer within the exact rounding bound and the rounding-noise model, the logits within the
bound that model gives, the load switch ("none" / "int8" / "auto", as Qwen3-TTS's), "auto"
leaving T3 exactly as loaded when a bound fails, and the served path (load_backend -> engine)
running the int8 T3 when it is chosen.

Error model (per layer, Int8Linear: y = round(x / s_x) round(W / s_w)^T s_x s_w + b, s_x =
max|x_row| / 127, s_w = max|W_out| / 127): each factor is off by at most half a step, so
|y - y_ref| <= sum_k (|x_k| s_w / 2 + |W_k| s_x / 2 + s_x s_w / 4) (exact); modelling the
rounding errors as independent and uniform, the noise power of output o is
(s_x^2 sum_k W_ok^2 + s_w,o^2 sum_k x_k^2) / 12 (measured here: 0.81x to 1.18x of it per layer).
Its integer part is exact and equal on every kernel (AVX-512 VNNI, AVX-VNNI, AVX2, NEON and
torch._int_mm are equal bit for bit: tests/qwen3/test_int8_native_isa.py), so a CPU changes only
the float32 parts (norms, attention, GELU, ~1e-7 relative): that can move a rounding of an
activation by one step, far below the ~1e-2 relative noise the bounds are about. The bounds
below hold on any CPU for that reason, not because of this one's figures.
"""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from tts_core.models import native
from tts_core.models.chatterbox import quant
from tts_core.models.chatterbox.model import ChatterboxTurboModel
from tts_core.models.chatterbox.sampling import TurboSampling
from tts_core.models.registry import load_model
from tts_core.quant.linear import Int8Linear, int8_matmul_available, sqnr_db

from .conftest import FIXTURES, shared_model

TEXT = "Hello there, this is a tiny test. [chuckle] Okay"
INT8 = native.int8_linear() is not None or int8_matmul_available()
needs_int8 = pytest.mark.skipif(
    not INT8,
    reason="no int8 matmul on this CPU: the int8 T3 is "
    "unchecked here (quantize 'auto' keeps float32)",
)
# Noise power of a layer against the uniform-rounding model: a sum over >= 64 rows x >= 32 outputs
# of independent errors, measured 0.81x-1.18x; 2x either way is 3 dB of slack for the model.
NOISE_MODEL_FACTOR = 2.0


def _layers(model: ChatterboxTurboModel) -> list[tuple[str, Int8Linear, torch.Tensor, tuple]]:
    """(name, int8 layer, its input rows, (weight, bias) in float) of every projection, built as
    quantize_t3 builds them from the calibration run of the float model."""
    spk, prompt = quant.calibration_voice(model)
    text = model.text_ids(quant.CALIBRATION_TEXT)
    inputs, _ = quant.calibrate(model.t3, spk, prompt, text, quant.calibration_tokens(prompt))
    out = []
    for index, block in enumerate(model.t3.tfmr.h):
        mine = {name: inputs[(index, name)] for name in quant.PROJECTIONS}
        scales = quant.smoothing_scales(block, mine)
        for name, (weight, bias) in quant.smoothed_weights(block, scales).items():
            x = mine[name] / scales[name] if name in scales else mine[name]
            out.append((f"h.{index}.{name}", Int8Linear(weight, bias), x, (weight, bias)))
    return out


def _predicted_noise(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """(rows, out) noise power of the uniform-rounding model (module doc)."""
    x, weight = x.double(), weight.double()
    s_x = x.abs().amax(1, keepdim=True) / 127
    s_w = weight.abs().amax(1) / 127
    return (
        s_x**2 * weight.pow(2).sum(1)[None] + x.pow(2).sum(1, keepdim=True) * s_w[None] ** 2
    ) / 12


def _forced_logits(model: ChatterboxTurboModel, forced: torch.Tensor) -> torch.Tensor:
    voice = model.builtin_voice
    seen: list[torch.Tensor] = []
    with torch.inference_mode():
        for _ in model.t3.draws(
            voice.speaker_emb,
            voice.t3_prompt_tokens,
            model.text_ids(TEXT),
            TurboSampling(),
            None,
            forced=forced,
            logits_seen=seen,
        ):
            pass
    return torch.cat(seen).double()


@needs_int8
def test_each_layer_is_within_the_rounding_bound_and_the_noise_model(tiny_folder: Path) -> None:
    for name, layer, x, (weight, bias) in _layers(shared_model(tiny_folder)):
        reference = torch.addmm(bias.double(), x.double(), weight.double().t())
        error = layer(x).double() - reference
        s_x = x.abs().amax(1, keepdim=True).double() / 127
        s_w = weight.abs().amax(1).double() / 127
        bound = (
            x.abs().double().sum(1, keepdim=True) * s_w[None] / 2
            + weight.abs().double().sum(1)[None] * s_x / 2
            + x.shape[1] * s_x * s_w[None] / 4
        )  # (rows, out)
        # + the float32 rounding of the output's scaling and bias (a few ulps of |y|)
        assert (error.abs() <= bound + 1e-6 * (1 + reference.abs())).all(), name
        ratio = float(error.pow(2).sum() / _predicted_noise(x, weight).sum())
        assert 1 / NOISE_MODEL_FACTOR <= ratio <= NOISE_MODEL_FACTOR, (name, ratio)


@needs_int8
def test_int8_logits_hold_the_bound_of_the_error_model(tiny_folder: Path) -> None:
    """Logits SNR >= (the worst layer's SQNR predicted by the noise model) - 10 log10(layers):
    the noise of every quantized layer adds (independent) at the logits, each at most at the
    worst layer's relative level. tiny-a / tiny-b: predicted worst layer 38.0 / 38.5 dB, 8 / 12
    layers, bound 29.0 / 27.7 dB; measured 39.5 / 38.8 dB (this Xeon; the same to 3 decimals on
    the avx2 kernel and torch._int_mm). The issue's 30 dB is asserted too (what "auto" demands
    of the logits)."""
    float_model = shared_model(tiny_folder)
    layers = _layers(float_model)
    worst = min(
        10
        * math.log10(
            float(torch.addmm(b.double(), x.double(), w.double().t()).pow(2).sum())
            / float(_predicted_noise(x, w).sum())
        )
        for _, _, x, (w, b) in layers
    )
    bound = worst - 10 * math.log10(len(layers))
    forced = float_model.generate(TEXT, seed=1).tokens  # teacher forcing: the same inputs
    int8_model = ChatterboxTurboModel.from_pretrained(tiny_folder, quantize="int8")
    reference, int8 = _forced_logits(float_model, forced), _forced_logits(int8_model, forced)
    snr = sqnr_db(reference, int8)
    assert snr >= bound and snr >= quant.MIN_SQNR_DB, (snr, bound)
    # the draws see the same ranking almost everywhere (measured 0.984 / 0.989)
    assert (reference.argmax(1) == int8.argmax(1)).double().mean() >= 0.9
    report = int8_model.t3_quantization
    assert report.applied and len(report.layer_sqnr_db) == len(layers)
    assert report.logits_snr_db >= quant.MIN_SQNR_DB


def test_the_load_switch(tiny_folder: Path) -> None:
    model = ChatterboxTurboModel.from_pretrained(tiny_folder, quantize="none")
    assert model.t3_quantization is None and quant.t3_weight_format(model) == "float32"
    auto = ChatterboxTurboModel.from_pretrained(tiny_folder, quantize="auto")
    # tiny layers are not timed (quant/speed.py's MIN_TIMED_BYTES): the SQNR bounds decide
    assert quant.t3_weight_format(auto) == ("int8" if INT8 else "float32")
    assert auto.format_decision
    with pytest.raises(ValueError, match="one of"):
        ChatterboxTurboModel.from_pretrained(tiny_folder, quantize="int4")
    on_gpu = SimpleNamespace(device=torch.device("cuda"))  # only the device is read
    with pytest.raises(ValueError, match="CPU path"):
        quant.quantize_turbo(on_gpu, "int8")
    assert quant.quantize_turbo(on_gpu, "auto") is None
    assert on_gpu.t3_quantization is None and "no int8 path" in on_gpu.format_decision
    if INT8:  # load_model (the registry) passes it through
        assert quant.t3_weight_format(load_model(tiny_folder, quantize="int8")) == "int8"
    assert quant.t3_weight_format(load_model(tiny_folder)) == "float32"  # its default: none


@needs_int8
def test_auto_leaves_t3_exactly_as_loaded_when_a_bound_fails(
    tiny_folder: Path, monkeypatch
) -> None:
    """A layer under the bound: nothing installed. Every layer above it but the logits under:
    the float modules and norms put back. Either way the logits are the float model's bits."""
    float_model = shared_model(tiny_folder)
    forced = float_model.generate(TEXT, seed=1).tokens
    reference = _forced_logits(float_model, forced)
    asked = ChatterboxTurboModel.from_pretrained(tiny_folder, quantize="int8").t3_quantization
    thresholds = [asked.min_sqnr_db + 1.0]  # a layer fails
    if asked.logits_snr_db < asked.min_sqnr_db:  # tiny-b: the logits fail, the layers pass
        thresholds.append((asked.logits_snr_db + asked.min_sqnr_db) / 2)
    for threshold in thresholds:
        monkeypatch.setattr(quant, "MIN_SQNR_DB", threshold)
        model = ChatterboxTurboModel.from_pretrained(tiny_folder, quantize="auto")
        assert model.t3_quantization is None and quant.t3_weight_format(model) == "float32"
        assert model.format_decision.startswith("kept float32")
        assert torch.equal(_forced_logits(model, forced), reference)


@needs_int8
def test_the_served_path_runs_the_int8_t3_when_chosen() -> None:
    """load_backend (what app.py --quantize int8 / auto calls) -> an int8 T3, reported as the
    weight format; the engine's audio is the int8 model's own stream, bit for bit."""
    from tts_core.backends import load_backend
    from tts_core.engine import Engine, EngineConfig, SynthesisParams, SynthesisRequest

    folder = FIXTURES / "chatterbox-turbo-tiny-a"
    backend, notice = load_backend(str(folder), "cpu", allow_fallback=False, quantize="int8")
    try:
        assert notice is None and backend.weight_format == "int8"
        assert any(isinstance(m, Int8Linear) for m in backend.model.t3.modules())
        engine = Engine(backend, EngineConfig(fade_ms=0.0, max_concurrent=1, max_queue=0))
        assert engine.info()["weight_format"] == "int8"
        assert engine.info()["weight_format_reason"].startswith("T3 int8")
        params = SynthesisParams(seed=5, watermark=0)
        audio = np.concatenate(
            [e.audio for e in engine.stream(SynthesisRequest(TEXT, params=params))]
        )
    finally:
        backend.close()
    model = ChatterboxTurboModel.from_pretrained(folder, quantize="int8")
    streamed = np.concatenate([c.audio for c in model.stream(TEXT, seed=5)])
    assert np.array_equal(audio, streamed)
    float_audio = np.concatenate([c.audio for c in shared_model(folder).stream(TEXT, seed=5)])
    assert not np.array_equal(audio, float_audio)  # it did run the int8 T3
