"""Our TextTokenizer gives the official Qwen2 tokenizer's ids on every recorded string.

tests/fixtures/tokenizer_cases.json holds ~300 strings (punctuation, digits, CJK, Japanese,
Korean, Arabic, emoji, accents, whitespace runs, special tokens written as text, the
assistant/ref prompt wrappers) with the ids of the tokenizer `Qwen3TTSModel` uses
(tools/oracle/make_tokenizer_cases.py). The tokenizer files are loaded from each tiny
checkpoint folder, which holds byte-identical copies of the released files.
"""

from __future__ import annotations

from pathlib import Path

from tts_core.models.qwen3_tts.text_tokenizer import TextTokenizer


def test_encode_matches_official_ids(tiny_checkpoint: Path, tokenizer_cases: list[dict]) -> None:
    tok = TextTokenizer.from_folder(tiny_checkpoint)
    mismatches = []
    for case in tokenizer_cases:
        ours = tok.encode(case["text"])
        if ours != case["ids"]:
            mismatches.append(f"{case['text']!r}: ours {ours} vs official {case['ids']}")
    assert not mismatches, f"{len(mismatches)} of {len(tokenizer_cases)} differ:\n" + "\n".join(
        mismatches[:10]
    )


def test_cases_cover_the_prompt_wrapper(tokenizer_cases: list[dict]) -> None:
    # Every wrapped text ends with the 5-token tail; the role prefix [<|im_start|>, assistant,
    # "\n"] survives unless the text itself starts with "\n" (it merges into "\n\n", spec 3.1).
    wrapped = [
        c
        for c in tokenizer_cases
        if c["text"].startswith("<|im_start|>assistant\n")
        and c["text"].endswith("<|im_end|>\n<|im_start|>assistant\n")
    ]
    assert len(wrapped) >= 50
    tail = [151645, 198, 151644, 77091, 198]
    assert all(c["ids"][-5:] == tail for c in wrapped)
    prefix = "<|im_start|>assistant\n"
    for c in wrapped:
        starts_with_newline = c["text"][len(prefix) :].startswith("\n")
        assert (c["ids"][:3] == [151644, 77091, 198]) != starts_with_newline, c["text"]
