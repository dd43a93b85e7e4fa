"""Logits processors and draws, in the official (transformers 4.57 `generate`) order.

Talker c0: repetition penalty over the c0 history -> EOS mask while fewer than
`min_new_tokens` ids were drawn -> suppression of the non-audio ids except EOS ->
(when sampling) temperature -> top-k -> top-p -> softmax + multinomial; otherwise argmax.
Code predictor: (when sampling) temperature -> top-k -> top-p -> draw; otherwise argmax.
All logits are float32 (B, V).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

NEG_INF = float("-inf")


@dataclass(frozen=True)
class SamplingParams:
    do_sample: bool
    temperature: float
    top_k: int
    top_p: float
    repetition_penalty: float = 1.0

    def __post_init__(self) -> None:
        values = (self.temperature, self.top_p, self.repetition_penalty)
        if not all(math.isfinite(float(v)) for v in values):
            raise ValueError(f"sampling parameters must be finite, got {self}")
        if self.do_sample and not self.temperature > 0:
            raise ValueError(f"temperature must be > 0 when sampling, got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0, got {self.top_k}")
        if not self.repetition_penalty > 0:
            raise ValueError(f"repetition_penalty must be > 0, got {self.repetition_penalty}")


def repetition_penalty(logits: torch.Tensor, history: torch.Tensor, penalty: float) -> torch.Tensor:
    """Divide positive / multiply negative logits of every id in history (B, N); once per id."""
    if penalty == 1.0 or history.shape[-1] == 0:
        return logits
    picked = torch.gather(logits, 1, history)
    divisor = _on_device(penalty, logits)
    picked = torch.where(picked < 0, picked * penalty, picked / divisor)
    return logits.scatter(1, history, picked)


def mask_ids(logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """Set the logits of `ids` (1-D) to -inf."""
    return logits.index_fill(1, ids, NEG_INF)


def temperature(logits: torch.Tensor, value: float) -> torch.Tensor:
    return logits if value == 1.0 else logits / _on_device(value, logits)


def _on_device(value: float, like: torch.Tensor) -> torch.Tensor | float:
    """A divisor that divides exactly: CUDA divides by a Python float as a multiplication by
    its reciprocal, by a 0-dim tensor exactly, as the CPU does either way (there the float
    itself, one op fewer) and as the static step (serving/static_step.py, per-row tensors)
    does, so both paths round alike."""
    if like.is_cpu:
        return value
    return torch.full((), value, dtype=like.dtype, device=like.device)


def top_k(logits: torch.Tensor, k: int) -> torch.Tensor:
    """Keep the k largest logits (ties with the k-th kept too); k=0 disables."""
    if k <= 0:
        return logits
    k = min(k, logits.shape[-1])
    kth = torch.topk(logits, k).values[..., -1:]
    return logits.masked_fill(logits < kth, NEG_INF)


def top_p(logits: torch.Tensor, p: float) -> torch.Tensor:
    """Nucleus filter: drop the lowest-probability ids whose cumulative mass is <= 1-p."""
    if p >= 1.0:
        return logits
    sorted_logits, sorted_ids = torch.sort(logits, descending=False)
    cumulative = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
    remove_sorted = cumulative <= (1 - p)
    remove_sorted[..., -1:] = False  # always keep the most likely id
    remove = remove_sorted.scatter(1, sorted_ids, remove_sorted)
    return logits.masked_fill(remove, NEG_INF)


def draw(logits: torch.Tensor, params: SamplingParams, generator: torch.Generator) -> torch.Tensor:
    """Warp and draw (B,) ids from one generator, as torch.multinomial(probs, 1) would; or
    argmax when not sampling."""
    return _draw_group(logits, params, [generator])


def draw_rows(
    logits: torch.Tensor, params: Sequence[SamplingParams], generators: Sequence[torch.Generator]
) -> torch.Tensor:
    """(R, V) logits, row r warped by params[r] and drawn from generators[r] (one generator per
    row) -> (R,) ids, each equal to draw(logits[r:r+1], params[r], generators[r]). Rows sharing
    their parameters are warped together: every warp is row-wise, so batching them changes no
    value, and a batch of R rows costs a few ops instead of ~25 per row."""
    rows = logits.shape[0]
    if rows == 1 and len(params) == len(generators) == 1:  # one row: draw's own call
        return _draw_group(logits, params[0], generators)
    if not len(params) == len(generators) == rows:
        raise ValueError(f"{rows} rows need as many parameters and generators")
    if len({id(generator) for generator in generators}) < rows:
        raise ValueError("each row needs its own generator (rows are drawn in groups)")
    groups: dict[SamplingParams, list[int]] = {}
    for row, row_params in enumerate(params):
        groups.setdefault(row_params, []).append(row)
    if len(groups) == 1:  # the usual case: every row with the default parameters
        return _draw_group(logits, params[0], generators)
    ids = torch.empty(rows, dtype=torch.long, device=logits.device)
    for shared, members in groups.items():
        index = torch.tensor(members, device=logits.device)
        drawn_from = [generators[r] for r in members]
        ids[index] = _draw_group(logits.index_select(0, index), shared, drawn_from)
    return ids


def _draw_group(
    logits: torch.Tensor, params: SamplingParams, generators: Sequence[torch.Generator]
) -> torch.Tensor:
    """Rows sharing `params`, row r drawn from generators[r]."""
    if not params.do_sample:
        return logits.argmax(dim=-1)
    return exponential_argmax(probabilities(logits, params), generators)


def probabilities(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """(B, V) logits -> temperature -> top-k -> top-p -> softmax, each row finite."""
    warped = top_p(top_k(temperature(logits, params.temperature), params.top_k), params.top_p)
    probs = warped.softmax(dim=-1)
    if probs.is_cpu and math.isfinite(probs.sum()):  # every row finite: no one-hot to build
        return probs
    return finite_or_argmax(probs, logits)


def exponential_argmax(probs: torch.Tensor, generators: Sequence[torch.Generator]) -> torch.Tensor:
    """torch.multinomial(probs, 1)'s own algorithm (argmax of p / q, q ~ Exp(1) drawn from the
    generator over the whole tensor) without its host-side validity checks, which `probs` from
    `probabilities` always passes (finite, >= 0, positive sums). One generator: one draw over
    all rows, as multinomial; one per row: row r's q from generators[r] alone."""
    q = torch.empty_like(probs)
    if len(generators) == 1:
        q.exponential_(1, generator=generators[0])
    else:
        for row, generator in enumerate(generators):
            q[row].exponential_(1, generator=generator)
    return probs.div(q).argmax(dim=-1)


