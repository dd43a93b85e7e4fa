"""Per-request decode steps: the eager path, and the static-shape path (optionally graphed).

`make_steps(mode, ...)` -> an object with `talker_step(embeds, start)` and
`predict(hidden, c0_embed, choose)`, used by FrameLoop after the (always eager) prefill.

* "eager": Talker.forward / CodePredictor.predict, attending over the filled cache prefix.
* "static": every tensor shape is fixed for the request: one position per call, attention over
  the whole preallocated cache with a mask from a position tensor, K/V written with
  index_copy_. The predictor's first pass (2 positions) runs as two 1-position calls. Same
  numbers as eager up to float rounding; what CUDA graphs and fullgraph compiles need.
* "cuda_graphs": the static steps captured in CUDA graphs (see cuda_graphs.py), only on CUDA;
  anywhere else, or when capture fails, the eager path with a warning.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import torch

from ..layers import KVCache
from .code_predictor import CodeChooser, CodePredictor
from .cuda_graphs import GraphedCallable, unavailable_reason
from .talker import Talker

DECODE_MODES = ("eager", "static", "cuda_graphs")


class TalkerStep:
    """(embeds (B, 1, H), input_pos (1,) int64) -> (logits (B, V) float32, hidden (B, H))."""

    def __init__(self, talker: Talker, caches: list[KVCache]) -> None:
        self.talker = talker
        self.caches = caches
        # Held here so a graph never reads a table that Talker.ensure_rope has replaced.
        self.rope = talker.rope.typed(talker.dtype)

    def __call__(self, embeds: torch.Tensor, input_pos: torch.Tensor) -> tuple[torch.Tensor, ...]:
        stack = self.talker.model
        hidden = stack.run_layers_static(embeds, self.rope, self.caches, input_pos)[:, -1]
        return self.talker.codec_head(hidden).float(), hidden


class PredictorStep:
    """(embeds (B, 1, talker_H), input_pos (1,) int64) -> final-norm hidden (B, H_small)."""

    def __init__(self, predictor: CodePredictor, caches: list[KVCache]) -> None:
        self.predictor = predictor
        self.caches = caches
        self.rope = predictor.rope.typed(predictor.dtype)

    def __call__(self, embeds: torch.Tensor, input_pos: torch.Tensor) -> torch.Tensor:
        x = self.predictor.small_to_mtp_projection(embeds)
        return self.predictor.model.run_layers_static(x, self.rope, self.caches, input_pos)[:, -1]


class EagerSteps:
    graphs_failed = False

    def __init__(
        self, talker: Talker, caches: list[KVCache], predictor_caches: list[KVCache]
    ) -> None:
        self.talker = talker
        self.caches = caches
        self.predictor_caches = predictor_caches

    def talker_step(self, embeds: torch.Tensor, start: int) -> tuple[torch.Tensor, ...]:
        return self.talker(embeds, self.caches, start=start)

    def predict(
        self, hidden: torch.Tensor, c0_embed: torch.Tensor, choose: CodeChooser
    ) -> torch.Tensor:
        predictor = self.talker.code_predictor
        return predictor.predict(hidden, c0_embed, self.predictor_caches, choose)

    def release(self) -> None:
        """Free per-request resources beyond the caches (the CUDA graphs, if any)."""


class StaticSteps(EagerSteps):
    """The static steps, each passed through `wrap` (identity, GraphedCallable, torch.compile)."""

    def __init__(
        self,
        talker: Talker,
        caches: list[KVCache],
        predictor_caches: list[KVCache],
        wrap: Callable[[Callable], Callable] = lambda fn: fn,
    ) -> None:
        super().__init__(talker, caches, predictor_caches)
        self.talker_fn = wrap(TalkerStep(talker, caches))
        self.predictor_fn = wrap(PredictorStep(talker.code_predictor, predictor_caches))
        device = talker.device
        groups = talker.code_predictor.cfg.num_code_groups
        self.positions = [
            torch.full((1,), p, dtype=torch.long, device=device) for p in range(groups)
        ]

    @property
    def graphs_failed(self) -> bool:
        return any(getattr(fn, "failed", False) for fn in (self.talker_fn, self.predictor_fn))

    def talker_step(self, embeds: torch.Tensor, start: int) -> tuple[torch.Tensor, ...]:
        if self.graphs_failed:
            return super().talker_step(embeds, start)
        position = torch.full((1,), start, dtype=torch.long, device=embeds.device)
        return self.talker_fn(embeds, position)

    def predict(
        self, hidden: torch.Tensor, c0_embed: torch.Tensor, choose: CodeChooser
    ) -> torch.Tensor:
        """Same contract as CodePredictor.predict: (B, talker_H) x2 -> (B, G-1) int64."""
        if self.graphs_failed:
            return super().predict(hidden, c0_embed, choose)
        predictor = self.talker.code_predictor
        groups = predictor.cfg.num_code_groups
        codes = torch.empty(hidden.shape[0], groups - 1, dtype=torch.long, device=hidden.device)
        self.predictor_fn(hidden[:, None], self.positions[0])  # fills position 0 only
        embed = c0_embed[:, None]  # (B, 1, talker_H)
        for group in range(1, groups):
            out = self.predictor_fn(embed, self.positions[group])
            codes[:, group - 1] = choose(predictor.lm_head[group - 1](out).float())
            if group + 1 < groups:
                embed = predictor.model.codec_embedding[group - 1](codes[:, group - 1 : group])
        return codes

    def release(self) -> None:
        for fn in (self.talker_fn, self.predictor_fn):
            if isinstance(fn, GraphedCallable):
                fn.release()


def make_steps(
    mode: str, talker: Talker, caches: list[KVCache], predictor_caches: list[KVCache]
) -> EagerSteps:
    if mode not in DECODE_MODES:
        raise ValueError(f"unknown decode mode {mode!r}; choose one of {', '.join(DECODE_MODES)}")
    if mode == "static":
        return StaticSteps(talker, caches, predictor_caches)
    if mode == "cuda_graphs":
        reason = unavailable_reason(talker.device)
        if reason is None:
            return StaticSteps(talker, caches, predictor_caches, wrap=GraphedCallable)
        warnings.warn(f"CUDA graphs not used ({reason}); decoding eagerly", stacklevel=3)
    return EagerSteps(talker, caches, predictor_caches)
