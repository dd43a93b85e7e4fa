"""A decode step of an 8-bit stack in one C call (models/stack_step.py, native/decode_stack.c).

Against the same stack run layer by layer (the torch path: stack_step switched off), and both
against the float64 network they quantize (the int8 weights dequantized, activations exact).
Error model: the two 8-bit paths quantize the same activations per row to 127 levels; they
differ in float32 rounding only (the norms' sum order, exp: a few units in the last place,
~1e-7 relative), except where such a difference moves an activation across a rounding boundary
of its quantization, which changes that element by one step, the size of the error every element
of both paths already carries against float64. So the two paths are apart by at most the 8-bit
path's own distance from float64 (in practice far less: a handful of flips against thousands of
elements each rounded), on any CPU: IEEE float32 operations round alike on every x86-64.
"""

from __future__ import annotations

import copy
from dataclasses import replace

import pytest
import torch

from tests.test_layers_batch_invariance import Geometry
from tts_core.models import layers
from tts_core.models import stack_step as step_module
from tts_core.models.layers import DecoderStack, KVCache, RotaryTable, Rows, Span
from tts_core.models.native import int4_linear
from tts_core.quant.int4 import Int4Linear
from tts_core.quant.linear import Int8Linear

pytestmark = pytest.mark.skipif(
    step_module._kernel(step_module.native.generation) is None,
    reason="no AVX-512 VNNI or no C compiler here: stacks run layer by layer (the torch path)",
)


# the 0.6B code predictor's heads (16 x 128 over 8 kv heads), narrower; three layers
GEOMETRY = replace(Geometry(), num_hidden_layers=3)
STEPS = 16  # the code predictor's positions


def _float_stack() -> DecoderStack:
    torch.manual_seed(0)
    stack = DecoderStack(GEOMETRY).eval()
    with torch.no_grad():
        for parameter in stack.parameters():
            parameter.normal_(0, 0.05) if parameter.dim() > 1 else parameter.uniform_(0.5, 1.5)
    return stack


def _int8(stack: DecoderStack) -> DecoderStack:
    """The stack as quantize.py serves it: q|k|v and gate|up fused, every projection 8-bit."""
    stack = copy.deepcopy(stack)
    for layer in stack.layers:
        attn, mlp = layer.self_attn, layer.mlp
        qkv = torch.cat([attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight])
        attn.qkv_proj = Int8Linear(qkv)
        attn.o_proj = Int8Linear.from_linear(attn.o_proj)
        del attn.q_proj, attn.k_proj, attn.v_proj
        mlp.gate_up_proj = Int8Linear(torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight]))
        mlp.down_proj = Int8Linear.from_linear(mlp.down_proj)
        del mlp.gate_proj, mlp.up_proj
    return stack


def _int4(quantized: DecoderStack) -> DecoderStack:
    """The 8-bit stack's projections in 4 bits (the 4-bit code predictor's format)."""
    stack = copy.deepcopy(quantized)
    for layer in stack.layers:
        attn, mlp = layer.self_attn, layer.mlp
        for owner, name in ((attn, "qkv_proj"), (attn, "o_proj"), (mlp, "gate_up_proj")):
            setattr(owner, name, Int4Linear.from_int8(getattr(owner, name)))
        mlp.down_proj = Int4Linear.from_int8(mlp.down_proj)
    return stack


