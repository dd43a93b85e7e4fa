"""A batch row's result must not depend on the other rows (the batch scheduler's promise).

torch's CPU attention kernel does not keep it: one query over 8-16 keys (the code predictor's
passes, head_dim 128) can come out different in the last bit with 2-16 rows than alone, and at
real size that flipped a sampled code (benchmarks/batch_bench.py --sweep: 3/4 streams
identical at 4 rows). `rows_apart=True` runs one query a row through models/attend_one.py
(every row in one call, apart by construction) and anything else row by row with SDPA; these
tests hold each row equal, bit for bit, to the row run alone by the same single-stream call
(rows_apart with one row: what the engine runs for one request). The projections are
8-bit, as the served CPU model's are: their integer sums are exact per row (float GEMMs round
by batch shape, which is why float layers run row by row there too).
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch

from tts_core.models.layers import Attention, DecoderStack, RotaryTable, Span, causal_mask
from tts_core.quant.linear import Int8Linear, int8_matmul_available


@dataclass(frozen=True)
class Geometry:  # the 0.6B code predictor's attention (16 x 128 heads over 8 kv heads), narrow
    hidden_size: int = 256
    intermediate_size: int = 512
    num_attention_heads: int = 16
    num_key_value_heads: int = 8
    num_hidden_layers: int = 2
    head_dim: int = 128
    rms_norm_eps: float = 1e-6


def _stack() -> DecoderStack:
    torch.manual_seed(0)
    stack = DecoderStack(Geometry()).eval()
    with torch.no_grad():
        for parameter in stack.parameters():
            parameter.normal_(0, 0.05) if parameter.dim() > 1 else parameter.uniform_(0.5, 1.5)
    for owner in list(stack.modules()):
        for name, child in list(owner.named_children()):
            if isinstance(child, torch.nn.Linear):
                setattr(owner, name, Int8Linear.from_linear(child))
    return stack


def _passes(stack: DecoderStack, inputs: torch.Tensor, rows_apart: bool) -> list[torch.Tensor]:
    """inputs (B, 16, H) through the code predictor's pattern: positions 0-1 at once, then one
    position per pass up to 15, over a static cache; each pass's last hidden (B, H)."""
    rows, steps = inputs.shape[:2]
    rope = RotaryTable(Geometry.head_dim, 10000.0, steps)
    caches = stack.new_caches(rows, steps, torch.float32, "cpu")
    starts = [(0, 2), *((p, p + 1) for p in range(2, steps))]
    with torch.inference_mode():
        return [
            stack(inputs[:, a:b], Span(caches, a, rows_apart=rows_apart), rope)[:, -1]
            for a, b in starts
        ]


@pytest.fixture(autouse=True)
def _threads_that_make_the_kernel_vary():
    """At least 2 intra-op threads: with 1 (the tiny-model tests set 1 for the whole session)
    torch's CPU attention kernel gives a row the same bits in any batch here, and a broken
    rows_apart would go unseen. With 2 it changes the last bits of ~1/3 of these cases (2-core
    AMD EPYC, AVX-512)."""
    previous = torch.get_num_threads()
    torch.set_num_threads(max(2, previous))
    yield
    torch.set_num_threads(previous)


def _cases(rows: int, seed: int):
    """(q, k, v, mask): every key count 1-16, one query or two (causal), `rows` rows."""
    generator = torch.Generator().manual_seed(seed)
    for keys in range(1, 17):
        for queries in (1, 2)[:keys]:
            q = torch.randn(rows, 16, queries, Geometry.head_dim, generator=generator)
            k, v = (
                torch.randn(rows, 8, keys, Geometry.head_dim, generator=generator) for _ in range(2)
            )
            yield q, k, v, causal_mask(queries, keys - queries, q.device)


