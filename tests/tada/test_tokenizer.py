"""TadaTokenizer (the `tokenizers` library on the checkpoint's tokenizer.json) gives the official
fast tokenizer's ids (goldens `tok_*`), and finds the special tokens TADA uses by name. The real
Llama 3 file is checked against tiktoken by tools/oracle/tada/convert_tokenizer.py (it cannot
be shipped: Llama 3.2 licence)."""

from __future__ import annotations

import numpy as np
import pytest

from tts_core.models.tada.tokenizer import TadaTokenizer


def test_ids_equal_the_official(tiny_folder, goldens):
    tokenizer = TadaTokenizer.from_folder(tiny_folder / "model")
    ends = np.cumsum(goldens["tok_lengths"])
    starts = ends - goldens["tok_lengths"]
    for text, start, end in zip(goldens["tok_texts"], starts, ends, strict=True):
        assert tokenizer.encode(str(text)) == goldens["tok_ids"][start:end].tolist(), text


def test_special_tokens_in_llama3_order(tiny_folder):
    tokenizer = TadaTokenizer.from_folder(tiny_folder / "model")
    base = tokenizer.bos_id  # Llama 3: 128000, the tiny vocabulary: 384
    assert (
        tokenizer.eos_id,
        tokenizer.pad_id,
        tokenizer.start_header_id,
        tokenizer.end_header_id,
        tokenizer.eot_id,
    ) == tuple(base + offset for offset in (1, 4, 6, 7, 9))


def test_missing_file_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="tokenizer.json"):
        TadaTokenizer.from_folder(tmp_path)
