"""Official Qwen2 tokenizer ids for a few hundred varied strings (run in .oracle-venv).

    PYTHONPATH=tools/oracle/stubs:tools/oracle .oracle-venv/bin/python \
        tools/oracle/make_tokenizer_cases.py [--out tests/fixtures/tokenizer_cases.json]

The tokenizer is the one `Qwen3TTSModel` uses: AutoProcessor (Qwen3TTSProcessor ->
Qwen2TokenizerFast from vocab.json + merges.txt + tokenizer_config.json) loaded from the
released 0.6B-Base folder with `fix_mistral_regex=True`, called as the wrapper calls it.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

import torch
from qwen_tts.core.models import Qwen3TTSConfig, Qwen3TTSProcessor
from tiny_configs import REFERENCE
from transformers import AutoConfig, AutoProcessor

REPO = Path(__file__).resolve().parents[2]
SEED = 7

BASE = [
    "",
    " ",
    "  ",
    "\n",
    "\n\n",
    "\t",
    " \t \n ",
    "a",
    "A",
    "Hello",
    "Hello world",
    "Hello, world!",
    "  leading spaces",
    "trailing spaces   ",
    "multiple    spaces   inside",
    "tabs\tbetween\twords",
    "line one\nline two\n\nline four",
    "\r\nwindows newline\r\n",
    "It's a dog's life; isn't it?",
    "Don't, won't, can't, shouldn't've.",
    "I'M LOUD. We'RE here.",
    "Numbers: 0 1 12 123 1234 12345 3.14159 -42 +7 1,000,000 1e-9 0x1F",
    "Dates 2024-01-31, times 12:34:56, phone +1 (555) 010-9999.",
    "Price: $19.99 / €5 / £3 / ¥100",
    "email@example.com https://example.org/path?q=1&r=2#frag",
    "C:\\Windows\\path and /usr/bin/env",
    "Punctuation!!! ??? ... ;;; ::: --- ___ *** ### @@@ %%% ^^^ &&&",
    "«quotes» “curly” ‘single’ „low“",
    "Em—dash and en–dash … ellipsis",
    "(parens) [brackets] {braces} <angles>",
    "你好，世界！",
    "今天天气很好，我们去公园散步吧。",
    "我有3个苹果和2个橙子。",
    "中文English混合mixed文本",
    "こんにちは、世界。",
    "カタカナとひらがなと漢字",
    "東京は日本の首都です。",
    "ｆｕｌｌｗｉｄｔｈ　ｓｐａｃｅ",
    "안녕하세요, 세계!",
    "한국어 문장입니다. 123",
    "Привет, мир!",
    "Съешь же ещё этих мягких булок.",
    "مرحبا بالعالم",
    "السلام عليكم ورحمة الله",
    "שלום עולם",
    "नमस्ते दुनिया",
    "สวัสดีชาวโลก",
    "Γειά σου Κόσμε",
    "Ünïcödé àccénts: café naïve résumé façade São Paulo Zürich",
    "cafe\u0301 (decomposed accent)",
    "ﬁ ligature and Å angstrom",
    "Emoji: 😀 😂 👍🏽 ❤️ 🇨🇳 👨‍👩‍👧‍👦",
    "🙂🙂🙂",
    "zero\u200bwidth space",
    "non\u00a0breaking space",
    "soft\u00adhyphen",
    "<|im_start|>",
    "<|im_end|>",
    "<|endoftext|>",
    "<tts_pad><tts_text_bos><tts_text_eod>",
    "<|im_start|>assistant\n",
    "text with <|im_start|> inside",
    "<|audio_start|><|audio_pad|><|audio_end|>",
    "<|im_start |> not special",
    "<tts_pad",
    "assistant",
    "\nassistant\n",
    "user\nsystem",
    "A" * 50,
    "ab" * 40,
    "1" * 30,
    "!" * 20,
    "   " * 10,
    "\n" * 7,
    "The quick brown fox jumps over the lazy dog.",
    "Sphinx of black quartz, judge my vow.",
    "Mr. Smith paid 3.5% interest on $2,500 in Q3 2023 (approx.).",
    "Hey!How are you?I'm fine.Thanks!",
    "semi;colon,comma.period",
    "x^2 + y^2 = z^2; a<b>c",
]

FRAGMENTS = [
    "hello",
    "world",
    "voice",
    "clone",
    " ",
    "  ",
    "\n",
    "\t",
    ",",
    ".",
    "!",
    "?",
    "'s",
    "'ll",
    "123",
    "4.5",
    "你好",
    "世界",
    "日本語",
    "한국",
    "😀",
    "👍🏽",
    "é",
    "ß",
    "Ω",
    "—",
    "…",
    "<|im_start|>",
    "<|im_end|>",
    "<tts_pad>",
    "mañana",
    "naïve",
    "Zürich",
    "¿Qué?",
    "¡Hola!",
]


def _random_strings(count: int) -> list[str]:
    rng = random.Random(SEED)
    return ["".join(rng.choice(FRAGMENTS) for _ in range(rng.randint(1, 12))) for _ in range(count)]


def all_strings() -> list[str]:
    plain = BASE + _random_strings(120)
    wrapped = [f"<|im_start|>assistant\n{t}<|im_end|>\n<|im_start|>assistant\n" for t in BASE]
    ref = [f"<|im_start|>assistant\n{t}<|im_end|>\n" for t in BASE[::3]]
    return plain + wrapped + ref


def load_processor():
    AutoConfig.register("qwen3_tts", Qwen3TTSConfig)
    AutoProcessor.register(Qwen3TTSConfig, Qwen3TTSProcessor)
    return AutoProcessor.from_pretrained(str(REFERENCE), fix_mistral_regex=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--out", type=Path, default=REPO / "tests" / "fixtures" / "tokenizer_cases.json"
    )
    args = parser.parse_args()
    torch.set_num_threads(1)  # fixed reduction order: rebuilds are byte-identical
    processor = load_processor()
    cases = []
    for text in all_strings():
        ids = processor(text=text, return_tensors="pt", padding=True)["input_ids"][0].tolist()
        cases.append({"text": text, "ids": ids})
    doc = {
        "tokenizer": "Qwen2TokenizerFast via Qwen3TTSProcessor (fix_mistral_regex=True)",
        "source": "Qwen3-TTS-12Hz-0.6B-Base vocab.json/merges.txt/tokenizer_config.json",
        "cases": cases,
    }
    args.out.write_text(json.dumps(doc, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {len(cases)} cases to {args.out}")


if __name__ == "__main__":
    main()
