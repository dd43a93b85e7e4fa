"""models/laid_out.py: a conv or matmul over a weight laid out once computes what the plain call
does, lays the weight out again when it changes, and steps aside where it does not apply."""

from __future__ import annotations

import copy
import pickle

import pytest
import torch
from torch import nn

from tts_core.models import laid_out

pytestmark = pytest.mark.skipif(
    not torch.backends.mkldnn.is_available(), reason="oneDNN is not in this torch build"
)


def _conv(c_in: int = 48, c_out: int = 64, kernel: int = 7, dilation: int = 1) -> nn.Conv1d:
    torch.manual_seed(0)
    return nn.Conv1d(c_in, c_out, kernel, dilation=dilation).eval()


def _bound(weight: torch.Tensor, x: torch.Tensor, terms: int, eps: float) -> float:
    """Two float sums of the same `terms` products in different orders differ by at most
    2 * terms * eps * sum|w x| (the classic recursive-summation bound, each side); the largest
    sum of magnitudes bounds every output."""
    magnitude = float(weight.abs().amax()) * float(x.abs().amax()) * terms
    return 2 * terms * eps * magnitude


@pytest.mark.parametrize("dilation", [1, 3])
def test_conv_over_a_few_steps_is_the_plain_conv_within_rounding(dilation: int) -> None:
    conv = _conv(dilation=dilation)
    x = torch.randn(2, 48, 30)
    with torch.inference_mode():
        plain, fast = conv(x), laid_out.conv1d(conv, x)
    assert "_laid_out" in conv.__dict__  # it took the laid-out path
    terms = 48 * 7
    assert (plain - fast).abs().max() <= _bound(conv.weight, x, terms, torch.finfo().eps)
    assert not torch.equal(plain, torch.zeros_like(plain))


def test_long_inputs_and_other_modules_take_the_plain_call() -> None:
    conv = _conv(c_out=8, kernel=3)
    long = torch.randn(1, 48, 8 * 3)  # out_channels * kernel < WEIGHT_PER_STEP * steps
    with torch.inference_mode():
        assert torch.equal(laid_out.conv1d(conv, long), conv(long))
        assert "_laid_out" not in conv.__dict__
        depthwise = nn.Conv1d(48, 48, 7, groups=48).eval()
        x = torch.randn(1, 48, 10)
        assert torch.equal(laid_out.conv1d(depthwise, x), depthwise(x))
        assert torch.equal(laid_out.conv1d(nn.Identity(), x), x)
        wide = conv.double()
        assert torch.equal(laid_out.conv1d(wide, x.double()[..., :5]), wide(x.double()[..., :5]))
        assert "_laid_out" not in wide.__dict__


def test_with_gradients_the_plain_call_runs() -> None:
    conv = _conv()
    x = torch.randn(1, 48, 20)
    out = laid_out.conv1d(conv, x)
    assert out.requires_grad and "_laid_out" not in conv.__dict__


def test_a_changed_weight_or_dtype_is_laid_out_again() -> None:
    conv = _conv()
    x = torch.randn(1, 48, 20)
    bound = _bound(conv.weight, x, 48 * 7, torch.finfo().eps)
    with torch.no_grad():
        first = laid_out.conv1d(conv, x)
        conv.weight.mul_(2)  # in place: a new version of the same storage
        again = laid_out.conv1d(conv, x)
        assert (again - conv(x)).abs().max() <= 2 * bound
        assert (again - first).abs().max() > 100 * bound  # the old layout would give `first`
        conv.bfloat16()
        half = laid_out.conv1d(conv, x.bfloat16())
        # the float32 layouts are let go, not kept beside the new one as the most used
        assert len(conv.__dict__["_laid_out"].by_shape) == 1
    assert half.dtype == torch.bfloat16
    assert (half.float() - again).abs().max() < 0.05 * float(again.abs().max())


def test_matmul_is_the_plain_product_and_equal_in_bfloat16() -> None:
    torch.manual_seed(1)
    matrix = torch.randn(96, 80)
    x = torch.randn(2, 7, 96)
    made = []

    def as_matrix(keep: bool = True) -> torch.Tensor:
        made.append(keep)
        return matrix

    with torch.inference_mode():
        fast = laid_out.matmul(nn.Module(), x, matrix, as_matrix)
        assert fast.shape == (2, 7, 80) and made == [False]  # no plain copy kept beside it
        assert (fast - x @ matrix).abs().max() <= _bound(matrix, x, 96, torch.finfo().eps)
        half, x_half = matrix.bfloat16(), x.bfloat16()
        # oneDNN sums bf16 products in float32 and rounds once, laid out or not
        same = laid_out.matmul(nn.Module(), x_half, half, lambda keep=True: half)
        assert torch.equal(same, x_half @ half)


def test_copies_and_pickles_start_without_the_laid_out_weight() -> None:
    conv = _conv()
    x = torch.randn(1, 48, 20)
    with torch.inference_mode():
        expected = laid_out.conv1d(conv, x)
        for other in (copy.deepcopy(conv), pickle.loads(pickle.dumps(conv))):
            assert not other.__dict__["_laid_out"].by_shape
            assert torch.equal(laid_out.conv1d(other, x), expected)


def test_each_input_length_has_its_own_layout_and_the_most_used_are_kept() -> None:
    conv = _conv()
    with torch.inference_mode():
        # two streams: a prefix whose length changes with every request, the first chunk, the
        # steady chunk most often, a last chunk of any length
        for steps in (16, 12, 30, 30, 30, 20, 18, 12, 30, 30, 26, 14, 12, 30, 22):
            x = torch.randn(1, 48, steps)
            assert (laid_out.conv1d(conv, x) - conv(x)).abs().max() <= _bound(
                conv.weight, x, 48 * 7, torch.finfo().eps
            )
    kept = conv.__dict__["_laid_out"].by_shape
    assert sorted(shape[-1] for shape in kept) == [12, 22, 30]  # the one-off lengths take turns


def test_a_flop_count_sees_the_laid_out_calls_as_the_plain_ones() -> None:
    from torch.utils.flop_counter import FlopCounterMode

    conv, owner, matrix = _conv(), nn.Module(), torch.randn(48, 80)
    x = torch.randn(2, 48, 20)

    def flops(run) -> int:  # noqa: ANN001
        with FlopCounterMode(display=False, custom_mapping=laid_out.flop_formulas()) as counter:
            run()
        return counter.get_total_flops()

    with torch.inference_mode():
        fast = flops(lambda: laid_out.conv1d(conv, x))
        plain = flops(lambda: conv(x))
        assert "_laid_out" in conv.__dict__ and fast == plain > 0
        rows = x.transpose(1, 2)
        assert flops(lambda: laid_out.matmul(owner, rows, matrix, lambda keep=True: matrix)) == (
            flops(lambda: rows @ matrix)
        )
