"""Int4Linear's call path (issue 38, item 4): NativeLinear's (quant/linear.py), shared with
Int8Linear. A contiguous float32 input reaches the 4-bit kernel with one aten operator (the
output's allocation), the kernel's entry and the weights' pointers bound once per placement, and
every input, placement, copy and fallback still gives the torch path's bits (test_int4.py holds
the kernel equal to the torch path; the old call path passed the same kernel the same rows)."""

from __future__ import annotations

import copy
import pickle

import pytest
import torch

from tts_core.models import native
from tts_core.quant.int4 import GROUP, Int4Linear
from tts_core.quant.linear import Int8Linear, NativeLinear, int8_matmul_available

from .test_int8_call import (
    _Ops,
    check_moved_and_back,
    check_rebinds_when_buffers_are_replaced,
    check_reload_binds_again,
)

pytestmark = pytest.mark.skipif(not int8_matmul_available(), reason="no int8 matmul here")
needs_kernel = pytest.mark.skipif(
    native.int4_linear() is None, reason="no C compiler, or no AVX-512 VNNI for the 4-bit kernel"
)
# (out, in): odd outputs (a padded block of 16, one channel, 33 = two blocks and one), odd
# group counts (in = 32, 96, 160: 1, 3, 5 groups of GROUP)
SHAPES = [(1, 32), (15, 96), (33, 160), (47, 64), (64, 64)]
ROWS = [1, 2, 8, 15]  # one row, two, a full tile of 8, a tile and a tail of 7


def _layer(out: int = 24, inp: int = 64, seed: int = 0, bias: bool = True) -> Int4Linear:
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(out, inp, generator=g) * 0.05
    w[:, :GROUP] *= 8  # group scales that differ
    return Int4Linear.from_float(w, torch.randn(out, generator=g) if bias else None)


def _x(rows: int, inp: int, seed: int = 1) -> torch.Tensor:
    """Rows over 6 decades of scale: each row sets its own activation scale."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(rows, inp, generator=g) * torch.logspace(-3, 3, rows)[:, None]


@pytest.fixture
def fresh_kernel_lookup():
    native.int8_linear.cache_clear()
    yield
    native.int8_linear.cache_clear()


@needs_kernel
@pytest.mark.parametrize("shape", [(1, 64), (3, 64), (2, 1, 64)])
def test_a_contiguous_float32_input_costs_one_aten_operator(shape):
    """The old path also ran a reshape (aten view) and a view of its output around the kernel."""
    layer, x = _layer(), torch.randn(shape)
    layer(x)  # binds the kernel's entry and the weights' pointers
    with _Ops() as ops:
        out = layer(x)
    assert len(ops.names) == 1, ops.names
    assert out.shape == (*shape[:-1], 24) and torch.equal(out, layer.forward_reference(x))


@needs_kernel
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("bias", [False, True])
def test_every_shape_and_row_count_gives_the_torch_paths_bits(shape, bias):
    out, inp = shape
    layer = _layer(out, inp, seed=out + inp, bias=bias)
    assert layer.fallback is None
    for rows in ROWS:
        x = _x(rows, inp, seed=rows)
        assert torch.equal(layer(x), layer.forward_reference(x)), rows


@needs_kernel
@pytest.mark.parametrize(
    "x",
    [
        torch.randn(2, 3, 64),
        torch.randn(64, 4).t(),  # not contiguous
        torch.randn(2, 64, 3).transpose(1, 2),
        torch.randn(3, 64).bfloat16(),
        torch.randn(0, 64),
        torch.randn(2, 0, 64),
    ],
    ids=["3d", "transposed", "3d-transposed", "bfloat16", "no-rows", "no-rows-3d"],
)
def test_every_input_gives_the_torch_paths_bits(x):
    layer = _layer()
    out = layer(x)
    assert out.dtype == x.dtype and torch.equal(out, layer.forward_reference(x))


@pytest.mark.parametrize("isa", ["torch", "avx2"])
@pytest.mark.parametrize("shape", SHAPES)
def test_where_the_4_bit_kernel_is_absent_the_fallback_gives_the_same_numbers(
    isa, shape, monkeypatch, fresh_kernel_lookup
):
    """TTS_CORE_NATIVE_ISA naming another kernel: the layer is an Int8Linear over W_eff, on
    torch._int_mm ("torch") or on that 8-bit kernel ("avx2", bound through its own layer)."""
    out, inp = shape
    here = _layer(out, inp, seed=out + inp)
    xs = [_x(rows, inp, seed=rows) for rows in ROWS]
    expected = [here(x) for x in xs]
    monkeypatch.setenv(native.ISA_ENV, isa)
    native.int8_linear.cache_clear()
    if isa != "torch" and native.int8_linear() is None:
        pytest.skip(f"no {isa} kernel here")
    assert native.int4_linear() is None
    fallback = _layer(out, inp, seed=out + inp)
    assert fallback.fallback is not None
    assert fallback.fallback.kernel_isa == (None if isa == "torch" else isa)
    for x, want in zip(xs, expected, strict=True):
        assert torch.equal(fallback(x), want)


def _count_binds(layer: NativeLinear, monkeypatch) -> list[int]:  # noqa: ANN001
    calls = []
    bind = layer._bind

    def counted():  # noqa: ANN202
        calls.append(1)
        return bind()

    monkeypatch.setattr(layer, "_bind", counted)
    return calls


@needs_kernel
@pytest.mark.parametrize("kind", ["int4", "int8"])
def test_a_layer_binds_once_per_placement(kind, monkeypatch):
    """The shared piece: the entry and pointers are looked up at the first call, not per call."""
    layer = _layer() if kind == "int4" else Int8Linear(torch.randn(24, 64), torch.randn(24))
    calls, x = _count_binds(layer, monkeypatch), torch.randn(3, 64)
    for _ in range(5):
        layer(x)
    assert len(calls) == 1 and layer._buffers_native.function is not None
    layer.float()  # an _apply: the buffers may have moved
    layer(x)
    assert len(calls) == 2


@needs_kernel
def test_a_layer_binds_again_when_its_buffers_are_replaced():
    check_rebinds_when_buffers_are_replaced(_layer, torch.randn(3, 64))


@needs_kernel
def test_a_moved_layer_runs_on_torch_and_back_on_the_kernel():
    check_moved_and_back(_layer(), torch.randn(3, 64))


@needs_kernel
def test_a_bound_layer_pickles_and_copies():
    """The bound ctypes entry is left out of the state and bound again after loading."""
    layer, x = _layer(), torch.randn(3, 64)
    expected = layer(x)
    for clone in (pickle.loads(pickle.dumps(layer)), copy.deepcopy(layer)):
        assert clone._buffers_native is None and torch.equal(clone(x), expected)
        assert clone._buffers_native.function
    assert layer._buffers_native.function  # the original keeps its binding


@needs_kernel
def test_a_reload_of_the_kernels_binds_again(monkeypatch):
    check_reload_binds_again(_layer(), torch.randn(3, 64), monkeypatch)
