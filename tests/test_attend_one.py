"""The one-query attention kernel (models/attend_one.py, native/attend_one.c): within its
rounding bound of the exact attention, a row the same alone and in any batch and at any thread
count, and SDPA wherever it does not apply."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tts_core.models import attend_one as kernel_module
from tts_core.models.attend_one import attend_one
from tts_core.models.layers import Attention, Rows, Span

pytestmark = pytest.mark.skipif(
    kernel_module._kernel() is None, reason="the kernel needs AVX-512 (F, DQ) and a C compiler"
)
U = 2.0**-24  # float32's unit roundoff


def _cache(rows: int, kv: int, capacity: int, dim: int, seed: int) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(rows, kv, capacity, dim, generator=g) for _ in range(2))


def _bound(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dot_roundings: int = 14, sum_extra: int = 2
) -> float:
    """A rounding bound on an output element of float32 attention, each step rounded once (any
    x86-64 CPU: IEEE float32 multiplies, adds, divides and square roots round alike; only the
    order of the sums differs between implementations, and each order has its own count).
    * A score: `dot_roundings` roundings of at most u S each, S = scale * max_j sum_d
      |q_d k_jd|. The kernel: 1 product, 8 chained adds a lane, a 4-level lane tree, the scale
      = 14; any order of D products (SDPA's GEMM) at most D + 1.
    * A relative error e on the scores moves each softmax weight by <= 2e relative and the
      output by <= 2e max|v|. exp's relative error: the range reduction (t
      off by <= 2 u |t|, |t| <= ln2/2), a degree-8 Horner (2 roundings a degree on terms
      shrinking by |t|: < 3 u), the product with 2^k (1) and the truncation (< 2.1e-10): under
      4 u; 8 u is allowed a weight (twice that), and SDPA's exp is within 1 ulp.
    * The weighted sum over n keys: 1 product and n chained adds, then the division, plus
      `sum_extra` (SDPA's online rescaling) roundings of at most u max|v| each."""
    scale = q.shape[-1] ** -0.5
    group = q.shape[1] // k.shape[1]
    wide = k.double().repeat_interleave(group, dim=1)
    spread = (q.double().abs() @ wide.abs().transpose(-1, -2)).max().item() * scale
    largest = v.abs().max().item()
    return U * largest * (2 * (dot_roundings * spread + 8) + k.shape[2] + sum_extra)


def _sdpa_bound(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> float:
    """_bound for SDPA's CPU kernel in any summation order: D + 1 roundings a score, and two more
    in its weighted sum (the online softmax's rescale)."""
    return _bound(q, k, v, dot_roundings=q.shape[-1] + 1, sum_extra=4)


@pytest.mark.parametrize(
    ("rows", "keys", "capacity"), [(1, 1, 4), (1, 9, 17), (3, 17, 17), (2, 230, 1024)]
)
def test_within_its_rounding_bound_of_the_exact_attention(rows, keys, capacity) -> None:
    k_cache, v_cache = _cache(rows, 8, capacity, 128, seed=keys)
    q = torch.randn(rows, 16, 1, 128, generator=torch.Generator().manual_seed(1))
    k, v = k_cache[:, :, :keys], v_cache[:, :, :keys]
    ours = attend_one(q, [k], [v])
    exact = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), enable_gqa=True)
    error = (ours.double() - exact).abs().max().item()
    assert 0 < _bound(q, k, v) and error <= _bound(q, k, v)
    # and it is the same attention SDPA computes, to within both roundings
    sdpa = F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    assert (ours - sdpa).abs().max().item() <= _bound(q, k, v) + _sdpa_bound(q, k, v)


def test_a_row_is_the_same_alone_in_a_batch_and_at_any_thread_count() -> None:
    k_cache, v_cache = _cache(3, 8, 64, 128, seed=5)
    q = torch.randn(3, 16, 1, 128, generator=torch.Generator().manual_seed(2))
    lengths = (40, 7, 64)
    keys = [k_cache[r : r + 1, :, :n] for r, n in enumerate(lengths)]
    values = [v_cache[r : r + 1, :, :n] for r, n in enumerate(lengths)]
    together = attend_one(q, keys, values)
    for r in range(3):
        alone = attend_one(q[r : r + 1], keys[r : r + 1], values[r : r + 1])
        assert torch.equal(together[r : r + 1], alone)
    threads = torch.get_num_threads()
    try:
        for count in (1, 2, 3):
            torch.set_num_threads(count)
            assert torch.equal(attend_one(q, keys, values), together)
    finally:
        torch.set_num_threads(threads)


