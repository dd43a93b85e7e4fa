"""Offline voice: eSpeak NG, in-process, streamed buffer by buffer and resampled to 24 kHz.

Each phrase is an independent eSpeak call (so the engine crossfades their joins) on the thread
that advances the stream; its buffers go out once it is synthesized (~100x real time), before
later phrases are. A cancel makes the library's callback abort. Text sent in pieces is held
until done: the phrases and their crossfades are the whole text's.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
import soxr

from ..audio import SAMPLE_RATE
from ..engine.backend import BackendChunk, ReferenceNeeds, SynthesisParams, Voice
from ..engine.capabilities import Capabilities
from .espeak_lib import PARAM_PITCH, PARAM_RANGE, PARAM_RATE, EspeakLibrary, get_library
from .espeak_text import ESPEAK_VOICES, guess_language, split_phrases
from .espeak_voice import (
    CALIBRATION_TEXT,
    EspeakSettings,
    PitchLine,
    measure_f0,
    settings_from_reference,
)

VARIANTS = ("", "+f3")  # eSpeak's default (male) voice and its female variant 3
_PHRASE_END = object()

DESCRIPTION = (
    "Offline eSpeak NG voice. It cannot clone: from your reference clip it only takes the "
    "pitch (choosing a male or female variant), the pitch range and the speaking rate. "
    "Sampling settings do not apply to it, and 'auto' language only looks at the script "
    "(Latin text is read as English)."
)


class EspeakBackend:
    name = "espeak"
    can_clone = False
    needs_reference = False
    # the pitch, its range and the rate are measured from the clip (the transcript, when given,
    # counts its syllables for the rate)
    reference = ReferenceNeeds(sample_rate=24_000, transcript="used")
    sample_rate = SAMPLE_RATE
    frame_samples = 1920  # chunk sizes are counted in 80 ms frames, as for the neural model
    description = DESCRIPTION
    default_concurrency = 4  # synthesis is ~100x real time; the library lock serializes it
    knobs = ()  # it reads only the language: pitch and rate come from the reference
    # each phrase is its own eSpeak call: crossfade the joins; text in pieces: buffered until
    # done (module doc)
    capabilities = Capabilities(independent_phrases=True)
    weight_format, weight_format_reason, decode_step = None, "", None  # no neural weights

    def __init__(self) -> None:
        self._lib: EspeakLibrary = get_library()
        self.model_name = f"espeak-ng {self._lib.version}"
        self.device = "cpu"
        self._pitch_lines: dict[str, PitchLine] | None = None
        self._calibration_lock = threading.Lock()

    def warm_up(self) -> None:
        """Pay one-time costs (library load, pitch calibration, analysis code paths) now."""
        pieces: list[np.ndarray] = []
        self._lib.synthesize(CALIBRATION_TEXT, "en-us", {}, lambda a: pieces.append(a) or True)
        from ..audio import resample

        clip = resample(np.concatenate(pieces), self._lib.sample_rate, SAMPLE_RATE)
        self.create_voice(clip, CALIBRATION_TEXT)
        self.create_voice(clip, None)

    def sampling_defaults(self) -> dict[str, Any]:
        return {}

    def create_voice(self, audio: np.ndarray | None, reference_text: str | None) -> Voice:
        lines = self.pitch_lines()
        settings = settings_from_reference(audio, reference_text, lines)
        if settings.ref_f0_hz is not None:
            self._refine_pitch(settings, lines[settings.variant])
        return Voice(self.name, settings, settings.summary())

    def _refine_pitch(self, settings: EspeakSettings, line: PitchLine) -> None:
        """The calibration line assumes range 50; measure the chosen range once and correct."""
        produced = self._median_f0(
            settings.variant, settings.pitch, settings.pitch_range, settings.rate_wpm
        )
        step = line.per_octave * float(np.log2(settings.ref_f0_hz / produced))
        settings.pitch = int(np.clip(round(settings.pitch + step), 0, 100))

    def pitch_lines(self) -> dict[str, PitchLine]:
        """Measured pitch-parameter -> F0 line of each variant (two short syntheses each)."""
        with self._calibration_lock:
            if self._pitch_lines is None:
                self._pitch_lines = {v: self._measure_line(v) for v in VARIANTS}
            return self._pitch_lines

    def _measure_line(self, variant: str) -> PitchLine:
        low, high = (self._median_f0(variant, pitch) for pitch in (0, 100))
        return PitchLine(base_hz=low, per_octave=100.0 / float(np.log2(high / low)))

    def _median_f0(self, variant: str, pitch: int, pitch_range: int = 50, rate: int = 175) -> float:
        pieces: list[np.ndarray] = []
        settings = {PARAM_PITCH: pitch, PARAM_RANGE: pitch_range, PARAM_RATE: rate}
        self._lib.synthesize(
            CALIBRATION_TEXT, "en-us" + variant, settings, lambda a: pieces.append(a) or True
        )
        return float(np.median(measure_f0(np.concatenate(pieces), self._lib.sample_rate)))

    def stream(
        self, text: str, voice: Voice, params: SynthesisParams, cancel: threading.Event
    ) -> Iterator[BackendChunk]:
        language = guess_language(text) if params.language == "auto" else params.language
        name = ESPEAK_VOICES[language] + voice.data.variant
        settings = {
            PARAM_PITCH: voice.data.pitch,
            PARAM_RANGE: voice.data.pitch_range,
            PARAM_RATE: voice.data.rate_wpm,
        }
        yield from self._resampled(self._buffers(split_phrases(text), name, settings, cancel))

    def _buffers(self, phrases, voice_name, settings, cancel) -> Iterator[Any]:  # noqa: ANN001
        """Each phrase's buffers once it is synthesized, then _PHRASE_END."""
        buffers: list[np.ndarray] = []

        def keep(samples: np.ndarray) -> bool:  # the library's callback: False aborts
            buffers.append(samples)
            return not cancel.is_set()

        for phrase in phrases:
            if cancel.is_set():
                return
            self._lib.synthesize(phrase, voice_name, settings, keep)
            yield from buffers
            buffers.clear()
            yield _PHRASE_END

    def _resampled(self, buffers: Iterator[Any]) -> Iterator[BackendChunk]:
        """eSpeak's 22.05 kHz buffers -> 24 kHz pieces; a fresh resampler per phrase."""
        resampler, new_phrase, first = None, True, True
        for item in buffers:
            if item is _PHRASE_END:
                if resampler is not None:
                    tail = resampler.resample_chunk(np.zeros(0, np.float32), last=True)
                    if tail.size:
                        yield BackendChunk(tail.astype(np.float32))
                resampler, new_phrase = None, True
                continue
            if resampler is None:
                resampler = soxr.ResampleStream(
                    self._lib.sample_rate, SAMPLE_RATE, 1, dtype="float32", quality="HQ"
                )
            piece = resampler.resample_chunk(item)
            if piece.size == 0:
                continue
            yield BackendChunk(piece.astype(np.float32), independent=new_phrase and not first)
            new_phrase, first = False, False