@pytest.mark.parametrize("rows", [2, 4, 8])
def test_attention_rows_apart_gives_each_row_what_it_gets_alone(rows: int, monkeypatch) -> None:
    """The kernel itself (o_proj left out). For every row of a rows_apart call: the bits of the
    same row attended alone, whatever the other rows hold (here: other random rows), and either
    one call of the one-query kernel for every row or one SDPA call of one row. The plain
    batched call, which the same comparison catches where it differs, is counted as the
    evidence that the comparison can fail on this CPU."""
    from tts_core.models import layers

    attention = Attention(Geometry.hidden_size, 16, 8, Geometry.head_dim)
    attention.o_proj = torch.nn.Identity()
    calls: list[tuple[str, int]] = []
    kernels = {"sdpa": layers.scaled_dot_product, "attend_one": layers.attend_one}

    def counting(name):  # noqa: ANN001, ANN202
        def call(q, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
            out = kernels[name](q, *args, **kwargs)
            calls.append((name, q.shape[0]) if out is not None else ("none", q.shape[0]))
            return out

        return call

    batched_differs = cases = 0
    others = _cases(rows, seed=100 + rows)
    for q, k, v, mask in _cases(rows, seed=rows):
        alone = [
            attention.attend(q[r : r + 1], k[r : r + 1], v[r : r + 1], mask, rows_apart=True)
            for r in range(rows)
        ]
        batched = attention.attend(q, k, v, mask)
        monkeypatch.setattr(layers, "scaled_dot_product", counting("sdpa"))
        monkeypatch.setattr(layers, "attend_one", counting("attend_one"))
        calls.clear()
        together = attention.attend(q, k, v, mask, rows_apart=True)
        made = [call for call in calls if call[0] != "none"]
        assert made in ([("attend_one", rows)], [("sdpa", 1)] * rows), made
        monkeypatch.setattr(layers, "scaled_dot_product", kernels["sdpa"])
        monkeypatch.setattr(layers, "attend_one", kernels["attend_one"])
        oq, ok, ov, _ = next(others)  # other neighbours of the same shapes
        for r in range(rows):
            cases += 1
            batched_differs += not torch.equal(batched[r : r + 1], alone[r])
            assert torch.equal(together[r : r + 1], alone[r]), (q.shape, k.shape, r)
            at = (r + 1) % rows  # row r at another place, among the other rows
            mq, mk, mv = oq.clone(), ok.clone(), ov.clone()
            mq[at], mk[at], mv[at] = q[r], k[r], v[r]
            elsewhere = attention.attend(mq, mk, mv, mask, rows_apart=True)
            assert torch.equal(elsewhere[at : at + 1], alone[r]), (q.shape, k.shape, r)
    print(
        f"{rows} rows: the plain batched kernel differs from alone in {batched_differs} of "
        f"{cases} rows at {torch.get_num_threads()} threads; rows_apart in none"
    )


@pytest.mark.skipif(
    not int8_matmul_available(),
    reason="no int8 matmul on this CPU "
    "(torch._int_mm): the stack with 8-bit projections is not checked here "
    "(its attention is, by the test above)",
)
@pytest.mark.parametrize("rows", [2, 4, 8])
def test_stack_rows_apart_gives_each_row_what_it_gets_alone(rows: int) -> None:
    stack = _stack()
    inputs = torch.randn(rows, 16, Geometry.hidden_size, generator=torch.Generator().manual_seed(1))
    together = _passes(stack, inputs, rows_apart=True)
    for row in range(rows):
        alone = _passes(stack, inputs[row : row + 1], rows_apart=True)
        for pass_index, (batched, single) in enumerate(zip(together, alone, strict=True)):
            assert torch.equal(batched[row : row + 1], single), (row, pass_index)


def test_rows_apart_is_the_same_math() -> None:
    """Row by row or batched, the attention is the same function (checked on the kernel: through
    8-bit projections a last-bit change may flip one activation's rounding, which no float32
    bound covers). Error model, per implementation, float32 unit roundoff u = 2^-24: a score
    q.k / sqrt(D) is off by at most D u sum|q_i k_i| / sqrt(D); scores all off by <= d move
    each softmax weight by a factor within e^(+-2d), so the output sum_j p_j v_j by <= 2 d
    max|v|; the softmax and the weighted sum add <= (L + 4) u max|v|. Two implementations
    differ by at most twice that; any CPU's kernel stays inside it."""
    attention = Attention(Geometry.hidden_size, 16, 8, Geometry.head_dim)
    attention.o_proj = torch.nn.Identity()
    generator = torch.Generator().manual_seed(2)
    u, dim = 2.0**-24, Geometry.head_dim
    for keys in range(1, 17):
        q = torch.randn(4, 16, 1, dim, generator=generator)
        k, v = (torch.randn(4, 8, keys, dim, generator=generator) for _ in range(2))
        apart = attention.attend(q, k, v, rows_apart=True)
        batched = attention.attend(q, k, v)
        magnitudes = q.abs() @ k.abs().repeat_interleave(2, dim=1).transpose(-1, -2)
        score_error = dim * u * float(magnitudes.max()) / dim**0.5
        bound = 2 * (2 * score_error + (keys + 4) * u) * float(v.abs().max())
        assert float((apart - batched).abs().max()) <= bound, keys
