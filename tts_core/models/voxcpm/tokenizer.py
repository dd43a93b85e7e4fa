"""VoxCPM2 text tokenizer (spec voxcpm2.md section 4), with the `tokenizers` library only.

The official package loads `tokenizer.json` with transformers' LlamaTokenizerFast, calls
`tokenize(text)` (no BOS/EOS whatever tokenizer_config.json says) and then splits every token
that is, after removing its "▁" marks, a multi-character pure-CJK vocabulary string into its
single characters (dropping the "▁"), which `convert_tokens_to_ids` maps (unknown -> `<unk>`).
The vocabulary and its size always come from the folder's `tokenizer.json`.
"""

from __future__ import annotations

import re
from pathlib import Path

from tokenizers import Tokenizer

TOKENIZER_FILE = "tokenizer.json"
SPACE_MARK = "\u2581"  # "▁"
_WHITESPACE = re.compile(r"\s+")


def _is_cjk(text: str) -> bool:
    return all("\u4e00" <= c <= "\u9fff" for c in text)


def normalize_target_text(text: str) -> str:
    """The official core API's target-text cleanup: newlines to spaces, then every run of
    whitespace to one space (no strip). The prompt transcript is not passed through this."""
    return _WHITESPACE.sub(" ", text.replace("\n", " "))


class VoxCPMTokenizer:
    def __init__(self, tokenizer: Tokenizer) -> None:
        self._tok = tokenizer
        vocab = tokenizer.get_vocab(with_added_tokens=True)
        self.vocab_size = len(vocab)
        self._multichar_cjk = {t for t in vocab if len(t) >= 2 and _is_cjk(t)}
        unk = tokenizer.token_to_id("<unk>")
        if unk is None:
            raise ValueError("tokenizer.json has no <unk> token")
        self.unk_id = unk

    @classmethod
    def from_folder(cls, folder: str | Path) -> VoxCPMTokenizer:
        path = Path(folder) / TOKENIZER_FILE
        if not path.is_file():
            raise FileNotFoundError(f"{path}: not found (the VoxCPM2 tokenizer)")
        return cls(Tokenizer.from_file(str(path)))

    def tokenize(self, text: str) -> list[str]:
        tokens = self._tok.encode(text, add_special_tokens=False).tokens
        out: list[str] = []
        for token in tokens:
            clean = token.replace(SPACE_MARK, "")
            out.extend(list(clean) if clean in self._multichar_cjk else [token])
        return out

    def encode(self, text: str) -> list[int]:
        ids = (self._tok.token_to_id(token) for token in self.tokenize(text))
        return [self.unk_id if i is None else i for i in ids]
