"""models/laid_out.linear: an nn.Linear over its weight laid out once is the plain call (equal in
bfloat16, within two summation orders' rounding in float32), lays the weight out again when it
changes (reload, .to(), set_dtype), and steps aside over many rows. The codec decoder's linears
take it."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from tts_core.models import laid_out
from tts_core.models.qwen3_tts.codec import CodecDecoder, load_speech_tokenizer_config

pytestmark = pytest.mark.skipif(
    not torch.backends.mkldnn.is_available(), reason="oneDNN is not in this torch build"
)
FIXTURES = Path(__file__).resolve().parent / "fixtures"


def _linear(k: int = 96, n: int = 128, bias: bool = True) -> laid_out.Linear:
    torch.manual_seed(0)
    layer = nn.Linear(k, n, bias=bias).eval()
    laid_out.lay_out_linears(layer)
    return layer


def _bound(layer: nn.Linear, x: torch.Tensor) -> float:
    """Two float32 sums of the same K products (and the bias) in different orders differ by
    at most 2 (K + 1) u sum|w x| + |b| (recursive summation, each side); the largest sum of
    magnitudes bounds every output."""
    k = layer.in_features
    magnitude = float(layer.weight.detach().abs().amax()) * float(x.detach().abs().amax()) * k
    magnitude += float(layer.bias.detach().abs().amax()) if layer.bias is not None else 0.0
    return 2 * (k + 1) * torch.finfo(torch.float32).eps / 2 * magnitude


@pytest.mark.parametrize("bias", [True, False])
def test_a_few_rows_are_the_plain_call(bias: bool) -> None:
    layer = _linear(bias=bias)
    x = torch.randn(2, 5, 96)
    with torch.inference_mode():
        plain = nn.functional.linear(x, layer.weight, layer.bias)
        fast = layer(x)
        assert "_laid_out" in layer.__dict__  # it took the laid-out path
        assert fast.shape == plain.shape
        assert float((fast - plain).abs().max()) <= _bound(layer, x)
        layer.to(torch.bfloat16)
        x16 = x.to(torch.bfloat16)
        # float32 accumulation and one rounding, bias inside: the same bits
        assert torch.equal(layer(x16), nn.functional.linear(x16, layer.weight, layer.bias))


def test_a_changed_weight_or_dtype_is_laid_out_again() -> None:
    layer = _linear().to(torch.bfloat16)
    x = torch.randn(1, 6, 96, dtype=torch.bfloat16)
    with torch.inference_mode():
        layer(x)
    first = layer.__dict__["_laid_out"].weight
    replacement = nn.Linear(96, 128).to(torch.bfloat16).state_dict()
    layer.load_state_dict(replacement)  # a reload writes the same storage: its version moves
    with torch.inference_mode():
        assert torch.equal(layer(x), nn.functional.linear(x, layer.weight, layer.bias))
        assert layer.__dict__["_laid_out"].weight != first
        layer.float()
        x32 = x.float()
        out = layer(x32)
    assert out.dtype == torch.float32
    assert float((out - nn.functional.linear(x32, layer.weight, layer.bias)).abs().max()) <= (
        _bound(layer, x32)
    )


def test_many_rows_and_gradients_take_the_plain_call() -> None:
    layer = _linear(n=16)
    many = torch.randn(40, 96)  # 16 outputs < 2 x 40 rows: the plain call is as fast
    with torch.inference_mode():
        assert torch.equal(layer(many), nn.functional.linear(many, layer.weight, layer.bias))
    assert "_laid_out" not in layer.__dict__
    few = torch.randn(3, 96, requires_grad=True)
    layer(few).sum().backward()  # the plain call, so autograd works
    assert few.grad is not None


def test_the_codec_decoder_lays_out_its_plain_linears() -> None:
    cfg = load_speech_tokenizer_config(FIXTURES / "qwen3-tiny-a" / "speech_tokenizer").decoder
    decoder = CodecDecoder(cfg)
    linears = [m for m in decoder.modules() if isinstance(m, nn.Linear)]
    assert linears and all(type(m) is laid_out.Linear for m in linears)
