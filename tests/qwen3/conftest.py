"""Shared fixtures for the Qwen3-TTS parity tests: tiny checkpoints and official goldens.

Stable names (other tests depend on them):

* `tiny_checkpoint`  -> Path of a tiny checkpoint folder (released layout); parametrized over
  TINY_CHECKPOINTS, so a test using it runs once per checkpoint.
* `goldens`          -> Goldens for that checkpoint: a dict of torch tensors (keys in
  tests/fixtures/README.md) with `.cases` ({"icl": {...}, "xvec": {...}} from cases.json),
  `.meta` (the whole cases.json), `.folder` and `.name`.
* `ref_clip`         -> (audio float32 (S,), 24000): tests/fixtures/ref_clip_24k.wav.
* `ref_clip_16k_stereo` -> (audio float32 (S, 2), 16000): the same voice, 16 kHz stereo int16.
* `tokenizer_cases`  -> list of {"text": str, "ids": list[int]} from the official tokenizer.

Every test under tests/qwen3 runs with `torch.set_num_threads(1)` (autouse session fixture).

The plain functions `load_goldens(name)`, `load_ref_clip()`, `fixture_path(name)` do the same
outside pytest; `shared_model(folder)` is one float32 CPU model per folder for tests that only
read it, and `golden_voice(goldens, mode)` the official voice ("icl" or "xvec") of the goldens. Nothing here imports qwen_tts or transformers.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch
from safetensors.torch import load_file

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
TINY_CHECKPOINTS = ("qwen3-tiny-a", "qwen3-tiny-b")


class Goldens(dict):
    """Golden tensors of one tiny checkpoint (dict) plus its cases.json metadata."""

    def __init__(self, name: str, tensors: dict[str, torch.Tensor], meta: dict) -> None:
        super().__init__(tensors)
        self.name = name
        self.folder = fixture_path(name)
        self.meta = meta
        self.cases = {case["key"]: case for case in meta["cases"]}


def fixture_path(name: str) -> Path:
    """tests/fixtures/<name> (a checkpoint folder or any other fixture file)."""
    return FIXTURES / name


@cache
def _load_goldens_cached(name: str) -> Goldens:
    folder = FIXTURES / f"{name}.golden"
    meta = json.loads((folder / "cases.json").read_text(encoding="utf-8"))
    return Goldens(name, load_file(str(folder / "goldens.safetensors")), meta)


def load_goldens(name: str) -> Goldens:
    """Goldens of checkpoint `name`; tensors are cloned so callers may modify them."""
    cached = _load_goldens_cached(name)
    return Goldens(name, {k: v.clone() for k, v in cached.items()}, cached.meta)


@cache
def shared_model(folder: Path):
    """One model per checkpoint folder for the whole session; tests must not change it."""
    import tts_core

    return tts_core.load_model(folder, device="cpu", dtype=torch.float32)


def golden_voice(goldens: Goldens, mode: str):
    """The official voice (speaker embedding, and for ICL reference codes + transcript)."""
    from tts_core.models.qwen3_tts.model import Voice

    if mode == "xvec":
        return Voice(speaker_embedding=goldens["speaker_embedding"])
    return Voice(
        speaker_embedding=goldens["speaker_embedding"],
        ref_codes=goldens["ref_codes"],
        ref_text=goldens.cases["icl"]["ref_text"],
    )


def load_ref_clip() -> tuple[np.ndarray, int]:
    audio, sr = sf.read(FIXTURES / "ref_clip_24k.wav", dtype="float32")
    return audio, sr


@pytest.fixture(scope="session", autouse=True)
def _one_torch_thread():
    # The tiny models are dominated by per-op overhead; with other processes on this 2-core
    # box, 2 intra-op threads spin-wait on each other (a 39-frame generate: 30 s vs 2 s).
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture(params=TINY_CHECKPOINTS, scope="session")
def tiny_checkpoint(request: pytest.FixtureRequest) -> Path:
    return fixture_path(request.param)


@pytest.fixture
def goldens(tiny_checkpoint: Path) -> Goldens:
    return load_goldens(tiny_checkpoint.name)


@pytest.fixture(scope="session")
def ref_clip() -> tuple[np.ndarray, int]:
    return load_ref_clip()


@pytest.fixture(scope="session")
def ref_clip_16k_stereo() -> tuple[np.ndarray, int]:
    audio, sr = sf.read(FIXTURES / "ref_clip_16k_stereo.wav", dtype="float32")
    return audio, sr


@pytest.fixture(scope="session")
def tokenizer_cases() -> list[dict]:
    doc = json.loads((FIXTURES / "tokenizer_cases.json").read_text(encoding="utf-8"))
    return doc["cases"]
