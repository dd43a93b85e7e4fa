"""Whether a named voice can serve the served model: its clip's length against the backend's
declared reference needs (engine/backend.py: ReferenceNeeds). The page's voice picker and
examples offer only the voices that fit; GET /v1/audio/voices says it per voice."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

import soundfile as sf

from ..engine.backend import ReferenceNeeds, reference_needs
from .voices import NamedVoice

# the real recordings, in the order the page prefers them as its starting voice
PREFERRED_VOICES = ("arctic-slt", "arctic-awb")


def clip_seconds(path: Path) -> float | None:
    """The clip's length from its header (None: unreadable); cached per file version."""
    try:
        stat = path.stat()
    except OSError:
        return None
    return _seconds(str(path), stat.st_mtime_ns, stat.st_size)


@lru_cache(maxsize=1024)
def _seconds(path: str, _mtime_ns: int, _size: int) -> float | None:
    try:
        info = sf.info(path)
    except (OSError, RuntimeError, sf.LibsndfileError):
        return None
    return info.frames / info.samplerate if info.samplerate else None


def why_unfit(voice: NamedVoice, needs: ReferenceNeeds) -> str | None:
    """Why `voice` cannot serve a model with `needs` (None: it can)."""
    seconds = clip_seconds(voice.reference)
    if seconds is None:
        return "its clip cannot be read"
    if needs.transcript == "required" and not voice.transcript:
        return "this model needs the clip's transcript (this voice has none)"
    return needs.why_not(seconds)


def fits(voice: NamedVoice, backend: object | None) -> bool:
    """Whether `voice` can serve `backend` (None: not loaded yet, so every voice is offered)."""
    return backend is None or why_unfit(voice, reference_needs(backend)) is None


def fit_json(voice: NamedVoice, backend: object | None) -> dict[str, Any]:
    """The listing's fields: the clip's length, and whether it fits the served model (None
    while the model loads) with the reason when it does not."""
    seconds = clip_seconds(voice.reference)
    fields: dict[str, Any] = {
        "reference_seconds": None if seconds is None else round(seconds, 2),
        "fits_model": None,
    }
    if backend is not None:
        reason = why_unfit(voice, reference_needs(backend))
        fields["fits_model"] = reason is None
        if reason is not None:
            fields["unfit_reason"] = reason
    return fields


def starting_voice(voices: list[NamedVoice], backend: object | None) -> str | None:
    """The voice the page starts on: the first preferred recording that fits, else the first
    built-in voice that fits (None: none does)."""
    fitting = {
        v.name: v for v in voices if v.kind == "builtin" and v.status == "ok" and fits(v, backend)
    }
    for name in (*PREFERRED_VOICES, *fitting):
        if name in fitting:
            return name
    return None
