"""CUDA graphs of the served decode step: `static_step` captured per batch bucket at load.

On CUDA with graphs on (load_model's `cuda_graphs`), the served runner keeps the talker's KV as
fixed slots (`SlotArena`: one slot of `capacity // max_batch` positions per row, plus the
scratch slot padded rows write to),
captures the step for every bucket (1, 2, 4, ... max_batch) with torch.cuda.CUDAGraph after a
warm-up on a side stream (as the PyTorch docs ask), and replays it with the rows padded to
their bucket. A step whose rows all have a pending talker step replays a graph; the first frame
after a row's prefill (its logits come from the prefill) runs the eager step, on the same slot
views. If capture fails the runner logs one line and stays eager. On the CPU nothing here is
used: the served step is the row-by-row eager one (bit-exact batch invariance).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from ...layers import KVCache
from ..sampling import SamplingParams, suppressed_ids
from .static_step import (
    C0Rules,
    RowSampling,
    SlotCache,
    StepBuffers,
    StepOutputs,
    bucket_for,
    buckets,
    predraw,
    static_step,
)

if TYPE_CHECKING:
    from ..talker import Talker
    from .sequence import Qwen3Sequence

log = logging.getLogger(__name__)
WARMUP_STEPS = 3


def resolve_cuda_graphs(setting: bool | str | None, device: torch.device | str) -> bool:
    """ "auto" / None: on for CUDA; "off" / False: off; "on" / True: on where the device is
    CUDA (graphs do not exist elsewhere)."""
    value = "auto" if setting is None else str(setting).lower()
    if value not in ("auto", "on", "off", "true", "false"):
        raise ValueError(f"cuda_graphs must be auto, on or off, got {setting!r}")
    return value in ("auto", "on", "true") and torch.device(device).type == "cuda"


@dataclass(frozen=True)
class SlotSpan:
    """A row's slot and the positions it reserved there (prompt + frame limit)."""

    slot: int
    length: int


class SlotArena:
    """The talker's KV as `max_batch` fixed slots of `positions` positions each (the arena
    interface of kv_arena.py: allocate / free / caches / capacity / nbytes)."""

    def __init__(self, talker: Talker, max_batch: int, positions: int) -> None:
        self.cache = SlotCache(talker.model, max_batch, positions, talker.dtype, talker.device)
        self.capacity = int(positions)
        self._free = list(range(max_batch))

    def allocate(self, length: int) -> SlotSpan | None:
        if length > self.capacity or not self._free:
            return None
        return SlotSpan(self._free.pop(0), length)

    def free(self, span: SlotSpan) -> None:
        self._free = sorted([*self._free, span.slot])

    def caches(self, span: SlotSpan) -> list[KVCache]:
        return self.cache.slot_caches(span.slot, span.length)

    @property
    def nbytes(self) -> int:
        return self.cache.nbytes


@dataclass
class Bucket:
    """One bucket's static inputs, and its step: a captured graph (CUDA), or the static step
    called eagerly (`graph` None: a CPU, where only tests turn this path on)."""

    buffers: StepBuffers
    step: Callable[[], StepOutputs]
    graph: torch.cuda.CUDAGraph | None = None
    outputs: StepOutputs | None = None  # the graph's output tensors, rewritten by each replay

    def __call__(self) -> StepOutputs:
        if self.graph is None:
            return self.step()
        self.graph.replay()
        return self.outputs