def _dequantized(quantized: DecoderStack, float_stack: DecoderStack) -> DecoderStack:
    """float64 stack whose projections are the 8- or 4-bit ones' effective weights."""
    exact = copy.deepcopy(float_stack).double()

    def weight(lin: Int8Linear | Int4Linear) -> torch.Tensor:
        return lin.int8_weight().double() * lin.weight_scale.double()[:, None]

    with torch.no_grad():
        for mine, theirs in zip(exact.layers, quantized.layers, strict=True):
            attn, q_attn = mine.self_attn, theirs.self_attn
            q, k, v = weight(q_attn.qkv_proj).split(
                [attn.heads * attn.head_dim, *[attn.kv_heads * attn.head_dim] * 2]
            )
            attn.q_proj.weight.copy_(q), attn.k_proj.weight.copy_(k), attn.v_proj.weight.copy_(v)
            attn.o_proj.weight.copy_(weight(q_attn.o_proj))
            gate, up = weight(theirs.mlp.gate_up_proj).chunk(2)
            mine.mlp.gate_proj.weight.copy_(gate), mine.mlp.up_proj.weight.copy_(up)
            mine.mlp.down_proj.weight.copy_(weight(theirs.mlp.down_proj))
    return exact


def _passes(stack: DecoderStack, inputs: torch.Tensor, rows_apart: bool = True) -> torch.Tensor:
    """inputs (B, 16, H) in the code predictor's pattern (positions 0-1 together, then one a
    pass) -> every position's hidden (B, 16, H), over a fresh cache."""
    rows, steps, _ = inputs.shape
    rope = RotaryTable(GEOMETRY.head_dim, 10000.0, steps)
    caches = stack.new_caches(rows, steps, inputs.dtype, "cpu")
    outs = []
    with torch.inference_mode():
        for a, b in [(0, 2), *((p, p + 1) for p in range(2, steps))]:
            outs.append(stack(inputs[:, a:b], Span(caches, a, rows_apart=rows_apart), rope))
    return torch.cat(outs, dim=1)


def _counted(monkeypatch) -> list[bool]:
    """Every stack_step call from the layers, True where it ran."""
    calls, real = [], step_module.stack_step

    def counting(*args):  # noqa: ANN002, ANN202
        out = real(*args)
        calls.append(out is not None)
        return out

    monkeypatch.setattr(layers, "stack_step", counting)
    return calls


def _layer_by_layer(monkeypatch) -> None:
    monkeypatch.setattr(layers, "stack_step", lambda *args: None)


@pytest.fixture(scope="module", params=[8, 4], ids=["8-bit", "4-bit"])
def stacks(request) -> tuple[DecoderStack, DecoderStack]:
    """(the quantized stack, its float64 twin); 4 bits: the 4-bit code predictor's layers."""
    float_stack = _float_stack()
    quantized = _int8(float_stack)
    if request.param == 4:
        if int4_linear() is None:
            pytest.skip("no 4-bit kernel here: 4-bit layers run as 8-bit ones")
        quantized = _int4(quantized)
    return quantized, _dequantized(quantized, float_stack)


def test_within_the_8bit_paths_own_distance_from_float64(stacks, monkeypatch) -> None:
    quantized, exact = stacks
    inputs = torch.randn(3, STEPS, GEOMETRY.hidden_size, generator=torch.Generator().manual_seed(1))
    calls = _counted(monkeypatch)
    native = _passes(quantized, inputs)
    assert calls == [True] * (STEPS - 1)  # every pass, the first (two positions) included
    _layer_by_layer(monkeypatch)
    torch_path = _passes(quantized, inputs)
    reference = _passes(exact, inputs.double(), rows_apart=False)
    apart = float((native.double() - torch_path.double()).norm())
    own = float((torch_path.double() - reference).norm())
    print(f"native vs torch path {apart:.3g}, torch path vs float64 {own:.3g}")
    assert 0 < own and apart <= own, (apart, own)
    assert float((native.double() - reference).norm()) <= 2 * own


def test_a_row_is_the_same_alone_in_a_batch_and_at_any_thread_count(stacks) -> None:
    quantized, _ = stacks
    generator = torch.Generator().manual_seed(2)
    inputs = torch.randn(8, STEPS, GEOMETRY.hidden_size, generator=generator)
    previous = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        together = _passes(quantized, inputs)
        for threads in (1, 2, 3):
            torch.set_num_threads(threads)
            for row in (0, 5, 7):
                alone = _passes(quantized, inputs[row : row + 1])
                assert torch.equal(alone[0], together[row]), (threads, row)
    finally:
        torch.set_num_threads(previous)