def test_rows_of_one_cache_block_equal_rows_given_one_by_one() -> None:
    k_cache, v_cache = _cache(2, 8, 17, 128, seed=7)
    q = torch.randn(2, 16, 1, 128, generator=torch.Generator().manual_seed(3))
    k, v = k_cache[:, :, :9], v_cache[:, :, :9]
    assert torch.equal(attend_one(q, [k], [v]), attend_one(q, [k[:1], k[1:]], [v[:1], v[1:]]))


@pytest.mark.parametrize(
    "case",
    [
        "bfloat16",
        "two queries",
        "head size 40",
        "head size 272",
        "elements strided",
        "kv heads differ",
    ],
)
def test_where_it_does_not_apply_it_answers_none(case) -> None:
    k, v = _cache(1, 8, 16, 128, seed=9)
    q = torch.randn(1, 16, 1, 128)
    if case == "bfloat16":
        q, k, v = q.bfloat16(), k.bfloat16(), v.bfloat16()
    elif case == "two queries":
        q = torch.randn(1, 16, 2, 128)
    elif case == "head size 40":
        q, k, v = q[..., :40], k[..., :40], v[..., :40]
    elif case == "head size 272":
        q, k, v = (torch.randn(*t.shape[:3], 272) for t in (q, k, v))
    elif case == "elements strided":
        k = torch.randn(1, 8, 16, 256)[..., ::2]
    elif case == "kv heads differ":
        v = v[:, :4]
    assert attend_one(q, [k], [v]) is None


def _sdpa_by_row(attention: Attention, q, k, v) -> torch.Tensor:
    rows = zip(q.split(1), k.split(1), v.split(1), strict=True)
    outs = [F.scaled_dot_product_attention(*row, enable_gqa=True) for row in rows]
    return attention._merge(torch.cat(outs))


@pytest.mark.parametrize("native", ["0", "1"])
def test_without_native_code_or_rows_apart_the_layer_runs_sdpa(monkeypatch, native) -> None:
    """TTS_CORE_NATIVE=0: rows apart are SDPA's numbers row by row, exactly; without rows_apart
    (the captured static step, whose compiled graph traces SDPA) SDPA in either case."""
    monkeypatch.setenv("TTS_CORE_NATIVE", native)
    kernel_module._kernel.cache_clear()
    try:
        attention = Attention(hidden=256, heads=2, kv_heads=1, head_dim=128, bias=False)
        g = torch.Generator().manual_seed(4)
        q, k, v = (torch.randn(2, h, 1 if h == 2 else 5, 128, generator=g) for h in (2, 1, 1))
        with torch.inference_mode():
            apart = attention.attend(q, k, v, rows_apart=True)
            batched = attention.attend(q, k, v)
            plain = attention._merge(F.scaled_dot_product_attention(q, k, v, enable_gqa=True))
            assert torch.equal(batched, plain)
            by_row = _sdpa_by_row(attention, q, k, v)
        if native == "0":
            assert torch.equal(apart, by_row)
        else:
            assert torch.equal(apart, attention._merge(attend_one(q, [k], [v])))
    finally:
        kernel_module._kernel.cache_clear()


def test_the_layers_use_it_for_one_query(monkeypatch) -> None:
    """Span (the code predictor's rows apart) and Rows (the talker's rows) each make one call
    for every row, and their result is the kernel's."""
    calls = []
    real = kernel_module.attend_one

    def counting(q, keys, values):
        calls.append(q.shape[0])
        return real(q, keys, values)

    monkeypatch.setattr("tts_core.models.layers.attend_one", counting)
    attention = Attention(hidden=256, heads=2, kv_heads=1, head_dim=128, bias=False)
    q, k, v = torch.randn(2, 2, 1, 128), torch.randn(2, 1, 1, 128), torch.randn(2, 1, 1, 128)
    from tts_core.models.layers import KVCache

    caches = [
        [KVCache.over(torch.zeros(1, 1, 8, 128), torch.zeros(1, 1, 8, 128))] for _ in range(2)
    ]
    with torch.inference_mode():
        Rows(caches, [3, 5]).attend(attention, 0, q, k, v)
        shared = KVCache.over(torch.zeros(2, 1, 8, 128), torch.zeros(2, 1, 8, 128))
        Span([shared], 2, rows_apart=True).attend(attention, 0, q, k, v)
    assert calls == [2, 2]
