"""The model side of the engine: caches allocated once, and the batched calls.

It owns what every step needs and nothing that belongs to one request: the talker's KV arena
(`capacity` positions shared by all rows; for `model.stream`, `for_request`: one request's own
cache), the code predictor's cache for `max_batch` rows, and the device and dtype (read once
from the model). Rows run their own prefill, then step
together: one talker step for every decoding row at its own position, one 15-pass code-predictor
run for all of them. Every op either works row by row with the call a single stream makes, or is
exact (int8 sums, embeddings, elementwise), so with int8 layers a row's codes are bit-identical
alone and in any batch; float layers are batched GEMMs whose rounding may differ (see
docs/engine.md).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ....quant.linear import rowwise
from ...layers import rows_context
from ..model import Qwen3TTSModel
from .cuda_graphs import GraphedStep, SlotArena, capture_or_none
from .kv_arena import KVArena, RequestKV, Span
from .sequence import Sequence


class ModelRunner:
    def __init__(
        self,
        model: Qwen3TTSModel,
        max_batch: int,
        capacity: int,
        arena: KVArena | RequestKV | SlotArena | None = None,
    ) -> None:
        """arena: the talker's KV cache (None: a KVArena of `capacity` positions; with
        `model.cuda_graphs`, a SlotArena of capacity // max_batch positions a row and the
        decode step captured per batch bucket, cuda_graphs.py)."""
        if max_batch < 1 or capacity < 2:
            raise ValueError("max_batch must be >= 1 and the cache >= 2 positions")
        self.model = model
        self.talker = model.talker
        self.device, self.dtype = model.device, model.dtype
        self.max_batch = int(max_batch)
        self.talker.ensure_rope(capacity)
        self.graphs: GraphedStep | None = None
        if arena is None and model.cuda_graphs:  # fixed slots: what a captured step reads
            arena = SlotArena(self.talker, self.max_batch, capacity // self.max_batch)
            self.graphs = capture_or_none(self.talker, arena, self.max_batch)
        if arena is None:
            arena = KVArena(self.talker.model, capacity, self.dtype, self.device)
        self.arena = arena
        self.predictor_caches = self.talker.code_predictor.new_caches(self.max_batch)
        # float heads one row at a time only where the layers are batch-invariant anyway
        self.by_row = model.quantization is not None

    @classmethod
    def for_request(cls, model: Qwen3TTSModel, positions: int) -> ModelRunner:
        """One row whose talker cache is made for one request of `positions` positions (its
        prompt + frame limit) and released with it: `model.stream`'s private runner."""
        return cls(model, 1, positions, arena=RequestKV(model.talker, positions))

    @property
    def capacity(self) -> int:
        return self.arena.capacity

    def admit(self, seq: Sequence) -> bool:
        """Give `seq` its span and decoder state; False when the arena has no room yet."""
        span = self.arena.allocate(seq.positions_needed())
        if span is None:
            return False
        try:
            state = self.model.new_decoder_state(seq.voice) if seq.audio else None
        except BaseException:
            self.arena.free(span)
            raise
        seq.admit(span, self.arena.caches(span), state)
        return True

    def release(self, seq: Sequence) -> None:
        span: Span | None = seq.release()
        if span is not None:
            self.arena.free(span)

    @torch.inference_mode()
    def prefill(self, seq: Sequence, positions: int) -> bool:
        """Run up to `positions` more prompt positions of `seq`; True when its prompt is done
        (its first logits and hidden are then set)."""
        start = seq.prefilled
        end = min(seq.prompt_len, start + positions)
        logits, hidden = self.talker(seq.prompt.prefill[:, start:end], seq.caches, start=start)
        seq.prefilled = end
        if end < seq.prompt_len:
            return False
        seq.logits, seq.hidden = logits, hidden
        return True

    @torch.inference_mode()
    def predict(
        self, seqs: list[Sequence], c0: torch.Tensor, choose: Callable[..., torch.Tensor]
    ) -> torch.Tensor:
        """c0 (R,) of the rows' next frames -> their codes 1..G-1, (R, G-1) int64."""
        rows = len(seqs)
        hidden = torch.cat([seq.hidden for seq in seqs]) if rows > 1 else seqs[0].hidden
        caches = self.predictor_caches
        if rows < self.max_batch:
            caches = [cache.first_rows(rows) for cache in caches]
        predictor = self.talker.code_predictor
        c0_embed = self.talker.codec_embed(c0)
        return predictor.predict(hidden, c0_embed, caches, choose, by_row=self.by_row)

    @torch.inference_mode()
    def talker_step(self, seqs: list[Sequence], embeds: torch.Tensor) -> None:
        """embeds (R, 1, H), row r after seqs[r]'s last frame -> each row's next logits/hidden."""
        positions = [seq.next_position for seq in seqs]
        ctx = rows_context([seq.caches for seq in seqs], positions)
        hidden = self.talker.model(embeds, ctx, self.talker.rope)
        hidden = hidden[:, -1]  # (R, H)
        logits = rowwise(self.talker.codec_head, hidden, self.by_row).float()
        for row, seq in enumerate(seqs):
            seq.logits, seq.hidden = logits[row : row + 1], hidden[row : row + 1]
