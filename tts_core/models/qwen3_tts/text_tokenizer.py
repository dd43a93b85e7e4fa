"""Qwen2 byte-level BPE built from vocab.json / merges.txt / tokenizer_config.json.

Rebuilds what transformers' slow->fast conversion of Qwen2Tokenizer produces (the checkpoint
ships no tokenizer.json): NFC normalization, a split regex, byte-level mapping without a
prefix space, no BOS, and the added tokens of `added_tokens_decoder` matched before BPE.

Which split regex: the official wrapper loads its processor with `fix_mistral_regex=True`.
transformers 4.57.3 then swaps the Qwen2 regex for its "fixed" one whenever the local
folder's config.json says transformers_version > 4.57.2 and < 5.0.0 (or says nothing) --
true for every released Qwen3-TTS checkpoint (4.57.3). The two differ on combining marks
(e.g. Thai), case changes inside words and "/" after punctuation. We follow the same rule.
"""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import AddedToken, Regex, Tokenizer, decoders, normalizers, pre_tokenizers
from tokenizers.models import BPE

from ..config_json import read_json_object

QWEN2_SPLIT_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
    r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
PATCHED_SPLIT_PATTERN = (
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|"
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|"
    r"\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
REQUIRED_FILES = ("vocab.json", "merges.txt", "tokenizer_config.json")


def _read_merges(path: Path) -> list[tuple[str, str]]:
    merges = []
    with open(path, encoding="utf-8") as handle:
        for index, line in enumerate(handle):
            line = line.strip()
            if not line or (index == 0 and line.startswith("#version:")):
                continue
            first, second = line.split()
            merges.append((first, second))
    return merges


def _added_tokens(config: dict) -> list[tuple[int, AddedToken]]:
    tokens = []
    added = config.get("added_tokens_decoder", {})
    for token_id, spec in sorted(added.items(), key=lambda item: int(item[0])):
        token = AddedToken(
            spec["content"],
            single_word=spec.get("single_word", False),
            lstrip=spec.get("lstrip", False),
            rstrip=spec.get("rstrip", False),
            normalized=spec.get("normalized", False),
            special=spec.get("special", False),
        )
        tokens.append((int(token_id), token))
    return tokens


def _version(text: str) -> tuple[int, ...]:
    parts = []
    for piece in text.split(".")[:3]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


def official_split_pattern(folder: Path) -> str:
    """The regex the official processor ends up with for this folder (see module doc). The
    config.json is read as every config module reads it (within a model load, once)."""
    config_path = folder / "config.json"
    if not config_path.is_file():
        return PATCHED_SPLIT_PATTERN
    config = read_json_object(config_path, ValueError)
    version = config.get("transformers_version")
    if version and not (4, 57, 2) < _version(version) < (5, 0, 0):
        return QWEN2_SPLIT_PATTERN
    return PATCHED_SPLIT_PATTERN


class TextTokenizer:
    """`encode(text) -> list[int]` with the same ids as the official Qwen2TokenizerFast."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self._tokenizer = tokenizer

    @classmethod
    def from_folder(cls, folder: str | Path, split_pattern: str | None = None) -> TextTokenizer:
        """`split_pattern` None picks the official one for this folder."""
        folder = Path(folder)
        for name in REQUIRED_FILES:
            if not (folder / name).is_file():
                raise FileNotFoundError(f"missing tokenizer file: {folder / name}")
        with open(folder / "vocab.json", encoding="utf-8") as handle:
            vocab = json.load(handle)
        with open(folder / "tokenizer_config.json", encoding="utf-8") as handle:
            config = json.load(handle)
        model = BPE(
            vocab=vocab,
            merges=_read_merges(folder / "merges.txt"),
            dropout=None,
            unk_token=None,
            continuing_subword_prefix="",
            end_of_word_suffix="",
            fuse_unk=False,
            byte_fallback=False,
        )
        tokenizer = Tokenizer(model)
        tokenizer.normalizer = normalizers.NFC()
        tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(
                    Regex(split_pattern or official_split_pattern(folder)),
                    behavior="isolated",
                    invert=False,
                ),
                pre_tokenizers.ByteLevel(
                    add_prefix_space=config.get("add_prefix_space", False), use_regex=False
                ),
            ]
        )
        tokenizer.decoder = decoders.ByteLevel()
        added = _added_tokens(config)
        tokenizer.add_tokens([token for _, token in added])
        for token_id, token in added:
            actual = tokenizer.token_to_id(token.content)
            if actual != token_id:
                raise ValueError(
                    f"{folder}: added token {token.content!r} got id {actual}, config says {token_id}"
                )
        return cls(tokenizer)

    def encode(self, text: str) -> list[int]:
        return self._tokenizer.encode(text, add_special_tokens=False).ids

    def decode(self, ids: list[int]) -> str:
        return self._tokenizer.decode(ids, skip_special_tokens=False)

    def token_to_id(self, token: str) -> int | None:
        return self._tokenizer.token_to_id(token)

    def pieces(self, text: str) -> list[tuple[int, list[int]]]:
        """`text` (NFC-normalized; added tokens not matched) as its pre-tokens (split regex
        pieces): (start character, BPE ids of the piece) each, the ids `encode` gives in context."""
        model = self._tokenizer.model
        return [
            (start, [token.id for token in model.tokenize(piece)])
            for piece, (start, _) in self._tokenizer.pre_tokenizer.pre_tokenize_str(text)
        ]