def test_rows_at_their_own_positions_equal_each_row_alone(stacks, monkeypatch) -> None:
    """The talker's `Rows`: each row over its own cache at its own position, in one call."""
    quantized, _ = stacks
    rope = RotaryTable(GEOMETRY.head_dim, 10000.0, 64)
    generator = torch.Generator().manual_seed(3)
    lengths = [5, 11, 23]

    def filled(length: int) -> list[KVCache]:  # a row's cache with `length` positions written
        caches = quantized.new_caches(1, 64, torch.float32, "cpu")
        prompt = torch.randn(1, length, GEOMETRY.hidden_size, generator=generator)
        _layer_by_layer(monkeypatch)
        with torch.inference_mode():
            quantized(prompt, Span(caches, 0), rope)
        monkeypatch.undo()
        return caches

    rows = [filled(n) for n in lengths]
    copies = [[KVCache.over(c.k.clone(), c.v.clone()) for c in row] for row in rows]
    x = torch.randn(3, 1, GEOMETRY.hidden_size, generator=generator)
    calls = _counted(monkeypatch)
    with torch.inference_mode():
        together = quantized(x, Rows(rows, lengths), rope)
        alone = [
            quantized(x[r : r + 1], Span(copies[r], n, rows_apart=True), rope)
            for r, n in enumerate(lengths)
        ]
    assert calls == [True] * 4
    for r, n in enumerate(lengths):
        assert torch.equal(together[r : r + 1], alone[r]), r
        for mine, theirs in zip(rows[r], copies[r], strict=True):  # the keys written alike
            assert torch.equal(mine.k[:, :, : n + 1], theirs.k[:, :, : n + 1])
            assert torch.equal(mine.v[:, :, : n + 1], theirs.v[:, :, : n + 1])


def test_more_rows_than_a_call_takes_are_split_with_the_same_bits(stacks, monkeypatch) -> None:
    quantized, _ = stacks
    monkeypatch.setattr(step_module, "MAX_ROWS", 4)
    inputs = torch.randn(5, STEPS, GEOMETRY.hidden_size, generator=torch.Generator().manual_seed(4))
    split = _passes(quantized, inputs)
    monkeypatch.undo()
    assert torch.equal(split, _passes(quantized, inputs))


@pytest.mark.parametrize(
    "case", ["float weights", "unfused", "bfloat16 input", "native off", "past the cache"]
)
def test_where_it_does_not_apply_the_stack_runs_layer_by_layer(stacks, case, monkeypatch) -> None:
    quantized, _ = stacks
    stack, dtype, start, capacity = quantized, torch.float32, 3, STEPS
    if case == "float weights":
        stack = _float_stack()
    elif case == "unfused":
        stack = copy.deepcopy(quantized)
        layer = stack.layers[1].mlp
        gate, up = layer.gate_up_proj.int8_weight().chunk(2)
        layer.gate_up_proj = None
        layer.gate_proj = Int8Linear(gate.float())
        layer.up_proj = Int8Linear(up.float())
    elif case == "bfloat16 input":
        dtype = torch.bfloat16
    elif case == "native off":
        monkeypatch.setenv("TTS_CORE_NATIVE", "0")
    elif case == "past the cache":
        start = capacity
    x = torch.randn(2, 1, GEOMETRY.hidden_size).to(dtype)
    caches = stack.new_caches(2, capacity, torch.float32, "cpu")
    rope = RotaryTable(GEOMETRY.head_dim, 10000.0, 64)
    if case == "native off":
        step_module._kernel.cache_clear()
    try:
        with torch.inference_mode():
            assert step_module.stack_step(stack, x, [caches], [start, start], rope) is None
    finally:
        step_module._kernel.cache_clear()
