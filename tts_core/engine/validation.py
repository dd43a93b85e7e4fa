"""Checks of text, language, parameters and reference clip, with messages for the user."""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from ..audio import AudioDecodeError, decode_reference
from .backend import LANGUAGES, SynthesisParams
from .errors import InputError


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
            f"Unsupported language '{language}'. Choose 'auto' or one of: {', '.join(LANGUAGES)}.",
            "language",
        )
    return value


# Practical floors: below them the sampler's arithmetic leaves float32 (logits / 1e-45 is inf,
# and softmax of inf is NaN) while no audible difference from greedy remains to be had.
MIN_TEMPERATURE = 0.01
MIN_REPETITION_PENALTY = 0.1


def check_params(params: SynthesisParams, limits: Limits) -> SynthesisParams:
    temperature = _range("temperature", params.temperature, MIN_TEMPERATURE, 5.0)
    top_p = _range("top_p", params.top_p, 0.0, 1.0, low_open=True)
    penalty = _range("repetition_penalty", params.repetition_penalty, MIN_REPETITION_PENALTY, 5.0)
    top_k = _as_int("top_k", params.top_k, 0, 100_000)
    seed = _as_int("seed", params.seed, -1, 2**32 - 1)
    first = _as_int("first_chunk_frames", params.first_chunk_frames, 1, limits.max_chunk_frames)
    steady = _as_int("chunk_frames", params.chunk_frames, 1, limits.max_chunk_frames)
    cfg_value = _range("cfg_value", params.cfg_value, 0.0, 10.0)
    timesteps = _as_int("inference_timesteps", params.inference_timesteps, 1, 100)
    return replace(
        params,
        language=check_language(params.language),
        temperature=temperature,
        top_p=top_p,
        repetition_penalty=penalty,
        top_k=top_k,
        seed=None if seed is None or seed < 0 else seed,  # -1 / empty: random
        first_chunk_frames=first,
        chunk_frames=steady,
        cfg_value=cfg_value,
        inference_timesteps=timesteps,
    )


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


def _range(
    name: str, value: object, low: float, high: float, low_open: bool = False
) -> float | None:
    if value is None or value == "":
        return None
    try:
        number = float(value)
    except (TypeError, ValueError) as exc:
        raise InputError(f"{name} must be a number.", name) from exc
    too_low = number <= low if low_open else number < low
    if too_low or number > high or not np.isfinite(number):
        bracket = "(" if low_open else "["
        raise InputError(f"{name} must be in {bracket}{low:g}, {high:g}]; got {value}.", name)
    return number


def _as_int(name: str, value: object, low: int, high: int) -> int | None:
    if value is None or value == "":
        return None
    try:
        number = float(value)  # gradio sliders and JSON clients may send 50.0
    except (TypeError, ValueError) as exc:
        raise InputError(f"{name} must be a whole number.", name) from exc
    if not np.isfinite(number) or number != int(number) or not low <= number <= high:
        raise InputError(f"{name} must be a whole number in [{low}, {high}]; got {value}.", name)
    return int(number)
