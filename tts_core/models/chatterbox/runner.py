"""Both Chatterbox models on the one decode engine (tts_core/serving): the request they share
(`ChatterboxSequence`), their decode step (`ChatterboxRunner`, `model.runner(max_batch)`) and
either model's stream chunk (`ChatterboxChunk`), reaching a model only through its instance.

loop = EngineLoop(model.runner(8), make_request=model.request, thread_name="tts-chatterbox")
for chunk in loop.submit("Hello", voice, seed=1):    # the chunks of model.stream
    play(chunk.audio)

An engine frame is one T3 draw. A step of the rows (`ChatterboxRunner.decode`):
* T3: each row's next draw from its own generator, the single-stream call (the English T3's
  cond and uncond CFG rows in one 2-row call): float GEMMs round by batch shape on this CPU
  (serving/rows.py, `t3_rows_invariant`). Where every Turbo projection is int8 (`t3_int8`:
  integer sums, per-row scales) the rows' drawn tokens go through ONE GPT-2 step
  (`T3Turbo.feed`), the attention per row. A request's tokens are its own in any batch.
* S3Gen: the rows making a pass this step (at `StreamChunking.next_pass` points, and the final
  pass) run it per row (`S3GenStream.push`), or with `s3gen_batching="padded"` (Turbo's
  meanflow only) in one padded CFM solve and HiFT call (padded_s3gen.py); "auto" pads only
  where a probe finds that bit-identical (`padded_s3gen_exact`). On a 2-core Xeon it was not
  (last bits; tests/chatterbox/test_batch_leaks.py) nor faster at real size
  (benchmarks/chatterbox_batch_bench.py): a request's audio is `model.stream`'s in any batch.

A row hands out a chunk when a non-final pass made audio, and its final chunk when its STOP
rule ends it (`ChatterboxSequence.stops`), at its draw limit, or when nothing is left to draw;
`ChatterboxChunk.tokens` are the draws since the previous chunk (STOP dropped).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ...audio.cadence import Cadence
from ...quant.linear import Int8Linear
from ...serving.batch import BatchEngine
from ...serving.sequence import Sequence
from .chunking import StreamChunking
from .config import S3_VOCAB, STOP_SPEECH
from .padded_s3gen import padded_s3gen_exact, padded_s3gen_push
from .quant import PROJECTIONS
from .streaming import S3GenStream, StreamNoise
from .t3 import T3Turbo, TurboRow
from .voice import ChatterboxVoice

# ChatterboxTurboModel or ChatterboxEnglishModel, used through its public members (t3, flow,
# hift, device, resolve_voice, with_knobs): this module imports neither
ChatterboxModel = Any
S3GEN_MODES = ("auto", "padded", "per_row")


@dataclass
class ChatterboxChunk:
    """A chunk of either model's `stream` (and of its served request)."""

    audio: np.ndarray  # (S,) float32 at 24 kHz, unwatermarked
    tokens: torch.Tensor  # (k,) T3 tokens drawn since the previous chunk (STOP dropped)
    t3_draws: int  # T3 draws made so far (STOP included)
    final: bool = False
    stop_reason: str | None = None  # on the final chunk: "eos" or "max_tokens"
    batch_size: int = 1  # the most rows stepped together while its draws were made


