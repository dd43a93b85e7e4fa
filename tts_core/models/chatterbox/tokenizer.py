"""Text front ends: `punc_norm` (tts_turbo.py's; tts.py's with its own replacements), Turbo's
GPT-2 byte-level BPE the official loads with `AutoTokenizer` from `vocab.json` / `merges.txt` /
`added_tokens.json` (tags such as `[chuckle]` are single added tokens), here with the
`tokenizers` library directly, no BOS/EOS (spec chatterbox.md 4); and the English model's
EnTokenizer (tokenizer.json)."""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

from ..checkpoint import CheckpointError

EMPTY_TEXT = "You need to add some text for me to talk."
PUNCTUATION = (
    ("…", ", "),
    (":", ","),
    ("—", "-"),
    ("–", "-"),
    (" ,", ","),
    ("“", '"'),
    ("”", '"'),
    ("‘", "'"),
    ("’", "'"),
)
# tts.py's punc_norm: Turbo's replacements plus "...", " - " and ";", in its order
EN_PUNCTUATION = (("...", ", "), *PUNCTUATION[:2], (" - ", ", "), (";", ", "), *PUNCTUATION[2:])
SPACE, START_TOKEN, STOP_TOKEN = "[SPACE]", "[START]", "[STOP]"
SENTENCE_ENDS = (".", "!", "?", "-", ",")
DEFAULT_MAX_LENGTH = 1024  # GPT-2's model_max_length: `truncation=True` cuts there


def punc_norm(text: str, replacements: tuple[tuple[str, str], ...] = PUNCTUATION) -> str:
    """The official Turbo clean-up, step for step (the English model's: EN_PUNCTUATION)."""
    if len(text) == 0:
        return EMPTY_TEXT
    if text[0].islower():
        text = text[0].upper() + text[1:]
    text = " ".join(text.split())
    for old, new in replacements:
        text = text.replace(old, new)
    text = text.rstrip(" ")
    if not text.endswith(SENTENCE_ENDS):
        text += "."
    return text


class TurboTokenizer:
    def __init__(self, folder: Path) -> None:
        folder = Path(folder)
        bpe = models.BPE.from_file(str(folder / "vocab.json"), str(folder / "merges.txt"))
        self._tok = Tokenizer(bpe)
        self._tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        self._tok.decoder = decoders.ByteLevel()
        added_path = folder / "added_tokens.json"
        added = json.loads(added_path.read_text()) if added_path.is_file() else {}
        for content, index in sorted(added.items(), key=lambda item: item[1]):
            self._tok.add_tokens([AddedToken(content, normalized=True)])
            given = self._tok.token_to_id(content)
            if given != index:
                raise ValueError(
                    f"{added_path}: {content!r} gets id {given}, the file says {index}"
                )
        if self._tok.token_to_id("<|endoftext|>") is not None:
            self._tok.add_special_tokens(["<|endoftext|>"])
        config_path = folder / "tokenizer_config.json"
        config = json.loads(config_path.read_text()) if config_path.is_file() else {}
        self.max_length = int(config.get("model_max_length", DEFAULT_MAX_LENGTH))

    def encode(self, text: str) -> list[int]:
        """Ids of `punc_norm(text)`, cut at model_max_length (the official truncation=True)."""
        return self._tok.encode(punc_norm(text), add_special_tokens=False).ids[: self.max_length]


class EnglishTokenizer:
    """EnTokenizer: `tokenizers` from tokenizer.json, spaces -> [SPACE], no special ids added."""

    def __init__(self, path: Path) -> None:
        try:
            self._tok = Tokenizer.from_file(str(path))
        except Exception as error:  # the library raises its own exception type
            raise CheckpointError(f"{path}: not a tokenizers file ({error})") from error
        vocab = self._tok.get_vocab()
        missing = [t for t in (START_TOKEN, STOP_TOKEN) if t not in vocab]
        if missing:
            raise CheckpointError(f"{path}: the vocabulary lacks {missing}")

    def encode(self, text: str) -> list[int]:
        """Ids of punc_norm(text) (tts.py's), without the start/stop text ids."""
        return self._tok.encode(punc_norm(text, EN_PUNCTUATION).replace(" ", SPACE)).ids
