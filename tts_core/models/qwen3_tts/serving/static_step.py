"""The capture-ready decode step: one frame for a batch bucket of B rows with static shapes.

One call = the talker at one new position for each row (`StaticRows` over the slot cache:
k/v written at per-row positions by tensor indexing, attention over the slot's whole static
length under the mask key_pos <= position), c0 chosen from its logits, then the code
predictor's 15 passes over a static-size cache (`Span` with Python-int starts: static shapes
per pass). Sampling runs without host synchronisation: no `.item()`, no branching on tensor
values; each row's parameters are tensors (`RowSampling`) and its random numbers are drawn
before the step from the row's own generator in the order the eager path draws them (c0, then
passes 1..15: `predraw`), so seeded output matches the eager path. Padded rows of a bucket
point at the scratch slot. It is the step CUDA graphs capture per bucket (cuda_graphs.py) and
that tests/qwen3/test_capture_ready.py compiles with `torch.compile(fullgraph=True,
dynamic=False)` on the CPU. On the CPU the served step stays the row-by-row eager one
(bit-exact batch invariance); this step is batched.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from ...layers import DecoderStack, KVCache, StaticRows
from ..sampling import NEG_INF, SamplingParams, finite_or_argmax

if TYPE_CHECKING:
    from ..talker import Talker


def buckets(max_batch: int) -> list[int]:
    """Batch sizes a step is captured for: 1, 2, 4, 8, ... below max_batch, then max_batch."""
    sizes, size = [], 1
    while size < max_batch:
        sizes.append(size)
        size *= 2
    return [*sizes, max_batch]


def bucket_for(rows: int, sizes: list[int]) -> int:
    """The smallest bucket holding `rows` rows."""
    return next(size for size in sizes if size >= rows)


class SlotCache:
    """The talker's KV for the static step: per layer k, v (slots, kv, max_len, D), slots =
    max_batch + 1; slot `scratch` (the last) takes the writes of a bucket's padded rows. Memory,
    allocated once: 2 x layers x slots x kv x max_len x D x dtype bytes (0.6B, bf16, 8 rows of
    1024 positions: 2 x 28 x 9 x 8 x 1024 x 128 x 2 B = 1.06 GB)."""

    def __init__(
        self,
        stack: DecoderStack,
        max_batch: int,
        max_len: int,
        dtype: torch.dtype,
        device: torch.device | str,
    ) -> None:
        cfg = stack.cfg
        shape = (max_batch + 1, cfg.num_key_value_heads, max_len, cfg.head_dim)
        self.k = [torch.zeros(shape, dtype=dtype, device=device) for _ in stack.layers]
        self.v = [torch.zeros(shape, dtype=dtype, device=device) for _ in stack.layers]
        self.scratch = max_batch
        self.max_len = max_len

    def slot_caches(self, slot: int, length: int) -> list[KVCache]:
        """Per-layer (1, kv, length, D) views of one slot: a row's prefill and eager steps."""
        return [
            KVCache.over(k[slot : slot + 1, :, :length], v[slot : slot + 1, :, :length])
            for k, v in zip(self.k, self.v, strict=True)
        ]

    @property
    def nbytes(self) -> int:
        return sum(t.nbytes for t in (*self.k, *self.v))


@dataclass
class RowSampling:
    """One sampler's parameters per row as tensors, so a step never branches on them."""

    do_sample: torch.Tensor  # (B,) bool
    temperature: torch.Tensor  # (B, 1) float32
    top_k: torch.Tensor  # (B, 1) int64, 0 = off
    top_p_cut: torch.Tensor  # (B, 1) float32: ids whose cumulative mass is <= this go
    top_p_on: torch.Tensor  # (B, 1) bool
    penalty: torch.Tensor  # (B, 1) float32 repetition penalty (1: none)

    @classmethod
    def of(cls, params: list[SamplingParams], device: torch.device | str) -> RowSampling:
        def column(values: list, dtype: torch.dtype) -> torch.Tensor:
            return torch.tensor(values, dtype=dtype, device=device)[:, None]

        return cls(
            do_sample=column([p.do_sample for p in params], torch.bool)[:, 0],
            temperature=column([p.temperature for p in params], torch.float32),
            top_k=column([p.top_k for p in params], torch.long),
            # 1 - p in float64 then rounded once, as the eager comparison with a Python float
            top_p_cut=column([1 - p.top_p for p in params], torch.float32),
            top_p_on=column([p.top_p < 1.0 for p in params], torch.bool),
            penalty=column([p.repetition_penalty for p in params], torch.float32),
        )

    def copy_(self, other: RowSampling) -> None:
        for name in self.__dataclass_fields__:
            getattr(self, name).copy_(getattr(other, name))


def warp_and_draw(logits: torch.Tensor, s: RowSampling, noise: torch.Tensor) -> torch.Tensor:
    """(B, V) float32 logits -> (B,) ids: per row argmax when not sampling, else temperature ->
    top-k -> top-p -> softmax -> argmax(p / q) with q = `noise` (Exp(1), pre-drawn): the values of
    sampling.draw for the same row, parameters and random numbers (tests/qwen3/test_capture_ready)."""
    greedy = logits.argmax(dim=-1)
    warped = logits / s.temperature  # x / 1 is exact: no branch needed for temperature 1
    vocab = logits.shape[-1]
    ranked = warped.sort(dim=-1, descending=True).values
    kth = ranked.gather(1, (s.top_k.clamp(1, vocab) - 1))  # (B, 1) the k-th largest
    warped = warped.masked_fill((s.top_k > 0) & (warped < kth), NEG_INF)
    ascending, order = torch.sort(warped, descending=False)
    cumulative = ascending.softmax(dim=-1).cumsum(dim=-1)
    drop_sorted = cumulative <= s.top_p_cut
    drop_sorted[..., -1:] = False  # always keep the most likely id
    drop = drop_sorted.scatter(1, order, drop_sorted) & s.top_p_on
    warped = warped.masked_fill(drop, NEG_INF)
    probs = finite_or_argmax(warped.softmax(dim=-1), logits)
    sampled = probs.div(noise).argmax(dim=-1)
    return torch.where(s.do_sample, sampled, greedy)


