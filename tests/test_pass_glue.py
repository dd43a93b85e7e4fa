"""The operators between a code-predictor pass's 8-bit projections: fewer, the same bits (issue 38,
item 3).

A 0.6B frame is 15 passes of a 5-layer stack at one position; on the CPU each small aten operator
costs ~1-4 us, so the glue between the projections is a fixed share of every frame. These tests
hold what cuts it equal, bit for bit, to what it replaced, and bound the operators a pass runs
outside its projections (torch.profiler's counts are deterministic: checked on a busy machine
too): RMSNorm's mean and eps as ATen's own sum, then addcdiv with 0-dim constants (no Python
number wrapped into a tensor at each call), q_norm's and k_norm's weights in one multiply, q and
k split in one call, and a short KV cache's views (the code predictor's 16 positions) and a
decode step's RoPE rows made once.
"""

from __future__ import annotations

import pytest
import torch
from test_layers_batch_invariance import Geometry
from test_step_ops import _stack, timed_projections
from torch.profiler import ProfilerActivity, profile

from tts_core.models.layers import Attention, KVCache, RMSNorm, RotaryTable, Span
from tts_core.quant.linear import int8_matmul_available

needs_int8 = pytest.mark.skipif(not int8_matmul_available(), reason="no int8 matmul on this CPU")


def _mean_norm(norm: RMSNorm, x: torch.Tensor) -> torch.Tensor:
    """RMSNorm.normalize as it was: torch's mean and a Python eps."""
    wide = x if x.dtype in (torch.float32, torch.float64) else x.float()
    wide = wide * wide.pow(2).mean(-1, keepdim=True).add_(norm.eps).rsqrt_()
    return wide if wide.dtype == x.dtype else wide.to(x.dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("size", [1, 3, 128, 1000, 1024, 2048])
def test_normalize_keeps_the_bits_of_mean(dtype: torch.dtype, size: int) -> None:
    generator = torch.Generator().manual_seed(size)
    norm = RMSNorm(size, 1e-6)
    for scale in (1e-4, 1.0, 3e3):
        x = (torch.randn(5, 3, size, generator=generator) * scale).to(dtype)
        with torch.inference_mode():
            assert torch.equal(norm.normalize(x), _mean_norm(norm, x))
        assert torch.equal(norm.normalize(x), _mean_norm(norm, x))  # outside inference mode too


def _attention() -> Attention:
    attention = Attention(64, 4, 2, 16, qk_norm_eps=1e-6)
    with torch.no_grad():
        attention.q_norm.weight.uniform_(0.5, 1.5)
        attention.k_norm.weight.uniform_(0.5, 1.5)
    return attention


def _separate_weights(attention: Attention, qk: torch.Tensor) -> torch.Tensor:
    """_norm_qk as it was: each weight on its slice of heads."""
    normed = attention.q_norm.normalize(qk)
    normed[:, :, : attention.heads].mul_(attention.q_norm.weight)
    normed[:, :, attention.heads :].mul_(attention.k_norm.weight)
    return normed


def test_qk_norm_in_one_multiply_follows_its_weights() -> None:
    attention = _attention()
    qk = torch.randn(2, 3, 6, 16, generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        assert torch.equal(attention._norm_qk(qk), _separate_weights(attention, qk))
        made = attention._qk_weight()
        assert made is not None and attention._qk_weight() is made  # made once
    with torch.no_grad():  # a weight written in place (load_state_dict copies)
        attention.k_norm.weight.mul_(2.0)
    with torch.inference_mode():
        assert torch.equal(attention._norm_qk(qk), _separate_weights(attention, qk))
    attention.double()  # moved: .to() keeps the Parameter objects, with new data
    with torch.inference_mode():
        wide = qk.double()
        assert torch.equal(attention._norm_qk(wide), _separate_weights(attention, wide))
        assert attention._qk_weight().dtype == torch.float64


def test_a_short_cache_keeps_its_views_and_follows_new_storage() -> None:
    cache = KVCache(1, 2, 4, 8, torch.float32, "cpu")
    k, v = torch.ones(1, 2, 1, 8), torch.full((1, 2, 1, 8), 2.0)
    keys, values = cache.write(1, k, v)
    assert keys.shape[2] == 2 and torch.equal(cache.k[:, :, 1:2], k)
    assert cache.write(1, k, v)[0] is keys  # the same view again
    cache.k, cache.v = torch.zeros(1, 2, 4, 8), torch.zeros(1, 2, 4, 8)  # as tada's codec does
    keys, _ = cache.write(1, k * 3, v)
    assert keys.data_ptr() == cache.k.data_ptr() and torch.equal(cache.k[:, :, 1:2], k * 3)
    with pytest.raises(RuntimeError, match="overflow"):
        cache.write(4, k, v)


def test_a_decode_steps_rope_rows_are_kept_until_the_table_moves() -> None:
    table = RotaryTable(16, 10000.0, 8)
    window = table.window(3, 1, torch.float32)
    assert table.window(3, 1, torch.float32) is window
    assert torch.equal(window.cos, table.cos[3:4])
    table.double()
    moved = table.window(3, 1, torch.float32)
    assert moved is not window and torch.equal(moved.cos, window.cos)


def _glue_per_layer(stack: torch.nn.Module) -> tuple[float, float]:
    """(operators called from Python, operators in all) of one pass at one position, outside the
    8-bit projections, per layer (the stack's final norm and RoPE rows included)."""
    timed_projections(stack)
    rope = RotaryTable(Geometry.head_dim, 10000.0, 4)
    caches = stack.new_caches(1, 4, torch.float32, "cpu")
    with torch.inference_mode():
        stack(torch.randn(1, 2, Geometry.hidden_size), Span(caches, 0), rope)
        x = torch.randn(1, 1, Geometry.hidden_size)
        stack(x, Span(caches, 2), rope)  # a frame's passes: the positions of the one before
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            stack(x, Span(caches, 2), rope)
    events = [e for e in prof.events() if not _inside_projection(e)]
    called = [e for e in events if e.cpu_parent is None]
    layers = Geometry.num_hidden_layers
    return len(called) / layers, len(events) / layers


def _inside_projection(event) -> bool:  # noqa: ANN001
    while event is not None:
        if event.name == "projection":
            return True
        event = event.cpu_parent
    return False


@needs_int8
def test_a_code_predictor_pass_runs_few_operators_outside_its_projections() -> None:
    """Before: 48 calls from Python and 143.5 operators in all per layer (RMSNorm's mean
    wrapping its count and the Python eps into tensors and casting them; each weight of the q/k
    norm on its slice; the cache's four slices); now 39 and 92.5."""
    called, everything = _glue_per_layer(_stack(True))
    assert called <= 39, called
    assert everything <= 92.5, everything
