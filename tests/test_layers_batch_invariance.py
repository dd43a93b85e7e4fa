"""A batch row's result must not depend on the other rows (the batch scheduler's promise).

torch's CPU attention kernel does not keep it: one query over 8-16 keys (the code predictor's
passes, head_dim 128) can come out different in the last bit with 2-16 rows than alone, and at
real size that flipped a sampled code (benchmarks/batch_bench.py --sweep: 3/4 streams
identical at 4 rows). `rows_apart=True` runs attention row by row with the call one row alone
makes; these tests hold it equal, bit for bit, to each row run alone. The projections are
8-bit, as the served CPU model's are: their integer sums are exact per row (float GEMMs round
by batch shape, which is why float layers run row by row there too).
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch

from tts_core.models.layers import Attention, DecoderStack, RotaryTable, causal_mask
from tts_core.models.qwen3_tts.int8 import Int8Linear


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
        return [stack.run_layers(inputs[:, a:b], rope, caches, a, rows_apart=rows_apart)[:, -1]
                for a, b in starts]  # fmt: skip


@pytest.mark.parametrize("rows", [2, 4, 8])
def test_attention_rows_apart_gives_each_row_what_it_gets_alone(rows: int) -> None:
    """The kernel itself (o_proj left out): every key count 1-16, one query or two (causal)."""
    attention = Attention(Geometry.hidden_size, 16, 8, Geometry.head_dim)
    attention.o_proj = torch.nn.Identity()
    generator = torch.Generator().manual_seed(rows)
    for keys in range(1, 17):
        for queries in (1, 2)[:keys]:
            q = torch.randn(rows, 16, queries, Geometry.head_dim, generator=generator)
            k, v = (torch.randn(rows, 8, keys, Geometry.head_dim, generator=generator)
                    for _ in range(2))  # fmt: skip
            mask = causal_mask(queries, keys - queries, q.device)
            together = attention.attend(q, k, v, mask, rows_apart=True)
            for r in range(rows):
                alone = attention.attend(q[r : r + 1], k[r : r + 1], v[r : r + 1], mask)
                assert torch.equal(together[r : r + 1], alone), (keys, queries, r)


@pytest.mark.parametrize("rows", [2, 4, 8])
def test_stack_rows_apart_gives_each_row_what_it_gets_alone(rows: int) -> None:
    stack = _stack()
    inputs = torch.randn(rows, 16, Geometry.hidden_size, generator=torch.Generator().manual_seed(1))
    together = _passes(stack, inputs, rows_apart=True)
    for row in range(rows):
        alone = _passes(stack, inputs[row : row + 1], rows_apart=False)
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