@dataclass
class C0Rules:
    """The talker's fixed processors (sampling.TalkerSampler): EOS, suppressed ids, pad id."""

    eos: int
    suppressed: torch.Tensor  # (S,) int64
    min_new_tokens: int = 2

    @property
    def pad(self) -> int:
        """History filler: a suppressed id, masked to -inf after the penalty whatever it did."""
        return int(self.suppressed[0])


def choose_c0(
    logits: torch.Tensor,
    history: torch.Tensor,
    frames: torch.Tensor,
    s: RowSampling,
    rules: C0Rules,
    noise: torch.Tensor,
) -> torch.Tensor:
    """TalkerSampler with static shapes: logits (B, V) float32, history (B, N) c0 ids (the
    row's penalty window, padded with rules.pad), frames (B,) ids drawn so far -> (B,) ids."""
    picked = torch.gather(logits, 1, history)
    picked = torch.where(picked < 0, picked * s.penalty, picked / s.penalty)
    logits = logits.scatter(1, history, picked)  # penalty 1: the same values written back
    early = (frames < rules.min_new_tokens)[:, None]  # (B, 1)
    is_eos = torch.arange(logits.shape[-1], device=logits.device) == rules.eos  # (V,)
    logits = logits.masked_fill(early & is_eos, NEG_INF)
    logits = logits.index_fill(1, rules.suppressed, NEG_INF)
    return warp_and_draw(logits, s, noise)


@dataclass
class StepBuffers:
    """A bucket's inputs (filled before each step; fixed addresses for a CUDA graph)."""

    embeds: torch.Tensor  # (B, 1, H) the talker's input after each row's last frame
    slots: torch.Tensor  # (B,) int64
    positions: torch.Tensor  # (B,) int64
    history: torch.Tensor  # (B, N) int64
    frames: torch.Tensor  # (B,) int64
    talker: RowSampling
    subtalker: RowSampling
    noise_c0: torch.Tensor  # (B, V) float32 Exp(1)
    noise_codes: torch.Tensor  # (B, G-1, V_cp) float32 Exp(1)

    @classmethod
    def empty(cls, talker: Talker, rows: int, history: int, scratch: int) -> StepBuffers:
        cfg, device = talker.cfg, talker.device
        groups, cp_vocab = cfg.code_predictor.num_code_groups, cfg.code_predictor.vocab_size
        long = {"dtype": torch.long, "device": device}
        greedy = SamplingParams(False, 1.0, 0, 1.0)
        return cls(
            embeds=torch.zeros(rows, 1, cfg.stack.hidden_size, dtype=talker.dtype, device=device),
            slots=torch.full((rows,), scratch, **long),
            positions=torch.zeros(rows, **long),
            history=torch.zeros(rows, history, **long),
            frames=torch.zeros(rows, **long),
            talker=RowSampling.of([greedy] * rows, device),
            subtalker=RowSampling.of([greedy] * rows, device),
            noise_c0=torch.ones(rows, cfg.vocab_size, device=device),
            noise_codes=torch.ones(rows, groups - 1, cp_vocab, device=device),
        )


@dataclass
class StepOutputs:
    hidden: torch.Tensor  # (B, H) the talker's final-norm hidden
    logits: torch.Tensor  # (B, V) float32 c0 logits
    c0: torch.Tensor  # (B,) int64
    codes: torch.Tensor  # (B, G-1) int64


def static_step(
    talker: Talker,
    kv: SlotCache,
    predictor_caches: list[KVCache],
    rules: C0Rules,
    buffers: StepBuffers,
) -> StepOutputs:
    """One frame for the bucket's B rows (module docstring); predictor_caches: (B, kv, G, D)."""
    ctx = StaticRows.make(kv.k, kv.v, buffers.slots, buffers.positions)
    hidden = talker.model(buffers.embeds, ctx, talker.rope)[:, -1]  # (B, H)
    logits = talker.codec_head(hidden).float()
    c0 = choose_c0(logits, buffers.history, buffers.frames, buffers.talker, rules, buffers.noise_c0)
    passes = iter(range(buffers.noise_codes.shape[1]))  # pass j consumes noise_codes[:, j]

    def choose(pass_logits: torch.Tensor) -> torch.Tensor:
        noise = buffers.noise_codes[:, next(passes)]
        return warp_and_draw(pass_logits, buffers.subtalker, noise)

    codes = talker.code_predictor.predict(hidden, talker.codec_embed(c0), predictor_caches, choose)
    return StepOutputs(hidden, logits, c0, codes)


def predraw(
    generator: torch.Generator,
    talker: SamplingParams,
    subtalker: SamplingParams,
    noise_c0: torch.Tensor,
    noise_codes: torch.Tensor,
) -> None:
    """Fill one row's random numbers from its generator in the eager path's order: c0's (V,)
    Exp(1) draw when the talker samples, then each pass's (V_cp,) draw when the sub-talker
    does (sampling.exponential_argmax draws the same counts in the same order, so the row's
    generator ends where the eager step leaves it). noise_c0 (V,), noise_codes (G-1, V_cp)."""
    if talker.do_sample:
        noise_c0.exponential_(1, generator=generator)
    if subtalker.do_sample:
        for row in noise_codes:
            row.exponential_(1, generator=generator)
