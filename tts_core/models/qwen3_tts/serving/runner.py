"""Qwen3-TTS on the one decode engine (tts_core/serving): `Qwen3Runner`, its `StepModel`.

It owns what every step needs and nothing that belongs to one request: the talker's KV arena
(`capacity` positions shared by all rows; `alone`: one request's own cache, for `model.stream`),
the code predictor's cache for `max_batch` rows, and the device and dtype (read once from the
model). Rows run their own prefill, then step together: one talker step for every decoding row
at its own position, one 15-pass code-predictor run for all of them. Every op either works row
by row with the call a single stream makes, or is exact (int8 sums, embeddings, elementwise), so
with int8 layers a row's codes are bit-identical alone and in any batch; float layers are
batched GEMMs whose rounding may differ (see docs/engine.md).

A decode step: the talker step each row's last frame left pending (one batched call), c0 per
row, the code predictor's 15 passes for all rows at once, frames handed to the engine (which
appends them and hands out the chunks that are due). The talker step of a frame runs at the
start of the row's next step, so a chunk leaves as soon as its last frame exists (a consumer on
the stepping thread gets it one talker step sooner) and a row that leaves after its chunk never
pays for that step.

The runner reaches its model (a Qwen3TTSModel: model.py builds its runners) through public
members only: the talker, `new_decoder_state`, `decode_chunk`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ....quant.linear import rowwise
from ....serving.batch import BatchEngine
from ...layers import KVCache, rows_context
from ..chunk import AudioChunk
from ..prompt import step_input
from ..sampling import draw_rows
from .cuda_graphs import GraphedStep, SlotArena, capture_or_none
from .fed import FedSequence
from .kv_arena import KVArena, RequestKV, Span
from .sequence import Qwen3Sequence, Status

DEFAULT_POSITIONS_PER_ROW = 1024  # arena size per row of --max-batch: ~80 s of audio per row


class Qwen3Runner:
    def __init__(
        self,
        model: Any,
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
        # per row count, the caches' first rows: kept, so that they keep their views (KVCache)
        self._predictor_rows: dict[int, list[KVCache]] = {self.max_batch: self.predictor_caches}
        # float heads one row at a time only where the layers are batch-invariant anyway
        self.by_row = model.quantization is not None

    @classmethod
    def alone(cls, model: Any, seq: Qwen3Sequence) -> BatchEngine:
        """`model.stream`'s private engine for `seq`: one row whose talker cache is made for it
        (prompt + frame limit positions) and released with it, the whole prompt in one prefill
        call (nothing else waits for it), the step's errors raised to the caller."""
        positions = seq.positions_needed()
        runner = cls(model, 1, positions, arena=RequestKV(model.talker, positions))
        return BatchEngine(runner, prefill_chunk=seq.prompt_len, isolate_failures=False)

    @property
    def capacity(self) -> int:
        return self.arena.capacity

    # ------------------------------------------------------------------ a row's resources
    def admit(self, seq: Qwen3Sequence) -> bool:
        """Give `seq` its span and decoder state; False when the arena has no room yet."""
        span = self.arena.allocate(seq.fit(self.capacity).positions_needed())
        if span is None:
            return False
        try:
            state = self.model.new_decoder_state(seq.voice) if seq.audio else None
        except BaseException:
            self.arena.free(span)
            raise
        seq.admit(span, self.arena.caches(span), state)
        return True

    def release(self, seq: Qwen3Sequence) -> None:
        span: Span | None = seq.release()
        if span is not None:
            self.arena.free(span)

    # ------------------------------------------------------------------ the batched calls
    @torch.inference_mode()
    def prefill(self, seq: Qwen3Sequence, positions: int) -> bool:
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
        self, seqs: list[Qwen3Sequence], c0: torch.Tensor, choose: Callable[..., torch.Tensor]
    ) -> torch.Tensor:
        """c0 (R,) of the rows' next frames -> their codes 1..G-1, (R, G-1) int64."""
        rows = len(seqs)
        hidden = torch.cat([seq.hidden for seq in seqs]) if rows > 1 else seqs[0].hidden
        caches = self._predictor_rows.get(rows)
        if caches is None:
            caches = [cache.first_rows(rows) for cache in self.predictor_caches]
            self._predictor_rows[rows] = caches
        predictor = self.talker.code_predictor
        c0_embed = self.talker.codec_embed(c0)
        return predictor.predict(hidden, c0_embed, caches, choose, by_row=self.by_row)

    @torch.inference_mode()
    def talker_step(self, seqs: list[Qwen3Sequence], embeds: torch.Tensor) -> None:
        """embeds (R, 1, H), row r after seqs[r]'s last frame -> each row's next logits/hidden."""
        positions = [seq.next_position for seq in seqs]
        ctx = rows_context([seq.caches for seq in seqs], positions)
        hidden = self.talker.model(embeds, ctx, self.talker.rope)
        hidden = hidden[:, -1]  # (R, H)
        logits = rowwise(self.talker.codec_head, hidden, self.by_row).float()
        for row, seq in enumerate(seqs):
            seq.logits, seq.hidden = logits[row : row + 1], hidden[row : row + 1]

    # ------------------------------------------------------------------ a decode step
    @torch.inference_mode()
    def decode(self, seqs: list[Qwen3Sequence], out: BatchEngine) -> None:
        if self.graphs is not None and all(seq.awaiting_step is not None for seq in seqs):
            return self._decode_graphed(seqs, out)
        behind = [seq for seq in seqs if seq.awaiting_step is not None]
        if behind:  # the talker steps the previous frames left pending, for all rows at once
            inputs = [self._step_input(seq) for seq in behind]
            self.talker_step(behind, torch.cat(inputs) if len(inputs) > 1 else inputs[0])
            for seq in behind:
                seq.awaiting_step = None
        going, c0s = [], []
        for seq in seqs:
            c0 = seq.choose_c0()
            if seq.is_stop(c0):
                out.emit(seq, None, 0, "eos")
            else:
                going.append(seq)
                c0s.append(c0)
        if not going:
            return
        c0 = torch.cat(c0s) if len(going) > 1 else c0s[0]
        codes = self.predict(going, c0, _row_chooser(going))
        _emit_frames(out, list(enumerate(going)), c0, codes)

    def _decode_graphed(self, seqs: list[Qwen3Sequence], out: BatchEngine) -> None:
        """The same step as `decode` by one replay of the captured static step (CUDA): talker
        step, c0 and the predictor for every row; a row whose c0 stops discards its codes."""
        inputs = [self._step_input(seq) for seq in seqs]
        c0s, codes = self.graphs.run(seqs, torch.cat(inputs) if len(inputs) > 1 else inputs[0])
        eos, going = self.talker.cfg.codec_eos_token_id, []
        for row, seq in enumerate(seqs):
            seq.awaiting_step = None
            if c0s[row] in (eos, *seq.settings.stop_ids):
                out.emit(seq, None, 0, "eos")
            else:
                going.append((row, seq))
        _emit_frames(out, going, torch.tensor(c0s, device=codes.device), codes)

    def _step_input(self, seq: Qwen3Sequence) -> torch.Tensor:
        """The talker's input for `seq`'s last frame (index frames - 1)."""
        special = self.model.special
        if isinstance(seq, FedSequence):  # text that arrived since its last step
            seq.sync(self.talker, special.eos)
        frame = seq.awaiting_step
        return step_input(self.talker, special, seq.prompt, frame, seq.frames - 1)

    def deliver(
        self,
        seq: Qwen3Sequence,
        frames: list[torch.Tensor],
        compute_s: float,
        stop_reason: str | None,
        batch: int,
    ) -> AudioChunk | list[torch.Tensor]:
        """The frames decoded into the next AudioChunk on the row's decoder state; a
        codes-only request (`audio=False`) gets the frames themselves."""
        if not seq.audio:
            return frames
        return self.model.decode_chunk(seq.decoder_state, frames, compute_s, stop_reason, batch)


def _emit_frames(
    out: BatchEngine, going: list[tuple[int, Qwen3Sequence]], c0: torch.Tensor, codes: torch.Tensor
) -> None:
    """Each going row's frame (its c0 and codes at its `row`) to the engine; a row still
    decoding (not ended at its limit) has its talker step pending on that frame."""
    for row, seq in going:
        frame = torch.cat([c0[row : row + 1], codes[row]])  # (G,)
        out.emit(seq, frame, len(going))
        if seq.status is Status.DECODING:
            seq.awaiting_step = frame


def _row_chooser(seqs: list[Qwen3Sequence]) -> Callable[[torch.Tensor], torch.Tensor]:
    """(R, V) logits of one code-predictor pass -> (R,) ids, each row with its own sampling
    parameters and generator (draw_rows: the same ids as each row drawn alone)."""
    params = [seq.settings.subtalker for seq in seqs]
    generators = [seq.generator for seq in seqs]
    return lambda logits: draw_rows(logits, params, generators)
