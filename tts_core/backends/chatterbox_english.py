"""Adapter: our Chatterbox original English model (tts_core.models.chatterbox.english) -> the
engine's Backend interface.

Streamed as Turbo streams (models/chatterbox/streaming.py): T3 draws the official's tokens for
the seed, S3Gen (the regular 10-step CFM with guidance) re-runs over prompt + tokens so far and
hands out the stable audio, HiFT carried across chunks; the clip approximates the whole pass and
is not watermarked. One stream at a time (a lock; no batching scheduler for this model yet).
Cloning takes the reference clip alone (no transcript, no length limit: the English
prepare_conditionals has none); with no clip the checkpoint's built-in voice (conds.pt) speaks.
The knobs are the English generate()'s: exaggeration and cfg_weight besides the sampling values.
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
from .chatterbox import KNOBS as TURBO_KNOBS
from .chatterbox import SAMPLES_PER_TOKEN, reference_clip

log = logging.getLogger(__name__)
SAMPLING_KNOBS = ("temperature", "min_p", "top_p", "repetition_penalty", "cfg_weight")
CHUNK_KNOBS = tuple(k for k in TURBO_KNOBS if k.name in ("first_chunk_tokens", "chunk_tokens"))
# The official English generate()'s defaults (tts.py), declared once for page, API and checks;
# the S3Gen chunk sizes are Turbo's knobs (same streaming code).
KNOBS = (
    Knob("exaggeration", float, 0.0, 2.0, default=0.5, label="Exaggeration", step=0.05,
         ui_range=(0.25, 2.0),
         help="Emotion intensity: 0.5 is neutral, higher is more expressive."),
    Knob("cfg_weight", float, 0.0, 2.0, default=0.5, label="CFG weight", step=0.05,
         ui_range=(0.0, 1.0),
         help="Classifier-free guidance on the text: lower speaks slower and looser; 0 turns "
              "guidance off (one pass instead of two)."),
    Knob("temperature", float, 0.0, 5.0, default=0.8, low_open=True, label="Temperature",
         step=0.05, ui_range=(0.05, 2.0),
         help="Higher: more varied speech; lower: steadier, closer to the likeliest."),
    Knob("min_p", float, 0.0, 1.0, default=0.05, label="Min-p", step=0.01,
         ui_range=(0.0, 1.0),
         help="Drop tokens less likely than this fraction of the likeliest one."),
    Knob("top_p", float, 0.0, 1.0, default=1.0, low_open=True, label="Top-p", step=0.05,
         ui_range=(0.05, 1.0),
         help="Sample among the likeliest tokens that together hold this probability."),
    Knob("repetition_penalty", float, 1.0, 5.0, default=1.2, label="Repetition penalty",
         step=0.01, ui_range=(1.0, 2.0),
         help="Above 1: tokens already produced are less likely again (fewer loops)."),
    *CHUNK_KNOBS,
)  # fmt: skip

DESCRIPTION = (
    "Chatterbox (original English model) voice cloning from the reference clip alone (a "
    "transcript is not used), with emotion exaggeration and classifier-free guidance. With no "
    "clip it speaks in the checkpoint's built-in voice. Audio streams while the tokens are "
    "drawn (S3Gen in chunks: close to, not bit-equal to, the whole-clip pass); streamed audio "
    "is not watermarked."
)


class ChatterboxEnglishBackend:
    name = "chatterbox-english"
    can_clone = True
    needs_reference = False  # the built-in voice speaks without a clip
    reads_language = False  # English only: the page hides its language dropdown
    reads_transcript = False  # clones from the clip alone: the page hides the transcript box
    independent_phrases = False
    takes_text_pieces = False
    description = DESCRIPTION
    knobs = KNOBS
    default_concurrency = 1

    def __init__(self, model: Any, model_name: str, device: str) -> None:
        self.model = model
        self.model_name = model_name
        self.device = device
        self.sample_rate = int(model.sample_rate)
        self.frame_samples = SAMPLES_PER_TOKEN
        self.weight_format = "float32"
        self._lock = threading.Lock()  # one computation of the model at a time

    @classmethod
    def load(cls, name_or_path: str, device: str = "auto", **_: Any) -> ChatterboxEnglishBackend:
        """Local folder in the English release layout; float32 (dtype / max_batch do not
        apply)."""
        from ..models.chatterbox.english import ChatterboxEnglishModel
        from .device import resolve_device

        device = resolve_device(device)
        model = ChatterboxEnglishModel.from_pretrained(name_or_path, device=device)
        log.info("loaded Chatterbox English %s on %s", name_or_path, device)
        return cls(model, str(name_or_path), device)

    def close(self) -> None:
        pass

    def sampling_defaults(self) -> dict[str, Any]:
        return {knob.name: knob.default for knob in self.knobs}

    def create_voice(self, audio: np.ndarray | None, reference_text: str | None) -> Voice:
        """audio: 24 kHz mono float32 reference, or None for the built-in voice."""
        if audio is None:
            if self.model.builtin_voice is None:
                raise InputError("This checkpoint has no built-in voice: add a reference clip.",
                                 "reference")  # fmt: skip
            return Voice(self.name, None, {"mode": "built-in"})
        clip = reference_clip(audio)
        try:
            with self._lock:
                voice = self.model.create_voice(clip, 24000)
        except ValueError as exc:
            raise InputError(f"Reference clip: {exc}", "reference") from exc
        return Voice(self.name, voice, {"mode": "reference", "transcript": False,
                                        "transcript_ignored": bool(reference_text)})  # fmt: skip

    def stream(
        self, text: str, voice: Voice, params: SynthesisParams, cancel: threading.Event
    ) -> Iterator[BackendChunk]:
        from ..models.chatterbox.english_t3 import EnglishSampling
        from ..models.chatterbox.streaming import StreamChunking

        seed = params.seed if params.seed is not None else secrets.randbelow(2**31)
        values = {**self.sampling_defaults(), **params.values_of(self.knobs)}
        sampling = EnglishSampling(**{name: values[name] for name in SAMPLING_KNOBS})
        chunking = StreamChunking(first_tokens=values["first_chunk_tokens"],
                                  chunk_tokens=values["chunk_tokens"])  # fmt: skip
        with self._lock:  # held while the stream runs; the engine closes it on cancel
            if cancel.is_set():
                return
            try:
                chunks = self.model.stream(text, voice.data, seed=seed,
                                           exaggeration=values["exaggeration"],
                                           sampling=sampling, chunking=chunking)  # fmt: skip
                first = next(chunks)  # the request's checks run before the first draw
            except ValueError as exc:  # e.g. text too long for T3's positions
                raise InputError(str(exc)) from exc
            yield self._chunk(first)
            for chunk in chunks:
                if cancel.is_set():
                    return
                yield self._chunk(chunk)

    @staticmethod
    def _chunk(chunk: Any) -> BackendChunk:
        return BackendChunk(chunk.audio.astype(np.float32, copy=False),
                            frames=chunk.audio.size // SAMPLES_PER_TOKEN,
                            stop_reason=chunk.stop_reason, batch_size=1)  # fmt: skip
