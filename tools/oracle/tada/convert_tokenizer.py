"""Llama 3's tokenizer as a `tokenizers` file, checked id for id against tiktoken.

The gated meta-llama repos are out of reach; PyPI's llama-models 0.3.0 wheel ships the tiktoken
BPE file `llama_models/llama3/tokenizer.model` (128,000 ranks) and the reference `Tokenizer`
(tiktoken with Llama 3's split pattern and 256 special tokens from id 128000). This converts the
ranks with transformers' `TikTokenConverter` (the converter Hugging Face used for the Llama 3
repos: byte-level BPE, merges recovered from the ranks, `ignore_merges` as tiktoken), names the
special tokens as the Llama 3.2 Hub repos do (llama-models 0.3.0 calls 128005 `<|step_id|>` and
128011 `<|image|>`, the Hub files `<|reserved_special_token_2|>` / `_3|>`; TADA uses neither),
adds BOS in front as the Hub's post-processor does, and compares the ids of both and of our
`tts_core.models.tada.tokenizer` with tiktoken's on varied text.

The result is a derivative of Llama Materials (Llama 3.2 Community License): it is written to a
folder outside the repository (default /tmp/llama3-tokenizer) and never committed. Usage (oracle
venv): python tools/oracle/tada/convert_tokenizer.py [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

CASES = [
    "Hello, world!",
    ".Hello",
    "Please call Stella. Ask her to bring these things with her from the store.",
    "The examination and testimony of the experts enabled the commission to conclude.",
    "It costs $1,234.56 (about 1234567 cents) on 2024-09-25 at 10:30pm.",
    "  leading spaces,\ttabs\nand\r\nnewlines\n\n\nend  ",
    "don't I'LL we'd they're it's you've I'm",
    "naïve café façade — “quotes” … ‘single’",
    "Грамматика русского языка. Привет, мир!",
    "日本語のテキストと、中文文本。",
    "مرحبا بالعالم",
    "emoji 😀🎉👍🏽 and symbols ©®™ ±×÷",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa bbbbbbbbbbbbbbbb",
    "x" * 3 + "1" * 7 + "..." + "!?" * 5,
    "Hola. ¿Cómo estás? Das ist schön. Ça va? Olá, tudo bem?",
    # special-token names in the text are special tokens for transformers' fast tokenizer (TADA's
    # prompt prefix relies on it); tiktoken is asked for the same with allowed_special="all"
    "<|start_header_id|>assistant<|end_header_id|>Hi.<|eot_id|>",
]

# Llama 3.2's Hub names for the 256 special tokens (ids 128000 + i).
NAMED = {
    0: "<|begin_of_text|>",
    1: "<|end_of_text|>",
    4: "<|finetune_right_pad_id|>",
    6: "<|start_header_id|>",
    7: "<|end_header_id|>",
    8: "<|eom_id|>",
    9: "<|eot_id|>",
    10: "<|python_tag|>",
}


def special_tokens() -> list[str]:
    names, reserved = [], 0
    for i in range(256):
        if i in NAMED:
            names.append(NAMED[i])
        else:
            names.append(f"<|reserved_special_token_{reserved}|>")
            reserved += 1
    return names


def convert(model_path: Path):
    from llama_models.llama3.tokenizer import Tokenizer as Reference
    from tokenizers import processors
    from transformers.convert_slow_tokenizer import TikTokenConverter

    converter = TikTokenConverter(
        vocab_file=str(model_path),
        pattern=Reference.pat_str,
        additional_special_tokens=special_tokens(),
    )
    tokenizer = converter.converted()
    bos = "<|begin_of_text|>"
    tokenizer.post_processor = processors.Sequence(
        [
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(
                single=f"{bos}:0 $A:0",
                pair=f"{bos}:0 $A:0 {bos}:1 $B:1",
                special_tokens=[(bos, 128000)],
            ),
        ]
    )
    return tokenizer


def check(tokenizer, folder: Path) -> int:
    """Ids of the converted file, of our loader and of tiktoken on CASES: number of mismatches."""
    from llama_models.llama3.tokenizer import Tokenizer as Reference

    reference = Reference.get_instance()
    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
    from tts_core.models.tada.tokenizer import TadaTokenizer

    ours = TadaTokenizer.from_folder(folder)
    bad = 0
    for text in CASES:
        want = reference.encode(text, bos=False, eos=False, allowed_special="all")
        got = tokenizer.encode(text, add_special_tokens=False).ids
        mine = ours.encode(text)
        with_bos = tokenizer.encode(text).ids
        ok = got == want and mine == want and with_bos == [128000, *want]
        ok = (
            ok
            and tokenizer.decode(want, skip_special_tokens=False) == reference.decode(want) == text
        )
        bad += not ok
        print(("ok  " if ok else "BAD ") + f"{len(want):3d} ids  {text[:50]!r}")
    seam = reference.encode(".Hello", bos=False, eos=False)
    split = reference.encode(".", bos=False, eos=False) + reference.encode(
        "Hello", bos=False, eos=False
    )
    print(f"'.Hello' jointly {seam} vs separately {split} (TADA's seam: joint encoding differs)")
    checks = {
        "<|begin_of_text|>": 128000,
        "<|end_of_text|>": 128001,
        "<|eot_id|>": 128009,
        "<|start_header_id|>": 128006,
        "<|end_header_id|>": 128007,
        "<|finetune_right_pad_id|>": 128004,
    }
    for name, want_id in checks.items():
        if tokenizer.token_to_id(name) != want_id or ours.token_id(name) != want_id:
            print(f"BAD special {name}: {tokenizer.token_to_id(name)} != {want_id}")
            bad += 1
    print(f"vocabulary {tokenizer.get_vocab_size()} (128000 ranks + 256 special)")
    return bad


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("/tmp/llama3-tokenizer"))
    args = parser.parse_args()
    import llama_models.llama3 as llama3

    model_path = Path(llama3.__file__).parent / "tokenizer.model"
    tokenizer = convert(model_path)
    args.out.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(args.out / "tokenizer.json"))
    config = {
        "bos_token": "<|begin_of_text|>",
        "eos_token": "<|end_of_text|>",
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": 131072,
    }
    (args.out / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
    bad = check(tokenizer, args.out)
    print(f"wrote {args.out}/tokenizer.json; {bad} mismatches")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