class GraphedStep:
    """The static step per bucket over `arena`'s slots, captured as CUDA graphs when `capture`;
    `run` pads the rows to their bucket and replays (or calls) it."""

    def __init__(self, talker: Talker, arena: SlotArena, max_batch: int, capture: bool) -> None:
        cfg = talker.cfg
        eos = cfg.codec_eos_token_id
        self.talker, self.arena = talker, arena
        self.rules = C0Rules(eos, suppressed_ids(cfg.vocab_size, eos, talker.device))
        self.sizes = buckets(max_batch)
        self.predictor_caches = talker.code_predictor.new_caches(max_batch)  # (B, kv, G, D)
        talker.rope.typed(talker.dtype)  # the cast tables exist before any capture
        self.buckets = {size: self._bucket(size, capture) for size in self.sizes}

    def _bucket(self, size: int, capture: bool) -> Bucket:
        arena = self.arena
        buffers = StepBuffers.empty(self.talker, size, arena.capacity, arena.cache.scratch)
        caches = [cache.first_rows(size) for cache in self.predictor_caches]

        def step() -> StepOutputs:
            return static_step(self.talker, arena.cache, caches, self.rules, buffers)

        if not capture:
            return Bucket(buffers, step)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.inference_mode(), torch.cuda.stream(side):
            for _ in range(WARMUP_STEPS):  # every row on the scratch slot: no live KV touched
                step()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.inference_mode(), torch.cuda.graph(graph):
            outputs = step()
        return Bucket(buffers, step, graph, outputs)

    @torch.inference_mode()
    def run(
        self, seqs: list[Qwen3Sequence], embeds: torch.Tensor
    ) -> tuple[list[int], torch.Tensor]:
        """embeds (R, 1, H) after each row's last frame -> (c0 ids of the R rows, their codes
        1..G-1 (R, G-1)): one step of the rows' bucket."""
        rows = len(seqs)
        bucket = self.buckets[bucket_for(rows, self.sizes)]
        self._fill(bucket.buffers, seqs, embeds)
        out = bucket()
        return out.c0[:rows].tolist(), out.codes[:rows].clone()  # .tolist(): the one sync

    def _fill(self, buffers: StepBuffers, seqs: list[Qwen3Sequence], embeds: torch.Tensor) -> None:
        rows, size = len(seqs), buffers.slots.shape[0]
        pad = [self.arena.cache.scratch] * (size - rows)
        buffers.embeds[:rows].copy_(embeds)
        buffers.slots.copy_(torch.tensor([seq.span.slot for seq in seqs] + pad))
        buffers.positions.copy_(torch.tensor([seq.next_position for seq in seqs] + [0] * len(pad)))
        buffers.frames.copy_(torch.tensor([seq.frames for seq in seqs] + [0] * len(pad)))
        buffers.history.fill_(self.rules.pad)
        greedy = SamplingParams(False, 1.0, 0, 1.0)  # padded rows
        talker = [seq.settings.talker for seq in seqs] + [greedy] * len(pad)
        subtalker = [seq.settings.subtalker for seq in seqs] + [greedy] * len(pad)
        buffers.talker.copy_(RowSampling.of(talker, buffers.slots.device))
        buffers.subtalker.copy_(RowSampling.of(subtalker, buffers.slots.device))
        for row, seq in enumerate(seqs):
            window = penalty_window(seq)
            buffers.history[row, : window.shape[-1]].copy_(window[0])
            predraw(
                seq.generator,
                seq.settings.talker,
                seq.settings.subtalker,
                buffers.noise_c0[row],
                buffers.noise_codes[row],
            )


def penalty_window(seq: Qwen3Sequence) -> torch.Tensor:
    """(1, n) the c0 ids the row's repetition penalty reads now (TalkerSampler's window)."""
    history = seq.history[:, : seq.frames]
    window = seq.settings.penalty_window
    if window == 0:
        return history[:, :0]
    return history if window is None else history[:, -window:]


def capture_or_none(talker: Talker, arena: SlotArena, max_batch: int) -> GraphedStep | None:
    """GraphedStep captured on CUDA (on a CPU: called eagerly, for tests), or None (eager
    decode) with one log line when capturing fails."""
    capture = talker.device.type == "cuda"
    try:
        graphed = GraphedStep(talker, arena, max_batch, capture)
    except Exception as error:  # any capture failure means "serve eagerly"
        log.warning(
            "CUDA graph capture failed, decoding eagerly: %s: %s", type(error).__name__, error
        )
        return None
    log.info(
        "static decode step for batch buckets %s (%s; %.2f GB of slot KV)",
        graphed.sizes,
        "CUDA graphs" if capture else "eager",
        arena.nbytes / 1e9,
    )
    return graphed
