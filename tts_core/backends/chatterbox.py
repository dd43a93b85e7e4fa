"""Adapter: our Chatterbox Turbo (tts_core.models.chatterbox) -> the engine's Backend interface.

Streamed: T3 draws tokens and S3Gen + HiFT turn them into audio while it runs (`model.stream`:
the flow re-run over the prompt's tail and the newest tokens, ramping up to every `chunk_tokens`
tokens, the stable frames vocoded with a carried source; models/chatterbox/streaming.py). The
tokens are the official's for the seed; the audio approximates the whole-utterance pass
(measured SNR in BENCHMARKS.md).
Streamed chunks carry the Perth watermark (knob `watermark`, on by default, with resemble-perth
installed): each chunk is marked with 0.25 s of context and a 40 ms tail crossfaded into the
next pass (audio/perth_watermark.py StreamWatermarker: no clicks at the joins, measured in
BENCHMARKS.md); `model.generate(watermark=True)` gives the official's whole-clip watermark.
Every request goes through the backend's served loop (backends/neural.py: continuous batching,
each stream bit-identical to the same request's `model.stream`), which makes the voices too.
Cloning takes the reference clip alone (no transcript); with no clip the checkpoint's built-in
voice (conds.pt) speaks. The English model's backend (chatterbox_english.py) is this class with
its own model and knobs, which reach the model's request by name.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np

from ..engine.backend import BackendChunk, ReferenceNeeds, SynthesisParams, Voice
from ..engine.errors import InputError
from ..engine.knobs import knobs_of
from ..models.chatterbox.config import DEFAULT_MAX_BATCH
from ..models.chatterbox.knobs import TurboServed
from ..serving import RequestStream
from .neural import NeuralBackend

SAMPLES_PER_TOKEN = 960  # 40 ms at 24 kHz
KNOBS = knobs_of(TurboServed)  # the sampling, S3Gen's chunk sizes (`capabilities`), watermark

# Turbo's shortest reference (exclusive): the official's assert, which
# models/chatterbox/cloning.MIN_SECONDS makes (not imported here: that module loads torch)
TURBO_MIN_REFERENCE_S = 5.0

DESCRIPTION = (
    "Chatterbox Turbo voice cloning from the reference clip alone (longer than 5 s; a "
    "transcript is not used). With no clip it speaks in the checkpoint's built-in voice. Audio "
    "streams while the tokens are drawn (S3Gen in chunks: close to, not bit-equal to, the "
    "whole-clip pass); the streamed audio carries the Perth watermark (knob watermark)."
)


class ChatterboxBackend(NeuralBackend):
    name, title = "chatterbox", "Chatterbox Turbo"
    needs_reference = False  # the built-in voice speaks without a clip
    # clones from the clip alone (the page hides the transcript box); Turbo refuses a clip of
    # 5 s or less (the official's assert, models/chatterbox/cloning.py); S3Gen reads its first
    # 10 s at 24 kHz, the tokenizer 16 kHz
    reference = ReferenceNeeds(
        sample_rate=24_000,
        min_seconds=TURBO_MIN_REFERENCE_S,
        min_exclusive=True,
        max_seconds=None,
        transcript="ignored",
        best_seconds=(6.0, 10.0),
    )
    reads_transcript = False
    description = DESCRIPTION
    knobs = KNOBS
    # of the shared knobs the seed alone: a chunk is an S3Gen pass (first_chunk_tokens /
    # chunk_tokens), so first_chunk_frames / chunk_frames are neither offered nor taken
    capabilities = dataclasses.replace(NeuralBackend.capabilities, shared_knobs=("seed",))
    default_max_batch = DEFAULT_MAX_BATCH
    frame_samples = SAMPLES_PER_TOKEN  # a chunk's frames: its tokens' worth of audio

    def __init__(
        self, model: Any, model_name: str, device: str, max_batch: int | None = None
    ) -> None:
        from ..models.chatterbox.quant import t3_weight_format

        super().__init__(model, model_name, device, max_batch)
        self.sample_rate = int(model.sample_rate)
        self.weight_format = t3_weight_format(model)  # "int8": T3's blocks (quantize)
        self.weight_format_reason = getattr(model, "format_decision", "")
        # the knobs without a declared default: the model's generate()'s (its sampling's)
        self.knob_defaults = dataclasses.asdict(model.sampling_type())
        preload_watermark()

    @staticmethod
    def load_model(name_or_path: str, device: str, dtype: Any, quantize: str = "auto") -> Any:
        """A local folder in the released layout, float32 (dtype does not apply); quantize: T3
        on the 8-bit CPU path ("auto": where faster and >= 30 dB, models/chatterbox/quant.py)."""
        from ..models.chatterbox.model import ChatterboxTurboModel

        return ChatterboxTurboModel.from_pretrained(name_or_path, device=device, quantize=quantize)

    def voice_without_clip(self, reference_text: str | None) -> Voice:
        """The checkpoint's built-in voice (conds.pt; a transcript is not used)."""
        if self.model.builtin_voice is None:
            raise InputError(
                "This checkpoint has no built-in voice: add a reference clip.", "reference"
            )
        return Voice(self.name, None, {"mode": "built-in"})

    def submit(
        self, text: str, voice: Any, params: SynthesisParams, cancel: threading.Event
    ) -> RequestStream:
        """model.request's arguments: the knobs by name (the sampling's and S3Gen's chunk sizes:
        a chunk is a pass, the shared chunk sizes are not read), less the watermark, which
        `backend_chunks` applies."""
        values = self.knob_values(params)
        del values["watermark"]
        return self.loop.submit(text, voice, seed=params.seed, should_stop=cancel.is_set, **values)

    def backend_chunks(
        self, chunks: RequestStream, params: SynthesisParams
    ) -> Iterator[BackendChunk]:
        """Each chunk with its Perth watermark (knob `watermark`), marked on the model thread:
        beside the loop's steps, its torch threads and the steps' would share the cores
        (measured: +0.45 s per 1 s chunk, 2 cores)."""
        from ..audio.perth_watermark import stream_marker

        mark = stream_marker(self.knob_values(params)["watermark"], self.sample_rate)
        for chunk in chunks:
            audio = self.loop.call(mark, chunk.audio.astype(np.float32, copy=False), chunk.final)
            yield BackendChunk(
                audio,
                frames=audio.size // SAMPLES_PER_TOKEN,
                stop_reason=chunk.stop_reason,
                batch_size=chunk.batch_size,
            )


def preload_watermark() -> None:
    """Perth's model loaded at backend start where the stream is watermarked by default and
    resemble-perth is installed, so the first request does not load it."""
    from ..audio.perth_watermark import perth_available, shared_watermarker

    if TurboServed.watermark and perth_available():
        shared_watermarker()
