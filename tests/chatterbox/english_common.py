"""Shared pieces of the English-model tests (tests/chatterbox/test_english_*.py): the two tiny
English checkpoints (tests/fixtures/chatterbox-english-tiny-{a,b}, built by the official
chatterbox-tts 0.1.7 classes, tools/oracle/chatterbox/build_tiny.py `build_english`), their
goldens (`<name>.golden.npz`, tools/oracle/chatterbox/make_goldens_english.py says what each key
holds) and one shared float32 CPU model per folder.

Float error model: the Turbo tests' (tests/chatterbox/conftest.py `check_fp32`): the oracle
records per float golden E = max |golden_fp32 - official_fp64| (the official modules rerun in
float64 on the same inputs and float32-drawn noise), floored at 4 float32 roundings of the
golden's largest value; our float32 result and the golden each lie within FP32_SPREAD E of the
float64 value, so |ours - golden| <= (1 + FP32_SPREAD) E = 5 E. Integers (tokens, ids) and
lengths must be equal.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import pytest

from tts_core.models.chatterbox.english import ChatterboxEnglishModel

from .conftest import FIXTURES, load_goldens

ENGLISH = ("chatterbox-english-tiny-a", "chatterbox-english-tiny-b")
# make_goldens_english.py's cases
TEXTS = ["Hello there, this is a tiny test. Okay", "how are you today... fine; thanks - bye"]
TOKENIZER_TEXTS = [
    "  the quick   brown fox\tjumps…  over: the dog — again – and again ,  ok",
    "“Quoted” and ‘single’ quotes[laugh][sigh] [clear throat]done",
    "Numbers 12, 345 and 6789! Really? Yes-",
    "Ünïcödé façade, naïve café; 日本語 and emoji 🙂",
    "",
    "[chuckle]",
]


@cache
def english_model(folder: Path) -> ChatterboxEnglishModel:
    return ChatterboxEnglishModel.from_pretrained(folder)


# each test runs on both checkpoints: `@each_checkpoint def test_x(name)`, then case(name)
each_checkpoint = pytest.mark.parametrize("name", ENGLISH)


def case(name: str) -> tuple[Path, dict]:
    """(checkpoint folder, its goldens)."""
    return FIXTURES / name, load_goldens(name)


def seeds(goldens) -> dict[str, int]:
    names = ("t3", "flow", "hift", "gen", "knobs", "clone")
    return dict(zip(names, (int(s) for s in goldens["meta_seeds"]), strict=True))


def knobs(goldens) -> dict[str, float]:
    names = [str(n) for n in goldens["meta_knob_names"]]
    return dict(zip(names, (float(v) for v in goldens["meta_knobs"]), strict=True))