class ChatterboxSequence(Sequence):
    """One request of either Chatterbox model: its settings, T3 draws (made at prefill) and
    S3Gen stream; each model's adds its T3 call (`open_draws`), STOP rule and final pass."""

    extra_draws = 0  # T3 draws besides max_new_tokens (Turbo's first: inference_turbo's)

    def __init__(
        self,
        model: ChatterboxModel,
        voice: ChatterboxVoice | None,
        seed: int,
        sampling: Any,
        max_new_tokens: int,
        chunking: StreamChunking | None,
        should_stop: Callable[[], bool] | None,
        outbox: Any,
        knobs: dict[str, Any],
    ) -> None:
        # limit: T3 draws at most; chunk_due is this model's own rule (below), so the cadence
        # is unused
        limit = int(max_new_tokens) + self.extra_draws
        super().__init__(
            Cadence(1, 1), should_stop or (lambda: False), limit, "max_tokens", outbox=outbox
        )
        self.model = model
        self.sampling, chunking = model.with_knobs(sampling, chunking, knobs)  # by name
        self.voice = model.resolve_voice(voice)
        self.seed, self.chunking = int(seed), chunking or StreamChunking()
        self.max_new_tokens = int(max_new_tokens)
        self.noise_tokens = limit  # the longest S3Gen input (StreamNoise's length)
        self.draws: Iterator[torch.Tensor] | None = None  # T3's generator (made at prefill)
        self.t3_row: TurboRow | None = None  # its decode state where a batched step feeds it
        self.first: torch.Tensor | None = None  # the prefill's draw (None: nothing drawn)
        self.first_pending = False  # the prefill's draw not yet emitted
        self.noise: StreamNoise | None = None
        self.s3gen: S3GenStream | None = None
        self.speech: list[int] = []  # S3Gen's input: the drawn ids < 6561
        self.due = self.chunking.first_tokens
        self.ready: torch.Tensor | None = None  # audio of this step's non-final pass (if any)
        self.final_audio: torch.Tensor | None = None  # the final pass's audio

    @property
    def chunk_due(self) -> bool:
        return self.ready is not None and self.ready.numel() > 0

    # ------------------------------------------------------------ the model's rules
    def open_draws(self, generator: torch.Generator) -> Iterator[torch.Tensor]:
        """T3's draws for this request, each (1, 1), from `generator` (the single-stream call)."""
        raise NotImplementedError

    def stops(self, token: int) -> bool:
        """Does drawing `token` end the request?"""
        return token == STOP_SPEECH

    def take(self, token: int) -> None:
        """A drawn token into S3Gen's input."""
        if token < S3_VOCAB:
            self.speech.append(token)

    def final_tokens(self) -> torch.Tensor | None:
        """The final pass's tokens (1, n), or None: nothing to speak (no pass, no audio)."""
        raise NotImplementedError

    def fits(self, positions: int, room: int) -> None:
        """ValueError unless T3's `room` positions hold the request's `positions`."""
        if positions > room:
            raise ValueError(f"text too long: {positions} T3 positions > the model's {room}")

    # ------------------------------------------------------------ the runner's use
    def start_s3gen(self) -> None:
        """A fresh S3Gen stream over this request's pre-drawn noise."""
        model = self.model
        self.s3gen = S3GenStream(model.flow, model.hift, self.voice, self.noise, self.chunking)

    def speech_tokens(self) -> torch.Tensor:
        """S3Gen's input so far: (1, n)."""
        return torch.tensor(self.speech, dtype=torch.long, device=self.model.device)[None]

    def next_draw(self) -> int | None:
        """The next T3 draw: the prefill's first, then the generator's (None: nothing left)."""
        if self.first_pending:
            token, self.first, self.first_pending = self.first, None, False
        else:
            token = next(self.draws, None)
        return None if token is None else int(token)


