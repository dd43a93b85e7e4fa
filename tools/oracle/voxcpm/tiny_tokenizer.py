"""A small stand-in for the VoxCPM2 `tokenizer.json` / `tokenizer_config.json` (oracle venv).

The released files could not be obtained (checkpoints/VoxCPM2/SOURCES.md); this builds one
with the pipeline that is known (spec voxcpm2.md section 4, SOURCES.md):
* normalizer Sequence(Prepend("▁"), Replace(" ", "▁")), no pre-tokenizer;
* BPE with byte fallback (`<0x00>`..`<0xFF>` at ids 3..258), `<unk>`/`<s>`/`</s>` at 0/1/2;
* the 8 MiniCPM specials (`<|im_end|>` ..) at the top ids, total = `vocab_size` of the config;
* merges learned on a tiny English + CJK corpus, so there are multi-character pure-CJK tokens
  (with and without "▁") for the official CJK split wrapper;
* tokenizer_config.json with the known release fields (class, auto_map, legacy, add_bos).
The vocabulary is tiny and not the release's: it tests the pipeline, not real ids.
"""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import Tokenizer, decoders, normalizers
from tokenizers.models import BPE
from tokenizers.trainers import BpeTrainer

MARK = "\u2581"
BASE = ["<unk>", "<s>", "</s>"]
SPECIALS = [
    "<|im_end|>",
    "<|im_start|>",
    "<|tool_call|>",
    "<|execute_start|>",
    "<|execute_end|>",
    "<|fim_prefix|>",
    "<|fim_middle|>",
    "<|fim_suffix|>",
]
CORPUS = [
    "Hello world, this is a tiny voice test.",
    "The quick brown fox jumps over the lazy dog.",
    "Speech synthesis with a reference voice and its transcript.",
    "你好世界，我们在测试语音合成。你好，世界！",
    "今天天气很好，我们去公园。",
    "Numbers like 12 and 345 are read aloud.",
] * 20
ALPHABET = sorted(set("".join(CORPUS).replace(" ", MARK) + MARK))


def _normalizer() -> normalizers.Normalizer:
    return normalizers.Sequence([normalizers.Prepend(MARK), normalizers.Replace(" ", MARK)])


def build_tokenizer_json(vocab_size: int) -> dict:
    """tokenizer.json content with exactly `vocab_size` ids."""
    learned = vocab_size - len(BASE) - 256 - len(SPECIALS)
    if learned < len(ALPHABET):
        raise ValueError(f"vocab_size {vocab_size} too small for the alphabet")
    trainer_tok = Tokenizer(BPE(unk_token="<unk>"))
    trainer_tok.normalizer = _normalizer()
    trainer = BpeTrainer(vocab_size=learned, initial_alphabet=ALPHABET, show_progress=False)
    trainer_tok.train_from_iterator(CORPUS, trainer)
    trained = json.loads(trainer_tok.to_str())["model"]
    order = sorted(trained["vocab"], key=trained["vocab"].get)
    vocab = {t: i for i, t in enumerate(BASE)}
    for byte in range(256):
        vocab[f"<0x{byte:02X}>"] = len(vocab)
    for token in order:
        vocab.setdefault(token, len(vocab))
    while len(vocab) < vocab_size - len(SPECIALS):  # byte tokens may have duplicated chars
        vocab[f"<extra_{len(vocab)}>"] = len(vocab)
    for token in SPECIALS:
        vocab[token] = len(vocab)
    assert len(vocab) == vocab_size, (len(vocab), vocab_size)
    tok = Tokenizer(
        BPE(
            vocab=vocab,
            merges=[
                tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in trained["merges"]
            ],
            unk_token="<unk>",
            fuse_unk=True,
            byte_fallback=True,
        )
    )
    tok.normalizer = _normalizer()
    tok.decoder = decoders.Sequence(
        [
            decoders.Replace(MARK, " "),
            decoders.ByteFallback(),
            decoders.Fuse(),
            decoders.Strip(" ", 1, 0),
        ]
    )
    tok.add_special_tokens(BASE + SPECIALS)
    return json.loads(tok.to_str())


def tokenizer_config() -> dict:
    added = {
        str(i): {
            "content": t,
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": True,
        }
        for i, t in enumerate(BASE)
    }
    return {
        "add_bos_token": True,
        "add_eos_token": False,
        "added_tokens_decoder": added,
        "additional_special_tokens": SPECIALS,
        "auto_map": {"AutoTokenizer": ["tokenization_voxcpm2.VoxCPM2Tokenizer", None]},
        "bos_token": "<s>",
        "clean_up_tokenization_spaces": False,
        "eos_token": "</s>",
        "legacy": True,
        "model_max_length": 1000000000000000019884624838656,
        "pad_token": None,
        "sp_model_kwargs": {},
        "spaces_between_special_tokens": False,
        "tokenizer_class": "VoxCPM2Tokenizer",
        "unk_token": "<unk>",
        "use_default_system_prompt": False,
    }


def write(folder: Path, vocab_size: int) -> None:
    data = build_tokenizer_json(vocab_size)
    text = json.dumps(data, ensure_ascii=False, indent=2) + "\n"
    (folder / "tokenizer.json").write_text(text, encoding="utf-8")
    config = json.dumps(tokenizer_config(), ensure_ascii=False, indent=2) + "\n"
    (folder / "tokenizer_config.json").write_text(config, encoding="utf-8")
