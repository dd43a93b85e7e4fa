"""Turbo T3's GPT-2 decode step: fewer operators, the same bits (issue 38, item 5).

A step's q, k and v are views of c_attn's one output, its keys and values go to the cache with
one copy (`FusedKV`), one position's heads merge with one reshape, wpe's rows are a slice and
gelu_new works in place on one temporary; the caches are not zeroed. `reference_stack` below is the step as it was (HF
GPT2Attention's split, views and transposes, a KVCache write of k and of v, wpe by embedding,
gelu_new out of place): every hidden state must be equal to it, bit for bit, over a prefill,
steps after it and a batched step. The operators a step calls from Python are counted by
torch.profiler (deterministic: checked on a busy machine too).
"""

from __future__ import annotations

import math

import pytest
import torch
from test_step_ops import Timed  # a projection under a profiler label
from torch.profiler import ProfilerActivity, profile

from tts_core.models.chatterbox.gpt2 import GPT2Stack
from tts_core.models.layers import KVCache, causal_mask, scaled_dot_product
from tts_core.quant.linear import Int8Linear, int8_matmul_available

HIDDEN, HEADS, LAYERS, POSITIONS = 64, 4, 3, 32


def _stack(int8: bool) -> GPT2Stack:
    """Random weights (seeded); `int8`: every projection an Int8Linear, as quant.py serves T3."""
    torch.manual_seed(0)
    stack = GPT2Stack(HIDDEN, HEADS, LAYERS, POSITIONS).eval()
    with torch.no_grad():
        for parameter in stack.parameters():
            parameter.normal_(0, 0.2)
    if int8:
        for block in stack.h:
            for owner, name in ((block.attn, "c_attn"), (block.attn, "c_proj")) + (
                (block.mlp, "c_fc"),
                (block.mlp, "c_proj"),
            ):
                conv = getattr(owner, name)
                linear = torch.nn.Linear(*conv.weight.shape)
                linear.weight.data, linear.bias.data = conv.weight.t().contiguous(), conv.bias
                setattr(owner, name, Int8Linear.from_linear(linear))
    return stack


def _reference_gelu(x: torch.Tensor) -> torch.Tensor:
    return (
        0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))
    )


def reference_stack(stack: GPT2Stack, embeds, caches: list[KVCache], start):  # noqa: ANN001, ANN201
    """GPT2Stack.forward as it was before the fused cache (module doc); `start` an int."""
    positions = torch.arange(start, start + embeds.shape[1])
    x = embeds + stack.wpe(positions)[None]
    for block, cache in zip(stack.h, caches, strict=True):
        attn, batch, steps = block.attn, x.shape[0], x.shape[1]
        q, k, v = attn.c_attn(block.ln_1(x)).split(HIDDEN, dim=2)
        q, k, v = (t.view(batch, steps, HEADS, HIDDEN // HEADS).transpose(1, 2) for t in (q, k, v))
        keys, values = cache.write(start, k, v)
        if steps > 1 and start != 0:
            out = scaled_dot_product(q, keys, values, mask=causal_mask(steps, start, q.device))
        else:
            out = scaled_dot_product(q, keys, values, is_causal=steps > 1)
        x = x + attn.c_proj(out.transpose(1, 2).reshape(batch, steps, HIDDEN))
        x = x + block.mlp.c_proj(_reference_gelu(block.mlp.c_fc(block.ln_2(x))))
    return stack.ln_f(x)


def _caches(stack: GPT2Stack, fused: bool, rows: int = 1) -> list:
    """`fused`: the stack's own caches, filled with NaN (a position read before it is written
    would show in every later output); else the zeroed KVCaches of the step before."""
    if fused:
        caches = stack.new_caches(rows, POSITIONS, torch.float32, "cpu")
        for cache in caches:
            cache.kv.fill_(float("nan"))
        return caches
    return [KVCache(rows, HEADS, POSITIONS, HIDDEN // HEADS, torch.float32, "cpu") for _ in stack.h]


@pytest.mark.parametrize(
    "int8",
    [
        False,
        pytest.param(True, marks=pytest.mark.skipif(not int8_matmul_available(), reason="int8")),
    ],
)
def test_a_step_keeps_the_bits_of_the_step_before(int8: bool) -> None:
    """A voice prefix (from 0), the text after it (a masked pass), then single steps and a
    batched step of two rows (each row its own cache and position)."""
    stack, generator = _stack(int8), torch.Generator().manual_seed(1)
    ours, before = _caches(stack, True), _caches(stack, False)
    spans = [(0, 5), (5, 9), *((p, p + 1) for p in range(9, 14))]
    with torch.inference_mode():
        for a, b in spans:
            embeds = torch.randn(1, b - a, HIDDEN, generator=generator)
            got, expected = stack(embeds, ours, a), reference_stack(stack, embeds, before, a)
            assert torch.equal(got, expected), (a, b)
        other = _caches(stack, True)
        stack(torch.randn(1, 3, HIDDEN, generator=generator), other, 0)
        embeds = torch.randn(2, 1, HIDDEN, generator=generator)
        together = stack(embeds, [list(pair) for pair in zip(ours, other, strict=True)], [14, 3])
        assert torch.equal(together[:1], reference_stack(stack, embeds[:1], before, 14))


def test_a_new_cache_is_not_written() -> None:
    """A request's caches are not zeroed (FusedKV): no fill in their making (the NaN-filled
    caches above hold the bits, so nothing unwritten is read)."""
    stack = _stack(False)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        stack.new_caches(1, POSITIONS, torch.float32, "cpu")
    names = {e.name for e in prof.events()}
    assert not names & {"aten::zero_", "aten::fill_", "aten::zeros"}, names


def test_a_decode_step_calls_few_operators_around_its_projections() -> None:
    """One position through the stack: the operators called from Python outside the four
    projections, per layer. 28 before (split, three views and three transposes; a cache write
    of k and of v with four slices; transpose and reshape to merge the heads; gelu_new's eight
    ops), 22 now: the LayerNorms 2, the head views 3 (view, permute, q's select), the cache
    store 4 (k/v slice, narrow, copy, narrow + unbind), attention 1 and its merge 1, gelu_new
    8, two residual adds; plus wpe's slice and add and ln_f."""
    stack = _stack(False)
    for block in stack.h:
        for owner in (block.attn, block.mlp):
            owner.c_proj = Timed(owner.c_proj)
        block.attn.c_attn, block.mlp.c_fc = Timed(block.attn.c_attn), Timed(block.mlp.c_fc)
    caches, x = _caches(stack, True), torch.randn(1, 1, HIDDEN)
    with torch.inference_mode():
        stack(torch.randn(1, 4, HIDDEN), caches, 0)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            stack(x, caches, 4)
    calls = [e.name for e in prof.events() if e.cpu_parent is None and e.name != "projection"]
    around = len(calls) - 3  # wpe's slice and add, ln_f
    assert around / LAYERS <= 22, sorted(calls)
