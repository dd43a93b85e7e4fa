"""Cut an input longer than the engine's per-request limit into pieces it accepts.

Every surface takes up to one limit per deployment, `ApiConfig.max_input_chars` (4096, as
OpenAI: `split_request` refuses more, naming it), while the engine may take fewer per synthesis
(--max-chars); the pieces are spoken one after the other into the same response. The input is
cleaned first as the engine cleans a text (`printable`), so the limit counts what the engine
counts and no piece is only invisible characters. Cuts fall after a sentence end when possible,
else between words, else anywhere.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator

from ..engine.backend import TextTooLong
from ..engine.requests import SynthesisRequest
from ..engine.streams import StreamEvent
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


def check_input_length(text: object, max_input_chars: int) -> None:
    """TextTooLong (an InputError) when the cleaned `text` is longer than the deployment's
    limit; a text that is no string is left to the engine's own check."""
    if isinstance(text, str) and len(cleaned := printable(text)) > max_input_chars:
        raise TextTooLong(
            f"The text is {len(cleaned)} characters long; the limit is "
            f"{max_input_chars}. Shorten it, or send it in parts.",
            "text",
        )


def split_request(
    request: SynthesisRequest, max_input_chars: int, max_chars: int
) -> list[SynthesisRequest]:
    """`request` as engine requests of at most `max_chars` characters each (its text cut at
    sentence ends, spoken one after the other); TextTooLong past `max_input_chars`. A text
    with nothing visible stays one request, for the engine's own message."""
    check_input_length(request.text, max_input_chars)
    pieces = split_text(request.text, max_chars) if isinstance(request.text, str) else []
    if len(pieces) <= 1:
        return [request]
    return [dataclasses.replace(request, text=piece) for piece in pieces]


def done_at_the_end(events: Iterator[StreamEvent], pieces: int) -> Iterator[StreamEvent]:
    """The chained events of `pieces` requests with `done` set only at the last one's end: the
    page's players and stats panel say "Done" for the run, not for its first piece."""
    ends = 0
    for event in events:
        if event.stats.get("done"):
            ends += 1
            if ends < pieces:
                event = dataclasses.replace(event, stats={**event.stats, "done": False})
        yield event
