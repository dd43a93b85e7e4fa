"""Qwen3-TTS on the one decode engine (tts_core/serving): its decode step and its drivers.

`Qwen3Runner` is the ModelRunner (model_runner.py: caches and batched calls) with the two
methods the engine asks of a model besides admit / prefill / release: `decode`, one decode step
for a batch of rows, and `deliver`, a row's pending frames as an AudioChunk. A decode step: the
talker step each row's last frame left pending (one batched call), c0 per row, the code
predictor's 15 passes for all rows at once, frames handed to the engine (which appends them and
hands out the chunks that are due). The talker step of a frame runs at the start of the row's
next step, so a chunk leaves as soon as its last frame exists (a consumer on the stepping thread
gets it one talker step sooner) and a row that leaves after its chunk never pays for that step.

Drivers: the served `Scheduler` (scheduler.py: the engine on its loop thread, `max_batch` rows
over the shared KV arena) and `run_alone` (`model.stream` / `model.generate` / `model.frames`: a
private one-row engine stepped on the caller's thread, its talker cache made for that request,
prompt + frame limit positions, and dropped when the request ends or its generator is closed).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import torch

from ....audio.cadence import Cadence
from ....serving import alone
from ....serving.alone import InlineOutbox
from ....serving.engine import DEFAULT_PREFILL_CHUNK, FIRST_CHUNK_PRIORITY_FRAMES, BatchEngine
from ..prompt import step_input
from ..sampling import draw_rows
from .fed import FedSequence
from .model_runner import ModelRunner
from .sequence import Sequence, Status

if TYPE_CHECKING:
    from ..decode_settings import DecodeSettings
    from ..model import AudioChunk, Qwen3TTSModel
    from ..prompt import Prompt

__all__ = [
    "DEFAULT_PREFILL_CHUNK",
    "FIRST_CHUNK_PRIORITY_FRAMES",
    "BatchEngine",
    "InlineOutbox",
    "Qwen3Runner",
    "frames_alone",
    "run_alone",
]


class Qwen3Runner(ModelRunner):
    """The engine's StepModel for Qwen3-TTS (tts_core/serving/engine.py)."""

    @torch.inference_mode()
    def decode(self, seqs: list[Sequence], out: BatchEngine) -> None:
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
        rows = len(going)
        c0 = torch.cat(c0s) if rows > 1 else c0s[0]
        codes = self.predict(going, c0, _row_chooser(going))
        for row, seq in enumerate(going):
            frame = torch.cat([c0[row : row + 1], codes[row]])  # (G,)
            out.emit(seq, frame, rows)
            if seq.status is Status.DECODING:  # not ended at its limit
                seq.awaiting_step = frame

    def _decode_graphed(self, seqs: list[Sequence], out: BatchEngine) -> None:
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
        c0 = torch.tensor(c0s, device=codes.device)
        for row, seq in going:
            frame = torch.cat([c0[row : row + 1], codes[row]])  # (G,)
            out.emit(seq, frame, len(going))
            if seq.status is Status.DECODING:
                seq.awaiting_step = frame

    def _step_input(self, seq: Sequence) -> torch.Tensor:
        """The talker's input for `seq`'s last frame (index frames - 1)."""
        model = self.model
        if isinstance(seq, FedSequence):  # text that arrived since its last step
            seq.sync(model.talker, model.special.eos)
        frame = seq.awaiting_step
        return step_input(model.talker, model.special, seq.prompt, frame, seq.frames - 1)

    def deliver(
        self,
        seq: Sequence,
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


def _row_chooser(seqs: list[Sequence]) -> Callable[[torch.Tensor], torch.Tensor]:
    """(R, V) logits of one code-predictor pass -> (R,) ids, each row with its own sampling
    parameters and generator (draw_rows: the same ids as each row drawn alone)."""
    params = [seq.settings.subtalker for seq in seqs]
    generators = [seq.generator for seq in seqs]
    return lambda logits: draw_rows(logits, params, generators)


# ---------------------------------------------------------------------- one request, inline
def run_alone(model: Qwen3TTSModel, seq: Sequence) -> Iterator[Any]:
    """What `seq` hands out (AudioChunks; lists of code frames for `audio=False`), stepped on
    the thread that iterates by a private one-row engine: its own talker cache of prompt +
    frame limit positions, the whole prompt in one prefill call (nothing else waits for it),
    the step's errors raised to the caller. `seq` must have been made with an InlineOutbox.
    Checks the request's size against the talker now."""
    steps = alone.run_alone(lambda: _engine_for(model, seq), seq)  # TypeError: no InlineOutbox
    model.talker.ensure_rope(seq.positions_needed())  # ValueError now: longer than the talker
    return steps


def _engine_for(model: Qwen3TTSModel, seq: Sequence) -> BatchEngine:
    runner = Qwen3Runner.for_request(model, seq.positions_needed())
    return BatchEngine(runner, prefill_chunk=seq.prompt_len, isolate_failures=False)


def frames_alone(
    model: Qwen3TTSModel, prompt: Prompt, settings: DecodeSettings
) -> Iterator[torch.Tensor]:
    """The (G,) int64 code frames of a planned request, without audio (no codec is needed),
    through `run_alone`: `model.frames`."""
    seq = Sequence(model.talker, prompt, settings, None, Cadence(1, 1), _never, audio=False,
                   outbox=InlineOutbox())  # fmt: skip
    runs = run_alone(model, seq)

    def frames() -> Iterator[torch.Tensor]:
        try:
            for chunk in runs:
                yield from chunk
        finally:
            runs.close()

    return frames()


def _never() -> bool:
    return False
