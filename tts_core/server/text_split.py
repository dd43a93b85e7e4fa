"""Cut an API input longer than the engine's per-request limit into pieces it accepts.

The speech API takes up to 4096 characters (like OpenAI) while the engine may be configured
for fewer; the pieces are synthesized one after the other into the same response. The input is
cleaned first, as the engine's validation cleans a text (`printable`: control and zero-width
characters dropped, whitespace collapsed), so the limit counts what the engine counts and no
piece is made only of invisible characters. Cuts fall after a sentence end when possible, else
between words, else anywhere.
"""

from __future__ import annotations

import re

from ..engine.validation import printable

_SENTENCE_END = re.compile(r"(?<=[.!?;:。！？；])\s+")


def split_text(text: str, max_chars: int) -> list[str]:
    """Pieces of the cleaned `text`, each visible and at most `max_chars` characters long, whose
    concatenation (with spaces) is the cleaned text; [] when nothing visible is left."""
    text = printable(text)
    if not text:
        return []
    if len(text) <= max_chars:
        return [text]
    pieces: list[str] = []
    current = ""
    for unit in _units(text, max_chars):
        candidate = f"{current} {unit}" if current else unit
        if len(candidate) <= max_chars:
            current = candidate
        else:
            pieces.append(current)
            current = unit
    if current:
        pieces.append(current)
    return pieces


def _units(text: str, max_chars: int) -> list[str]:
    """Sentences; a sentence longer than max_chars becomes words; a longer word, slices."""
    units: list[str] = []
    for sentence in _SENTENCE_END.split(text):
        if len(sentence) <= max_chars:
            units.append(sentence)
            continue
        for word in sentence.split(" "):
            units += [word[i : i + max_chars] for i in range(0, len(word), max_chars)]
    return [unit for unit in units if unit]
