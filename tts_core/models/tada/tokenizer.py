"""TADA's text tokenizer: Llama 3's (byte-level BPE over tiktoken's ranks, 256 special tokens
from id 128000), read from the checkpoint folder's `tokenizer.json` with the `tokenizers` library.

The official code calls transformers' AutoTokenizer on `meta-llama/Llama-3.2-1B` (gated); the same
vocabulary in a `tokenizers` file is what a downloaded checkpoint gives us at run time. Every
encode here is `add_special_tokens=False` (the official prompt and target text are encoded that
way); the special tokens TADA uses are looked up by name.
"""

from __future__ import annotations

from pathlib import Path

from tokenizers import Tokenizer

TOKENIZER_FILE = "tokenizer.json"

BEGIN_OF_TEXT = "<|begin_of_text|>"
END_OF_TEXT = "<|end_of_text|>"
START_HEADER = "<|start_header_id|>"
END_HEADER = "<|end_header_id|>"
END_OF_TURN = "<|eot_id|>"
PAD = "<|finetune_right_pad_id|>"
REQUIRED_SPECIALS = (BEGIN_OF_TEXT, END_OF_TEXT, START_HEADER, END_HEADER, END_OF_TURN, PAD)


class TadaTokenizer:
    def __init__(self, tokenizer: Tokenizer, where: str = "tokenizer") -> None:
        self._tok = tokenizer
        self.vocab_size = tokenizer.get_vocab_size(with_added_tokens=True)
        missing = [name for name in REQUIRED_SPECIALS if tokenizer.token_to_id(name) is None]
        if missing:
            raise ValueError(f"{where}: no special token {', '.join(missing)}")
        self.bos_id = self.token_id(BEGIN_OF_TEXT)
        self.eos_id = self.token_id(END_OF_TEXT)
        self.start_header_id = self.token_id(START_HEADER)
        self.end_header_id = self.token_id(END_HEADER)
        self.eot_id = self.token_id(END_OF_TURN)
        self.pad_id = self.token_id(PAD)

    @classmethod
    def from_folder(cls, folder: str | Path) -> TadaTokenizer:
        path = Path(folder) / TOKENIZER_FILE
        if not path.is_file():
            raise FileNotFoundError(f"{path}: not found (TADA's Llama 3 tokenizer)")
        return cls(Tokenizer.from_file(str(path)), str(path))

    def token_id(self, name: str) -> int:
        found = self._tok.token_to_id(name)
        if found is None:
            raise KeyError(name)
        return found

    def encode(self, text: str) -> list[int]:
        """Ids of `text` without BOS (the official `encode(..., add_special_tokens=False)`);
        special-token names inside the text are matched as special tokens, as transformers'
        fast tokenizer does."""
        return self._tok.encode(text, add_special_tokens=False).ids

    def decode(self, ids: list[int]) -> str:
        return self._tok.decode(ids, skip_special_tokens=False)