class ChatterboxRunner:
    """The engine's StepModel for either Chatterbox model (tts_core/serving/batch.py): the
    steps are the same, the rows' ChatterboxSequences carry what differs."""

    def __init__(self, model: ChatterboxModel, max_batch: int, s3gen_batching: str = "auto"):
        if max_batch < 1:
            raise ValueError("max_batch must be >= 1")
        if s3gen_batching not in S3GEN_MODES:
            raise ValueError(f"s3gen_batching must be one of {S3GEN_MODES}")
        self.can_pad = bool(getattr(model.flow, "meanflow", True))  # padded_cfm: meanflow only
        if s3gen_batching == "padded" and not self.can_pad:
            raise ValueError("s3gen_batching='padded' needs Turbo's meanflow CFM")
        self.model = model
        self.max_batch = int(max_batch)
        self.s3gen_batching = s3gen_batching
        self.passes: list[tuple[int, bool]] = []  # (rows, padded) of each S3Gen round (stats)
        self.t3_batched = t3_int8(model)  # one GPT-2 step for every Turbo row (module doc)
        self.most_rows = 0  # most rows decoded in one step (stats)

    def admit(self, seq: ChatterboxSequence) -> bool:
        seq.noise = StreamNoise.for_voice(seq.seed, seq.voice, seq.noise_tokens)
        seq.start_s3gen()
        return True  # T3's caches are made at prefill (prompt + the draw limit)

    @torch.inference_mode()
    def prefill(self, seq: ChatterboxSequence, positions: int) -> bool:
        """The whole prompt in one call and its first draw (the draws' first step), as one
        stream."""
        seq.draws = seq.open_draws(torch.Generator().manual_seed(seq.seed))
        seq.first, seq.first_pending = next(seq.draws, None), True
        return True

    @torch.inference_mode()
    def decode(self, seqs: list[ChatterboxSequence], out: BatchEngine) -> None:
        rows = len(seqs)
        self.most_rows = max(self.most_rows, rows)
        tokens = [seq.next_draw() for seq in seqs]  # T3: each row's own draw (module doc)
        if self.t3_batched:
            self._feed_together(seqs)
        # S3Gen: this step's non-final passes together, then the final ones (a row may make both)
        passing, ending = [], []
        for seq, token in zip(seqs, tokens, strict=True):
            if token is not None:
                seq.take(token)
                if len(seq.speech) >= seq.due:
                    seq.due = seq.chunking.next_pass(len(seq.speech))
                    passing.append(seq)
            drawn = seq.frames + (token is not None)  # draws so far, this one included
            if token is None or seq.stops(token) or drawn == seq.limit:
                ending.append(seq)
        if passing:
            audio = self.s3gen_round([(s.s3gen, s.speech_tokens(), False) for s in passing])
            for seq, piece in zip(passing, audio, strict=True):
                seq.ready = piece
        if ending:
            self._final_passes(ending)
        for seq, token in zip(seqs, tokens, strict=True):
            if seq.final_audio is not None:
                # model.stream's reason: STOP drawn (it is never a pass's token), or fewer draws
                # than the limit (nothing left to draw)
                drawn = seq.frames + (token is not None)
                reason = "eos" if token == STOP_SPEECH or drawn < seq.limit else "max_tokens"
                out.emit(seq, token, rows, reason)
            else:
                out.emit(seq, token, rows)
            seq.ready = None

    def _feed_together(self, seqs: list[ChatterboxSequence]) -> None:
        """The rows' drawn tokens through one int8 GPT-2 step (each row's next draw then finds
        its token fed: `T3Turbo.draws`)."""
        rows = [seq.t3_row for seq in seqs if seq.t3_row is not None]
        rows = [row for row in rows if row.pending is not None]
        if len(rows) > 1:
            self.model.t3.feed(rows)

    def _final_passes(self, ending: list[ChatterboxSequence]) -> None:
        """Each ending row's final pass in one round; a row with nothing to speak gets no
        audio (the English model: no speech token drawn)."""
        finals = [(seq, seq.final_tokens()) for seq in ending]
        speaking = [(seq, tokens) for seq, tokens in finals if tokens is not None]
        if speaking:
            audio = self.s3gen_round([(seq.s3gen, tokens, True) for seq, tokens in speaking])
            for (seq, _), piece in zip(speaking, audio, strict=True):
                seq.final_audio = piece
        for seq, tokens in finals:
            if tokens is None:
                seq.final_audio = torch.zeros(0)

    def s3gen_round(self, jobs: list[tuple[S3GenStream, torch.Tensor, bool]]) -> list[torch.Tensor]:
        """Each job's `S3GenStream.push(tokens, final)`: per row, or the rows in one padded
        pass (module doc)."""
        padded = len(jobs) > 1 and self._pads(len(jobs))
        self.passes.append((len(jobs), padded))
        if not padded:
            return [stream.push(tokens, final) for stream, tokens, final in jobs]
        return padded_s3gen_push(self.model.flow, self.model.hift, jobs)

    def _pads(self, rows: int) -> bool:
        if not self.can_pad or self.s3gen_batching == "per_row":
            return False
        return self.s3gen_batching == "padded" or padded_s3gen_exact(self.model, rows)

    def deliver(
        self,
        seq: ChatterboxSequence,
        frames: list[int],
        compute_s: float,
        stop_reason: str | None,
        batch: int,
    ) -> ChatterboxChunk:
        """The chunk of `frames` (the draws since the previous chunk): this step's pass audio;
        the final pass's on the final chunk (after this step's own chunk, if any)."""
        if stop_reason is None:
            return self._chunk(seq.ready, frames, seq.frames, batch)
        if seq.chunk_due:
            seq.outbox.put(self._chunk(seq.ready, frames, seq.frames, batch))
            frames = []
        if stop_reason == "eos" and frames and frames[-1] == STOP_SPEECH:
            frames = frames[:-1]
        chunk = self._chunk(seq.final_audio, frames, seq.frames, batch)
        chunk.final, chunk.stop_reason = True, stop_reason
        return chunk

    def _chunk(self, audio: torch.Tensor, frames: list[int], draws: int, batch: int):
        tokens = torch.tensor(frames, dtype=torch.long, device=self.model.device)
        return ChatterboxChunk(audio.cpu().numpy(), tokens, draws, batch_size=batch)

    def release(self, seq: ChatterboxSequence) -> None:
        if seq.draws is not None:
            seq.draws.close()  # frees T3's caches
        seq.draws = seq.first = seq.s3gen = seq.noise = seq.ready = None
        seq.final_audio = None


def t3_int8(model: ChatterboxModel) -> bool:
    """Is `model` a Turbo whose every GPT-2 projection is an Int8Linear (integer sums, per-row
    scales: a row's bits do not depend on the rows beside it)?"""
    t3 = model.t3
    return isinstance(t3, T3Turbo) and all(
        isinstance(block.get_submodule(name), Int8Linear)
        for block in t3.tfmr.h
        for name in PROJECTIONS
    )


def t3_rows_invariant(model: ChatterboxModel, requests: int) -> bool:
    """Would one batched GPT-2 decode step give every row its own bits? T3's projections
    checked at this batch size (rows.py's method)."""
    generator = torch.Generator().manual_seed(requests)
    for block in model.t3.tfmr.h:
        for name in PROJECTIONS:
            layer = block.get_submodule(name)
            width = layer.in_features if isinstance(layer, Int8Linear) else layer.weight.shape[0]
            x = torch.randn(requests, width, generator=generator)
            together = layer(x)
            for i in range(requests):
                if not torch.equal(layer(x[i : i + 1].clone()), together[i : i + 1]):
                    return False
        break  # every block has the same shapes
    return True
