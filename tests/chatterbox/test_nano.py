"""Chatterbox Nano (chatterbox HEAD only: `from_local(dir, device, nano=True)`): Turbo with a
GPT-2 small T3 in t3_nano_v1.safetensors, everything else Turbo's (spec chatterbox.md 11). The
released Nano shapes come from the official T3 at HEAD's "GPT2_small" config
(tools/oracle/chatterbox/dump_release_shapes.py); a tiny Nano is a tiny Turbo whose T3 file
carries Nano's name, so it must give Turbo's audio exactly."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from hub_fake import FakeHub

from tts_core.models.chatterbox.checkpoint import DOWNLOAD_PATTERNS, T3_UNUSED
from tts_core.models.chatterbox.config import (
    NANO_T3_FILE,
    RELEASED_T3,
    TURBO_T3_FILE,
    ChatterboxSizes,
)
from tts_core.models.chatterbox.model import ChatterboxTurboModel
from tts_core.models.chatterbox.t3 import T3Turbo
from tts_core.models.registry import CHATTERBOX_TURBO, detect_architecture, load_model

from .conftest import FIXTURES

TURBO = FIXTURES / "chatterbox-turbo-tiny-a"


def _nano_copy(target: Path) -> Path:
    shutil.copytree(TURBO, target)
    (target / TURBO_T3_FILE).rename(target / NANO_T3_FILE)
    return target


def test_released_nano_sizes_give_the_released_t3_keys_and_shapes() -> None:
    release = json.loads((FIXTURES / "chatterbox-turbo-release-shapes.json").read_text())
    with torch.device("meta"):
        t3 = T3Turbo(RELEASED_T3[NANO_T3_FILE])
    ours = {key: list(value.shape) for key, value in t3.state_dict().items()}
    expected = {k: v for k, v in release[NANO_T3_FILE].items() if k not in T3_UNUSED}
    assert ours == expected


def test_a_release_folder_takes_the_sizes_of_its_t3_file(tmp_path: Path) -> None:
    for name, layers in ((NANO_T3_FILE, 12), (TURBO_T3_FILE, 24)):
        folder = tmp_path / name
        folder.mkdir()
        (folder / name).touch()  # only the names are read here
        assert ChatterboxSizes.of_folder(folder).t3.n_layer == layers


def test_a_tiny_nano_speaks_as_the_same_weights_in_turbo(tmp_path: Path) -> None:
    nano_folder = _nano_copy(tmp_path / "nano")
    assert detect_architecture(nano_folder) == CHATTERBOX_TURBO
    nano = load_model(nano_folder)
    assert isinstance(nano, ChatterboxTurboModel)
    turbo = ChatterboxTurboModel.from_pretrained(TURBO)
    ours, theirs = (m.generate("Hi there.", None, seed=3, watermark=False) for m in (nano, turbo))
    assert np.array_equal(ours.audio, theirs.audio)


def test_nano_by_hub_id(tmp_path: Path, monkeypatch) -> None:
    hub = FakeHub(tmp_path, {"ResembleAI/chatterbox-nano": _nano_copy(tmp_path / "repo")})
    hub.install(monkeypatch)
    assert detect_architecture("ResembleAI/chatterbox-nano") == CHATTERBOX_TURBO
    assert isinstance(load_model("ResembleAI/chatterbox-nano"), ChatterboxTurboModel)
    assert hub.calls[-1] == ("ResembleAI/chatterbox-nano", list(DOWNLOAD_PATTERNS))


def test_a_folder_without_either_t3_file_names_both(tmp_path: Path) -> None:
    folder = _nano_copy(tmp_path / "none")
    (folder / NANO_T3_FILE).unlink()
    with pytest.raises(FileNotFoundError, match=f"{TURBO_T3_FILE} or {NANO_T3_FILE}"):
        ChatterboxTurboModel.from_pretrained(folder)
