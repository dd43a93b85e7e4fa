"""Checks of text, language, parameters and reference clip, with messages for the user."""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..audio import AudioDecodeError, decode_reference
from .backend import LANGUAGES, SynthesisParams
from .errors import InputError, shown
from .knobs import Knob, merge_knobs, parse_knobs, shared_knobs


@dataclass(frozen=True)
class Limits:
    max_chars: int = 1000
    min_reference_s: float = 1.0
    max_reference_s: float = 30.0  # longer clips are cut to their first max_reference_s
    silence_peak: float = 10 ** (-50 / 20)  # a clip whose peak is below -50 dBFS is "silent"
    max_chunk_frames: int = 100
    max_reference_text_chars: int = 2000


def printable(text: str) -> str:
    """The text as the engine speaks it: control and format characters (zero-width spaces and
    joiners, BOM, bidi marks, ...) dropped, whitespace runs collapsed to one space. Empty when
    nothing visible is left."""
    kept = "".join(ch for ch in text if ch in "\n\t" or unicodedata.category(ch)[0] != "C")
    return " ".join(kept.split())


def clean_reference_text(text: object, limits: Limits) -> str | None:
    """The optional transcript of the reference clip; None when absent or blank."""
    if text is None:
        return None
    if not isinstance(text, str):
        raise InputError("The reference transcript must be a string.", "reference_text")
    cleaned = printable(text)
    if len(cleaned) > limits.max_reference_text_chars:
        raise InputError(
            f"The reference transcript is {len(cleaned)} characters long; the limit is "
            f"{limits.max_reference_text_chars}. Use a shorter clip and its transcript.",
            "reference_text",
        )
    return cleaned or None


def clean_text(text: object, limits: Limits) -> str:
    if not isinstance(text, str):
        raise InputError("Text must be a string.", "text")
    cleaned = printable(text)
    if not cleaned:
        raise InputError("Please enter some text to speak.", "text")
    if len(cleaned) > limits.max_chars:
        raise InputError(
            f"The text is {len(cleaned)} characters long; the limit is {limits.max_chars}. "
            "Please shorten it.",
            "text",
        )
    return cleaned


def check_language(language: object) -> str:
    value = str(language if language is not None else "auto").strip().lower() or "auto"
    if value != "auto" and value not in LANGUAGES:
        raise InputError(
            f"Unsupported language '{shown(language)}'. Choose 'auto' or one of: {', '.join(LANGUAGES)}.",
            "language",
        )
    return value


def check_params(
    params: SynthesisParams, limits: Limits, knobs: Sequence[Knob] = ()
) -> SynthesisParams:
    """The language, and the values of the shared knobs (the chunk sizes up to
    `limits.max_chunk_frames`) and of `knobs` (the backend's own), each checked: InputError
    naming the knob. Other knobs' values are left out: the backend does not read them."""
    declared = merge_knobs(shared_knobs(limits.max_chunk_frames), knobs)
    return SynthesisParams(check_language(params.language), **parse_knobs(params.values, declared))


def prepare_reference(
    source: str | Path | bytes | tuple[int, np.ndarray] | None,
    limits: Limits,
    has_transcript: bool = False,
) -> tuple[np.ndarray | None, list[str]]:
    """Decoded, checked reference: ((N,) float32 24 kHz or None, notices for the user).

    Clips longer than `limits.max_reference_s` are cut with a notice, except when a transcript
    comes with them: the words would no longer match the audio, so that is refused.
    """
    if source is None or (isinstance(source, str) and not source.strip()):
        return None, []
    try:
        decoded = decode_reference(source, max_seconds=limits.max_reference_s)
    except AudioDecodeError as exc:
        raise InputError(f"Reference clip: {exc}", "reference") from exc
    if decoded.audio.size == 0:
        raise InputError("Reference clip: it contains no audio (zero length).", "reference")
    if float(np.max(np.abs(decoded.audio))) < limits.silence_peak:
        raise InputError(
            "Reference clip: it is silent. Please give a clip with speech in it.", "reference"
        )
    seconds = decoded.seconds
    if seconds < limits.min_reference_s:
        raise InputError(
            f"Reference clip: it is {seconds:.2f} s long; at least {limits.min_reference_s:g} s "
            "of speech is needed (3-10 s works best).",
            "reference",
        )
    if not decoded.was_cut:
        return decoded.audio, []
    length = _length_text(decoded.original_seconds, limits.max_reference_s)
    if has_transcript:
        raise InputError(
            f"Reference clip: it is {length}, and its transcript must match the audio exactly. "
            f"Trim the clip to at most {limits.max_reference_s:g} s and give the words of that "
            f"part, or leave the transcript empty to use the first {limits.max_reference_s:g} s.",
            "reference",
        )
    notice = (
        f"The reference clip is {length}: only its first {limits.max_reference_s:g} s were used."
    )
    return decoded.audio, [notice]


def _length_text(original_s: float | None, limit_s: float) -> str:
    if original_s is None or round(original_s, 1) <= limit_s:
        return f"longer than {limit_s:g} s"
    return f"{original_s:.1f} s long"
