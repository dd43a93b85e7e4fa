"""A decoder layer's small operators: fewer calls, the same bits (issue 38, item 3).

From the fused 8-bit projection (`qkv_proj`, what the served CPU model runs), layers.Attention
norms q's and k's heads in one statistics pass and rotates them together with a `Rope` (cos and a
signed sin: a roll instead of rotate_half's slices, negation and concatenation). These tests hold
that path equal, bit for bit, to the separate projections' path and to apply_rope, and bound the
operators a code-predictor pass calls from Python around its projections (torch.profiler's
counts are deterministic, so they are checked on a busy machine too).
"""

from __future__ import annotations

import pytest
import torch
from test_layers_batch_invariance import Geometry  # the 0.6B code predictor's heads, narrow
from torch.profiler import ProfilerActivity, profile, record_function

from tts_core.models.layers import DecoderStack, RotaryTable, Span, apply_rope, rotate
from tts_core.quant.linear import Int8Linear, int8_matmul_available

needs_int8 = pytest.mark.skipif(not int8_matmul_available(), reason="no int8 matmul on this CPU")


def _stack(fused: bool) -> DecoderStack:
    """Random weights (seeded), every projection 8-bit; `fused`: q/k/v and gate/up in one layer
    each, as quantize.py serves them (per-channel weight scales: the same products)."""
    torch.manual_seed(0)
    stack = DecoderStack(Geometry()).eval()
    with torch.no_grad():
        for parameter in stack.parameters():
            parameter.normal_(0, 0.05) if parameter.dim() > 1 else parameter.uniform_(0.5, 1.5)
    for layer in stack.layers:
        attn, mlp = layer.self_attn, layer.mlp
        if fused:
            parts = (attn.q_proj, attn.k_proj, attn.v_proj)
            attn.qkv_proj = Int8Linear(torch.cat([p.weight for p in parts]))
            mlp.gate_up_proj = Int8Linear(torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight]))
        for owner, name in [(attn, n) for n in ("q_proj", "k_proj", "v_proj", "o_proj")] + [
            (mlp, n) for n in ("gate_proj", "up_proj", "down_proj")
        ]:
            setattr(owner, name, Int8Linear.from_linear(getattr(owner, name)))
    return stack


def _passes(stack: DecoderStack, inputs: torch.Tensor) -> list[torch.Tensor]:
    """The code predictor's pattern: positions 0-1 at once, then one position per pass."""
    rows, steps = inputs.shape[:2]
    rope = RotaryTable(Geometry.head_dim, 10000.0, steps)
    caches = stack.new_caches(rows, steps, torch.float32, "cpu")
    starts = [(0, 2), *((p, p + 1) for p in range(2, steps))]
    with torch.inference_mode():
        return [stack(inputs[:, a:b], Span(caches, a), rope) for a, b in starts]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_rotate_is_apply_rope_bit_for_bit(dtype: torch.dtype) -> None:
    table = RotaryTable(Geometry.head_dim, 1_000_000.0, 32)
    x = torch.randn(3, 7, 24, Geometry.head_dim, generator=torch.Generator().manual_seed(3))
    x = x.to(dtype).transpose(1, 2)  # (B, heads, T, D), strided as Attention.qkv makes it
    cos, sin = table.cos[5:12].to(dtype), table.sin[5:12].to(dtype)
    expected = apply_rope(x, cos, sin)
    assert torch.equal(rotate(x, table.window(5, 7, dtype)), expected)
    assert torch.equal(rotate(x, (cos, sin)), expected)  # a plain (cos, sin): apply_rope


@needs_int8
@pytest.mark.parametrize("rows", [1, 3])
def test_fused_projections_keep_the_bits_of_the_separate_ones(rows: int) -> None:
    inputs = torch.randn(rows, 6, Geometry.hidden_size, generator=torch.Generator().manual_seed(1))
    fused, separate = _passes(_stack(True), inputs), _passes(_stack(False), inputs)
    for index, (a, b) in enumerate(zip(fused, separate, strict=True)):
        assert torch.equal(a, b), index


def timed_projections(stack: DecoderStack) -> DecoderStack:
    """The stack with each layer's four projections wrapped in Timed (profiler-labelled)."""
    for layer in stack.layers:
        layer.self_attn.qkv_proj = Timed(layer.self_attn.qkv_proj)
        layer.self_attn.o_proj = Timed(layer.self_attn.o_proj)
        layer.mlp.gate_up_proj = Timed(layer.mlp.gate_up_proj)
        layer.mlp.down_proj = Timed(layer.mlp.down_proj)
    return stack


class Timed(torch.nn.Module):
    """A projection under a profiler label, so that its own operators are not counted."""

    def __init__(self, inner: torch.nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with record_function("projection"):
            return self.inner(x)


@needs_int8
def test_a_code_predictor_pass_calls_few_operators_around_its_projections() -> None:
    """One pass (one position, 2 layers): the operators called from Python outside the 8-bit
    projections, per layer. 71 before (the q and k RMSNorms apart, each with promote_types and
    two casts that change nothing in float32; rotate_half on q and on k; three reshapes), 44 now:
    RMSNorm 6 (input, post-attention) and 9 for q and k together, RoPE 4, the head views 6, the
    cache write 6, attention 1 and its merge 1, the MLP 3, two residual adds."""
    stack = timed_projections(_stack(True))
    rope = RotaryTable(Geometry.head_dim, 10000.0, 4)
    caches = stack.new_caches(1, 4, torch.float32, "cpu")
    x = torch.randn(1, 1, Geometry.hidden_size)
    with torch.inference_mode():
        stack(torch.randn(1, 2, Geometry.hidden_size), Span(caches, 0), rope)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            stack(x, Span(caches, 2), rope)
    calls = [e.name for e in prof.events() if e.cpu_parent is None and e.name != "projection"]
    around = len(calls) - 8  # the final norm (6) and the RoPE window (2 slices)
    assert around / Geometry.num_hidden_layers <= 44, sorted(calls)