def finite_or_argmax(probs: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
    """probs (B, V), with every row that is not finite (a tiny temperature or penalty pushed a
    logit to inf, and softmax of inf is NaN) replaced by a one-hot on that row's argmax: the
    temperature -> 0 limit. Rows stay independent and no value is read back to the host, so
    this also runs inside a CUDA graph; the draw still consumes the generator as before."""
    finite = torch.isfinite(probs).all(dim=-1, keepdim=True)  # (B, 1)
    onehot = torch.zeros_like(probs).scatter_(1, logits.argmax(dim=-1, keepdim=True), 1.0)
    return torch.where(finite, probs, onehot)


class TalkerSampler:
    """Chooses c0 of each frame: the official processors plus the draw.

    `suppressed` holds every id the talker may not emit (the non-audio range minus EOS).
    """

    def __init__(
        self,
        params: SamplingParams,
        eos_id: int,
        suppressed: torch.Tensor,
        generator: torch.Generator,
        min_new_tokens: int = 2,
        penalty_window: int | None = None,
    ) -> None:
        self.params = params
        self.eos = torch.tensor([eos_id], device=suppressed.device)
        self.suppressed = suppressed
        self.generator = generator
        self.min_new_tokens = min_new_tokens
        self.penalty_window = penalty_window

    def __call__(self, logits: torch.Tensor, history: torch.Tensor) -> torch.Tensor:
        """logits (B, V) float32; history (B, N) of the c0 ids drawn so far -> (B,) ids."""
        window = history if self.penalty_window is None else history[:, -self.penalty_window :]
        if self.penalty_window == 0:
            window = history[:, :0]
        logits = repetition_penalty(logits, window, self.params.repetition_penalty)
        if history.shape[-1] < self.min_new_tokens:
            logits = mask_ids(logits, self.eos)
        logits = mask_ids(logits, self.suppressed)
        return draw(logits, self.params, self.generator)


def suppressed_ids(vocab_size: int, eos_id: int, device: torch.device | str) -> torch.Tensor:
    """The official suppress_tokens: ids [vocab-1024, vocab) except EOS."""
    ids = [i for i in range(vocab_size - 1024, vocab_size) if i != eos_id]
    return torch.tensor(ids, dtype=torch.long, device=device)


def make_generator(seed: int | None, device: torch.device | str = "cpu") -> torch.Generator:
    """A generator seeded with `seed`; None: a random one, drawn where every model draws it
    (models/contract.py; `model.stream` draws it first, to return it)."""
    from ..contract import resolve_seed

    return torch.Generator(device=device).manual_seed(resolve_seed(seed))
