"""Adapter: our Chatterbox Turbo (tts_core.models.chatterbox) -> the engine's Backend interface.

Streamed: T3 draws tokens and S3Gen + HiFT turn them into audio while it runs (`model.stream`:
the flow re-run over prompt + all tokens so far every `chunk_tokens` tokens, the stable frames
vocoded with a carried source; models/chatterbox/streaming.py). The tokens are the official's
for the seed; the audio approximates the whole-utterance pass (measured SNR in BENCHMARKS.md).
Streamed chunks are NOT watermarked (as in upstream's streaming PR #528: the Perth watermark
works on whole-clip STFT frames); `model.generate(watermark=True)` still gives the watermarked
whole clip. Every request goes through the model's TurboScheduler (continuous batching on the
one decode engine, models/chatterbox/serving.py: up to `max_batch` streams step together on one
loop thread, each bit-identical to the same request's `model.stream`), which makes the voices too.
Cloning takes the reference clip alone (no transcript); with no clip the checkpoint's built-in
voice (conds.pt) speaks.
"""

from __future__ import annotations

import logging
import secrets
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np

from ..engine.backend import BackendChunk, SynthesisParams, Voice
from ..engine.errors import InputError
from ..engine.knobs import Knob
from ..models.chatterbox.serving import DEFAULT_MAX_BATCH
from ..models.chatterbox.streaming import StreamChunking

log = logging.getLogger(__name__)
SAMPLES_PER_TOKEN = 960  # 40 ms at 24 kHz
DEFAULT_CHUNKING = StreamChunking()
SAMPLING_KNOBS = ("temperature", "top_k", "top_p", "repetition_penalty")
# The official Turbo generate()'s sampling defaults, then the streaming chunk sizes; declared
# once here for page, API, checks.
KNOBS = (
    Knob("temperature", float, 0.0, 5.0, default=0.8, low_open=True, label="Temperature",
         step=0.05, ui_range=(0.1, 2.0),
         help="Higher: more varied speech; lower: steadier, closer to the likeliest."),
    Knob("top_k", int, 0, 6563, default=1000, label="Top-k (0: off)", step=1,
         ui_range=(0, 2000), help="Sample each speech token among the k likeliest."),
    Knob("top_p", float, 0.0, 1.0, default=0.95, low_open=True, label="Top-p", step=0.05,
         ui_range=(0.05, 1.0),
         help="Sample among the likeliest tokens that together hold this probability."),
    Knob("repetition_penalty", float, 1.0, 5.0, default=1.2, label="Repetition penalty",
         step=0.01, ui_range=(1.0, 2.0),
         help="Above 1: tokens already produced are less likely again (fewer loops)."),
    # S3Gen's chunking (StreamChunking); the shared first_chunk_frames / chunk_frames only group
    # the audio into events. One token = 40 ms of audio; each pass re-runs the flow.
    Knob("first_chunk_tokens", int, 1, 200, default=DEFAULT_CHUNKING.first_tokens,
         label="First S3Gen chunk (tokens)", step=1, ui_range=(4, 100),
         help="Speech tokens before the first audio is made: fewer start sooner, but the "
              "first audio is shorter and each pass costs a flow run."),
    Knob("chunk_tokens", int, 1, 400, default=DEFAULT_CHUNKING.chunk_tokens,
         label="Later S3Gen chunks (tokens)", step=1, ui_range=(4, 200),
         help="Speech tokens between later passes: more cost fewer flow runs."),
)  # fmt: skip

DESCRIPTION = (
    "Chatterbox Turbo voice cloning from the reference clip alone (longer than 5 s; a "
    "transcript is not used). With no clip it speaks in the checkpoint's built-in voice. Audio "
    "streams while the tokens are drawn (S3Gen in chunks: close to, not bit-equal to, the "
    "whole-clip pass); streamed audio is not watermarked."
)


