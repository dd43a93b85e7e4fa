"""Text side of the eSpeak backend: phrase splitting and language -> eSpeak voice names."""

from __future__ import annotations

import re

ESPEAK_VOICES = {
    "chinese": "cmn",
    "english": "en-us",
    "german": "de",
    "italian": "it",
    "portuguese": "pt",
    "spanish": "es",
    "japanese": "ja",
    "korean": "ko",
    "french": "fr",
    "russian": "ru",
}
MAX_PHRASE_CHARS = 160

_SENTENCE_END = re.compile(r"(?<=[.!?;:])\s+|(?<=[。！？；])")
_CLAUSE_END = re.compile(r"(?<=[,，、])\s*")


def guess_language(text: str) -> str:
    """'auto' for eSpeak: the language implied by the text's script (Latin -> english)."""
    if re.search(r"[\u3040-\u30ff]", text):
        return "japanese"
    if re.search(r"[\uac00-\ud7af\u1100-\u11ff]", text):
        return "korean"
    if re.search(r"[\u3400-\u9fff]", text):
        return "chinese"
    if re.search(r"[\u0400-\u04ff]", text):
        return "russian"
    return "english"


def split_phrases(text: str) -> list[str]:
    """Sentences, with over-long ones cut at commas then spaces: each is synthesized alone."""
    phrases: list[str] = []
    for sentence in _SENTENCE_END.split(text):
        for piece in _split_long(sentence.strip()):
            if piece:
                phrases.append(piece)
    return phrases


def _split_long(sentence: str) -> list[str]:
    if len(sentence) <= MAX_PHRASE_CHARS:
        return [sentence]
    parts, current = [], ""
    for clause in _CLAUSE_END.split(sentence):
        if current and len(current) + len(clause) > MAX_PHRASE_CHARS:
            parts.append(current.strip())
            current = ""
        current += clause + " "
    parts.append(current.strip())
    return [chunk for part in parts for chunk in _split_words(part)]


def _split_words(part: str) -> list[str]:
    if len(part) <= MAX_PHRASE_CHARS:
        return [part]
    words, chunks, current = part.split(" "), [], ""
    for word in words:
        if current and len(current) + len(word) + 1 > MAX_PHRASE_CHARS:
            chunks.append(current)
            current = ""
        current = f"{current} {word}".strip()
    chunks.append(current)
    return chunks
