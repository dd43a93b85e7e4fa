"""Incremental target-text tokenization for text that arrives in pieces (issue #27).

`TextFeed.feed(piece)` returns the target-text ids that became STABLE: ids that can no longer
change whatever text is appended. BPE runs inside pre-tokens (the split regex pieces), so every
pre-token but the last one of the text so far is final: appending text can only extend, shrink
or re-split the last piece. Text from the first "<" on is held back (it may start an added
token such as <|im_end|>, which is matched before the split) until `finish()`.
`finish()` returns the rest, and checks that all committed ids equal the ids of the whole text
as `prompt.target_text_ids` gives them (the ids the one-shot request would use).
"""

from __future__ import annotations

import unicodedata

from .prompt import ROLE_TOKENS, TEXT_TAIL_TOKENS, target_text_ids
from .text_tokenizer import TextTokenizer


class TextFeed:
    def __init__(self, tokenizer: TextTokenizer) -> None:
        self._tokenizer = tokenizer
        self._text = ""
        self._cut = 0  # characters of the NFC text whose ids are committed
        self.committed: list[int] = []
        self.role: list[int] | None = None  # the template's first ROLE_TOKENS ids, at 1st commit
        self.finished = False

    @property
    def text(self) -> str:
        return self._text

    def feed(self, piece: str) -> list[int]:
        """Append `piece`; the newly stable ids (often none)."""
        if self.finished:
            raise ValueError("text feed already finished")
        self._text += piece
        tail = unicodedata.normalize("NFC", self._text)[self._cut :]
        held = tail.find("<")  # may start an added token: wait for finish()
        if held >= 0:
            tail = tail[:held]
        lead = "\n" if self._cut == 0 else ""  # the role's "\n" may merge with leading "\n"s
        pieces = self._tokenizer.pieces(lead + tail)
        if len(pieces) < 2:
            return []
        ids = [i for _, piece_ids in pieces[:-1] for i in piece_ids]
        if lead:  # the role's third id (prompt.ROLE_TOKENS)
            self.role = self._tokenizer.encode("<|im_start|>assistant") + ids[:1]
            ids = ids[1:]
        self._cut += pieces[-1][0] - len(lead)
        self.committed.extend(ids)
        return ids

    def finish(self) -> list[int]:
        """No more text: the remaining ids (the whole text's ids minus those committed)."""
        if self.finished:
            raise ValueError("text feed already finished")
        self.finished = True
        ids = target_text_ids(self._tokenizer, self._text)
        whole = ids[ROLE_TOKENS:-TEXT_TAIL_TOKENS]
        if self.role is not None and ids[:ROLE_TOKENS] != self.role:
            raise RuntimeError("streamed text ids diverged from the whole text's ids")
        self.role = ids[:ROLE_TOKENS]
        if whole[: len(self.committed)] != self.committed:
            raise RuntimeError("streamed text ids diverged from the whole text's ids")
        rest = whole[len(self.committed) :]
        self.committed.extend(rest)
        return rest
