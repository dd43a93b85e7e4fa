"""Int8Linear's call path (issue 38, item 3): a contiguous float32 input reaches the native kernel
with one aten operator (the output's allocation), and every other input, placement and copy of
the layer still gives the torch path's bits."""

from __future__ import annotations

import copy
import pickle

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from tts_core.models import native
from tts_core.quant.linear import Int8Linear, int8_matmul_available

pytestmark = [
    pytest.mark.skipif(not int8_matmul_available(), reason="no int8 matmul here"),
    pytest.mark.skipif(native.int8_linear() is None, reason="no native 8-bit kernel here"),
]


class _Ops(TorchDispatchMode):
    """Records the aten operators that reach the dispatcher."""

    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        self.names.append(func.__name__)
        return func(*args, **(kwargs or {}))


def _layer(out_features: int = 24, in_features: int = 40, seed: int = 0) -> Int8Linear:
    g = torch.Generator().manual_seed(seed)
    weight = torch.randn(out_features, in_features, generator=g)
    return Int8Linear(weight, torch.randn(out_features, generator=g))


@pytest.mark.parametrize("shape", [(1, 40), (3, 40), (2, 1, 40)])
def test_a_contiguous_float32_input_costs_one_aten_operator(shape):
    """The old path also ran a reshape (aten view) and a view of its output around the kernel."""
    layer, x = _layer(), torch.randn(shape)
    layer(x)  # binds the kernel's entries and the weights' pointers
    with _Ops() as ops:
        out = layer(x)
    assert len(ops.names) == 1, ops.names
    assert out.shape == (*shape[:-1], 24) and torch.equal(out, layer.forward_reference(x))


@pytest.mark.parametrize(
    "x",
    [
        torch.randn(4, 40),
        torch.randn(2, 3, 40),
        torch.randn(40, 4).t(),  # not contiguous
        torch.randn(2, 40, 3).transpose(1, 2),
        torch.randn(3, 40).bfloat16(),
        torch.randn(0, 40),
        torch.randn(2, 0, 40),
    ],
    ids=["rows", "3d", "transposed", "3d-transposed", "bfloat16", "no-rows", "no-rows-3d"],
)
def test_every_input_gives_the_torch_paths_bits(x):
    layer = _layer()
    out = layer(x)
    assert out.dtype == x.dtype and torch.equal(out, layer.forward_reference(x))


def test_a_layer_binds_again_when_its_buffers_are_replaced():
    check_rebinds_when_buffers_are_replaced(_layer, torch.randn(3, 40))


def check_rebinds_when_buffers_are_replaced(make, x: torch.Tensor) -> None:  # noqa: ANN001
    """load_state_dict(assign=True) swaps the buffers the kernel reads through bare pointers;
    make(seed) -> a layer (8- or 4-bit)."""
    layer, other = make(seed=1), make(seed=2)
    layer(x)
    layer.load_state_dict(other.state_dict(), assign=True)
    assert torch.equal(layer(x), other(x))
    layer.load_state_dict(make(seed=3).state_dict())  # in place: the same pointers
    assert torch.equal(layer(x), make(seed=3)(x))


def test_a_moved_layer_runs_on_torch_and_back_on_the_kernel():
    check_moved_and_back(_layer(), torch.randn(3, 40))


def check_moved_and_back(layer: torch.nn.Module, x: torch.Tensor) -> None:
    expected = layer(x)
    layer.to(torch.float64)  # the kernel reads float32 buffers only
    assert layer(x).dtype == torch.float32 and layer._buffers_native.function is None
    layer.float()
    assert torch.equal(layer(x), expected) and layer._buffers_native.function


def test_a_bound_layer_pickles_and_copies():
    check_pickles_and_copies(_layer(), torch.randn(3, 40))


def check_pickles_and_copies(layer: torch.nn.Module, x: torch.Tensor) -> None:
    """The bound ctypes entries are left out of the state and bound again after loading."""
    expected = layer(x)
    for clone in (pickle.loads(pickle.dumps(layer)), copy.deepcopy(layer)):
        assert clone._buffers_native is None and torch.equal(clone(x), expected)
    assert layer._buffers_native.function  # the original keeps its binding


def test_a_reload_of_the_kernels_binds_again(monkeypatch):
    check_reload_binds_again(_layer(), torch.randn(3, 40), monkeypatch)


def check_reload_binds_again(layer: torch.nn.Module, x: torch.Tensor, monkeypatch) -> None:  # noqa: ANN001
    """native.int8_linear.cache_clear() (a change of the environment) reaches bound layers: with
    native code off they take the torch path, the same numbers."""
    expected = layer(x)
    monkeypatch.setenv("TTS_CORE_NATIVE", "0")
    native.int8_linear.cache_clear()
    try:
        assert torch.equal(layer(x), expected) and layer._buffers_native.function is None
    finally:
        monkeypatch.delenv("TTS_CORE_NATIVE")
        native.int8_linear.cache_clear()
    assert torch.equal(layer(x), expected) and layer._buffers_native.function
