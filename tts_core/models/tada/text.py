"""hume-tada's text normalisation (tada/utils/text.py `normalize_text`), applied to the prompt
transcript and the target text before tokenizing: typographic punctuation to ASCII, then a
fixed chain of replacements, no space before . , ? !, lower case except the first letter and
the first letter after . ! ? (in the official order: each rule sees the previous one's output).
"""

from __future__ import annotations

import re

_ASCII = {
    "\u201c": '"',
    "\u201d": '"',
    "\u201e": '"',
    "\u201f": '"',
    "\u2018": "'",
    "\u2019": "'",
    "\u201a": "'",
    "\u201b": "'",
    "\u2013": "-",
    "\u2014": "-",
    "\u2015": "-",
    "\u2010": "-",
    "\u2011": "-",
    "\u2026": "...",
    "\u2039": "<",
    "\u203a": ">",
    "\u00ab": "<<",
    "\u00bb": ">>",
}
_ASCII_PATTERN = re.compile("|".join(re.escape(c) for c in _ASCII))
# applied in this order, each to the previous result
_REPLACEMENTS = (
    ("; ", ". "),
    ('"', ""),
    (":", ","),
    ("(", ""),
    (")", ""),
    ("--", "-"),
    ("-", ", "),
    (",,", ","),
    (" '", " "),
    ("' ", " "),
    ("  ", " "),
)
_SPACE_BEFORE_STOP = re.compile(r"\s+([.,?!])")
_AFTER_SENTENCE = re.compile(r"([.!?]\s*)(\w)")


def normalize_text(text: str) -> str:
    text = _ASCII_PATTERN.sub(lambda m: _ASCII[m.group(0)], text)
    for old, new in _REPLACEMENTS:
        text = text.replace(old, new)
    text = _SPACE_BEFORE_STOP.sub(r"\1", text)
    text = _AFTER_SENTENCE.sub(lambda m: m.group(1) + m.group(2).upper(), text.lower())
    return text[:1].upper() + text[1:]