class ChatterboxBackend:
    name = "chatterbox"
    can_clone = True
    needs_reference = False  # the built-in voice speaks without a clip
    reads_language = False  # English model: the page hides its language dropdown
    reads_transcript = False  # clones from the clip alone: the page hides the transcript box
    independent_phrases = False
    takes_text_pieces = False
    description = DESCRIPTION
    knobs = KNOBS

    def __init__(
        self, model: Any, model_name: str, device: str, max_batch: int = DEFAULT_MAX_BATCH
    ) -> None:
        from ..models.chatterbox.serving import TurboScheduler

        self.model = model
        self.model_name = model_name
        self.device = device
        self.sample_rate = int(model.sample_rate)
        self.frame_samples = SAMPLES_PER_TOKEN
        self.weight_format = "float32"
        self.scheduler = TurboScheduler(model, max_batch=max_batch)  # thread starts on first use
        self.default_concurrency = self.scheduler.max_batch  # the engine admits as many

    @classmethod
    def load(
        cls, name_or_path: str, device: str = "auto", max_batch: int = DEFAULT_MAX_BATCH, **_: Any
    ) -> ChatterboxBackend:
        """Local folder in the released layout; float32 (dtype does not apply); max_batch:
        streams decoded together."""
        from ..models.chatterbox.model import ChatterboxTurboModel
        from .device import resolve_device

        device = resolve_device(device)
        model = ChatterboxTurboModel.from_pretrained(name_or_path, device=device)
        log.info("loaded Chatterbox Turbo %s on %s", name_or_path, device)
        return cls(model, str(name_or_path), device, max_batch=max_batch)

    def close(self) -> None:
        """Stop the scheduler's thread; streams still running end without a final chunk."""
        self.scheduler.close()

    def sampling_defaults(self) -> dict[str, Any]:
        return {knob.name: knob.default for knob in self.knobs}

    def create_voice(self, audio: np.ndarray | None, reference_text: str | None) -> Voice:
        """audio: 24 kHz mono float32 reference (> 5 s), or None for the built-in voice."""
        # A transcript (the built-in voices carry theirs) is not used: Turbo clones from the
        # clip alone; the summary says so.
        if audio is None:
            if self.model.builtin_voice is None:
                raise InputError("This checkpoint has no built-in voice: add a reference clip.",
                                 "reference")  # fmt: skip
            return Voice(self.name, None, {"mode": "built-in"})
        clip = reference_clip(audio)
        try:
            # on the scheduler's thread, as every computation of the model (serving/loop.py)
            voice = self.scheduler.call(self.model.create_voice, clip, 24000)
        except ValueError as exc:  # e.g. shorter than 5 s
            raise InputError(f"Reference clip: {exc}", "reference") from exc
        return Voice(self.name, voice, {"mode": "reference", "transcript": False,
                                        "transcript_ignored": bool(reference_text)})  # fmt: skip

    def stream(
        self, text: str, voice: Voice, params: SynthesisParams, cancel: threading.Event
    ) -> Iterator[BackendChunk]:
        from ..models.chatterbox.sampling import TurboSampling

        seed = params.seed if params.seed is not None else secrets.randbelow(2**31)
        values = {**self.sampling_defaults(), **params.values_of(self.knobs)}
        sampling = TurboSampling(**{name: values[name] for name in SAMPLING_KNOBS})
        chunking = StreamChunking(first_tokens=values["first_chunk_tokens"],
                                  chunk_tokens=values["chunk_tokens"])  # fmt: skip
        if cancel.is_set():
            return
        try:  # model.stream's arguments (the scheduler's submit takes the same)
            chunks = self.scheduler.submit(text, voice.data, seed=seed, sampling=sampling,
                                           chunking=chunking, should_stop=cancel.is_set)  # fmt: skip
        except ValueError as exc:  # the request's checks (e.g. text too long for T3)
            raise InputError(str(exc)) from exc
        try:
            for chunk in chunks:
                yield BackendChunk(chunk.audio.astype(np.float32, copy=False),
                                   frames=chunk.audio.size // SAMPLES_PER_TOKEN,
                                   stop_reason=chunk.stop_reason,
                                   batch_size=chunk.batch_size)  # fmt: skip
                if cancel.is_set():
                    return
        finally:
            chunks.close()  # frees the row and its caches now, not at garbage collection


def reference_clip(audio: np.ndarray) -> np.ndarray:
    """The reference as mono float32 samples, or an InputError naming what is wrong."""
    clip = np.asarray(audio)
    if clip.ndim != 1 or clip.size == 0 or not np.issubdtype(clip.dtype, np.floating):
        raise InputError(f"Reference clip: expected mono float samples, got shape "
                         f"{clip.shape} ({clip.dtype}).", "reference")  # fmt: skip
    if not np.all(np.isfinite(clip)):
        raise InputError("Reference clip: it contains NaN or infinite samples.", "reference")
    return clip.astype(np.float32)
