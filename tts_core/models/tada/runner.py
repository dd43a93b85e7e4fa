"""TADA on the one decode engine (tts_core/serving): its request (`TadaSequence`: one
`generate.Generation` and one `streaming.DecoderStream`), its chunks and its runner.

Prefill: the prompt part in one call, as `generate` does, then the prompt's transition steps
(frames not decoded), so a joining request delays the running rows by those. A decode step: per
row one LM step (text and unconditional rows) and one flow-head solve, one decoded frame (token);
a due chunk is decoded on the row's streaming decoder. The text's end ends the request with
"end_of_text", its chunk carrying the decoder's tail.

Rows are stepped one by one with the calls one stream makes: TADA's per-step GEMMs have 1 or 2
rows (text + unconditional), exactly the row counts this CPU's BLAS rounds by batch shape
(serving/rows.py), and its random draws come from each request's generator in the official
order. So a request's frames and audio are bit-identical alone (`model.stream`) and in any batch
at any join; batching the GEMMs across requests is left until a row-invariant kernel exists.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ...audio.cadence import Cadence
from ...serving.batch import BatchEngine
from ...serving.sequence import Sequence
from .generate import SAMPLE_RATE, Frame, Generation, trim_samples
from .streaming import StreamingDecoder

DEFAULT_MAX_BATCH = 4
END = "end_of_text"


@dataclass
class TadaChunk:
    """The next piece of a stream: float32 audio at 24 kHz (may be empty while the CNN's
    lookahead is not there yet), the tokens it came from, and on the last chunk its stop
    reason."""

    audio: np.ndarray
    sample_rate: int
    tokens: int
    stop_reason: str | None = None
    batch_size: int = 1  # rows stepped together when this chunk's tokens were made


@dataclass
class FrameChunk:
    """What a frames-only request hands out: its generated frames (no audio)."""

    frames: list[Frame]
    stop_reason: str | None


class TadaSequence(Sequence):
    """One TADA request: its generation (prompt, options, generator), decoder window settings,
    and while it runs its streaming decoder state, the samples of leading silence still to drop
    and the last token's duration (the decoder's tail block)."""

    def __init__(
        self,
        generation: Generation,
        window: tuple[int, int],
        cadence: Cadence,
        should_stop: Callable[[], bool],
        *,
        audio: bool = True,
        outbox: Any = None,
    ) -> None:
        super().__init__(
            cadence, should_stop, generation.decoded_frames, END, audio=audio, outbox=outbox
        )
        self.generation = generation
        self.window = window  # (context, lookahead) frames of the CNN
        self.decoder_state = None
        self.trim: int | None = None  # samples still to drop (set by the first frame)
        self.last_before = 0
        self.decoder_frames = 0  # frames the decoder has once the pending tokens are pushed
        self.trim_frames: int | None = None  # leading-silence frames (the first token's)

    def add_frame(self, frame: Frame, batch: int) -> None:
        super().add_frame(frame, batch)
        self.decoder_frames += max(frame.before, 1)  # its block: (before - 1) zeros + vector
        if self.trim_frames is None:
            self.trim_frames = max(frame.before, self.generation.options.min_trim_frames)

    @property
    def audible(self) -> bool:
        """The pending tokens give samples: frames past the CNN's lookahead beyond the leading
        silence that is dropped."""
        return self.decoder_frames - self.window[1] > (self.trim_frames or 0)

    @property
    def chunk_due(self) -> bool:
        """The cadence's rule, but a first audio chunk waits until it has samples (the
        lookahead and the leading silence cover the first tokens): an empty first chunk would
        end the engine's first-chunk priority before any audio."""
        if self.audio and self.before_first_chunk and not self.at_limit:
            return self.audible and super().chunk_due
        return super().chunk_due


class TadaRunner:
    """The engine's StepModel for TADA (tts_core/serving/batch.py). `model`: the TadaModel
    whose `decoder` the rows' streaming decoders wrap (their LM is in each request)."""

    def __init__(self, model: Any, max_batch: int) -> None:
        if max_batch < 1:
            raise ValueError("max_batch must be >= 1")
        self.model = model
        self.max_batch = int(max_batch)
        self._decoders: dict[tuple[int, int], StreamingDecoder] = {}

    def decoder(self, window: tuple[int, int]) -> StreamingDecoder:
        if window not in self._decoders:
            self._decoders[window] = StreamingDecoder(self.model.decoder, *window)
        return self._decoders[window]

    def admit(self, seq: TadaSequence) -> bool:
        if seq.audio:
            seq.decoder_state = self.decoder(seq.window).start()
        return True  # its LM caches are made at prefill

    @torch.inference_mode()
    def prefill(self, seq: TadaSequence, positions: int) -> bool:
        """The whole prompt part in one call, whatever `positions` (as `generate`), then the
        transition steps whose frames are not decoded."""
        seq.generation.prefill()
        seq.generation.run_transition()
        return True

    @torch.inference_mode()
    def decode(self, seqs: list[TadaSequence], out: BatchEngine) -> None:
        rows = len(seqs)
        for seq in seqs:
            frame = seq.generation.next_frame()
            out.emit(seq, frame, rows, None if frame is not None else END)

    @torch.inference_mode()
    def deliver(
        self,
        seq: TadaSequence,
        frames: list[Frame],
        compute_s: float,
        stop_reason: str | None,
        batch: int,
    ) -> TadaChunk | FrameChunk:
        """The frames through the row's streaming decoder: the samples it can give now (all of
        them on the last chunk), less the leading silence still to drop."""
        if not seq.audio:
            return FrameChunk(frames, stop_reason)
        decoder, state = self.decoder(seq.window), seq.decoder_state
        options = seq.generation.options
        for frame in frames:
            if seq.trim is None:
                seq.trim = trim_samples(frame.before, options.min_trim_frames)
            decoder.push_token(state, frame.vector, frame.before)
            seq.last_before = frame.before
        pieces = [decoder.emit(state)]
        if stop_reason is not None and (frames or seq.frames):
            pieces.append(decoder.finish(state, seq.last_before))
        audio = torch.cat(pieces)
        cut = min(seq.trim or 0, audio.shape[0])
        if seq.trim is not None:
            seq.trim -= cut
        return TadaChunk(audio[cut:].float().numpy(), SAMPLE_RATE, len(frames), stop_reason, batch)

    def release(self, seq: TadaSequence) -> None:
        seq.generation.caches = None
        seq.decoder_state = None
