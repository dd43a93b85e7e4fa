"""Checkpoint loading: local folders, dtypes, random-weight builds and clear errors."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

import tts_core
from tts_core.models.qwen3_tts.checkpoint import CheckpointError
from tts_core.models.qwen3_tts.config import ConfigError, parse_config
from tts_core.models.qwen3_tts.model import Qwen3TTSModel

from .conftest import fixture_path

TINY = fixture_path("qwen3-tiny-a")


def _copy_checkpoint(tmp_path: Path, skip: tuple[str, ...] = ()) -> Path:
    """Copy of tiny-a (small files copied, the rest symlinked) that a test may edit."""
    folder = tmp_path / "ckpt"
    for source in TINY.rglob("*"):
        relative = source.relative_to(TINY)
        if source.is_dir() or str(relative) in skip:
            continue
        target = folder / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.suffix == ".json" or source.name == "model.safetensors":
            shutil.copy(source, target)
        else:
            target.symlink_to(source)
    return folder


def _edit_config(folder: Path, edit) -> None:
    path = folder / "config.json"
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))


def test_load_local_folder_reads_values_from_json() -> None:
    model = tts_core.load_model(TINY)
    raw = json.loads((TINY / "config.json").read_text())["talker_config"]
    assert isinstance(model, Qwen3TTSModel)
    assert model.config.talker.stack.hidden_size == raw["hidden_size"]
    assert model.config.talker.codec_eos_token_id == 2150
    assert model.generation_defaults.max_new_tokens == 8192  # generation_config.json, not 2048
    assert model.generation_defaults.repetition_penalty == 1.05
    assert model.languages[0] == "auto" and len(model.languages) == 11


def test_bfloat16_load_and_generate() -> None:
    model = tts_core.load_model(TINY, dtype=torch.bfloat16)
    assert model.dtype == torch.bfloat16
    voice = tts_core.Voice(speaker_embedding=torch.zeros(model.config.talker.stack.hidden_size))
    result = model.generate("Hello.", voice, greedy=True, max_new_tokens=4)
    assert result.codes.shape == (3, 16) and result.audio.dtype.name == "float32"


def test_from_config_builds_random_weights_deterministically() -> None:
    first = Qwen3TTSModel.from_config(TINY, seed=1, with_codec=False)
    second = Qwen3TTSModel.from_config(TINY, seed=1, with_codec=False)
    a = first.talker.model.layers[0].mlp.up_proj.weight
    assert torch.equal(a, second.talker.model.layers[0].mlp.up_proj.weight)
    assert 0.01 < float(a.std()) < 0.03
    assert torch.equal(
        first.talker.model.norm.weight, torch.ones_like(first.talker.model.norm.weight)
    )


def test_missing_folder_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="not found"):
        tts_core.load_model(tmp_path / "nope")


def test_missing_file_is_named(tmp_path: Path) -> None:
    folder = _copy_checkpoint(tmp_path, skip=("merges.txt",))
    with pytest.raises(FileNotFoundError, match="merges.txt"):
        tts_core.load_model(folder)


def test_corrupt_safetensors_is_a_clear_error(tmp_path: Path) -> None:
    folder = _copy_checkpoint(tmp_path)
    path = folder / "model.safetensors"
    path.write_bytes(path.read_bytes()[:1000])
    with pytest.raises(CheckpointError, match="corrupt"):
        tts_core.load_model(folder)


def test_missing_tensor_fails_the_strict_key_check(tmp_path: Path) -> None:
    folder = _copy_checkpoint(tmp_path)
    path = folder / "model.safetensors"
    state = load_file(str(path))
    del state["talker.codec_head.weight"]
    save_file(state, str(path))
    with pytest.raises(CheckpointError, match="codec_head"):
        tts_core.load_model(folder)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d.update(tokenizer_type="qwen3_tts_tokenizer_25hz"), "tokenizer_type"),
        (lambda d: d.update(model_type="qwen2"), "model_type"),
        (lambda d: d["talker_config"].update(num_code_groups=8), "num_code_groups"),
        (lambda d: d["talker_config"].update(rope_scaling={"rope_type": "yarn"}), "rope"),
        (lambda d: d["talker_config"].pop("hidden_size"), "hidden_size"),
        (lambda d: d.update(tts_model_type="custom_voice"), "tts_model_type"),
    ],
)
def test_invalid_config_values_are_rejected(edit, message: str) -> None:
    data = json.loads((TINY / "config.json").read_text())
    edit(data)
    with pytest.raises(ConfigError, match=message):
        parse_config(data)


def test_invalid_config_is_reported_by_load_model(tmp_path: Path) -> None:
    folder = _copy_checkpoint(tmp_path)
    _edit_config(folder, lambda d: d.update(tokenizer_type="unknown"))
    with pytest.raises(ConfigError, match="tokenizer_type"):
        tts_core.load_model(folder)


def test_wrong_width_in_config_fails_on_shapes(tmp_path: Path) -> None:
    folder = _copy_checkpoint(tmp_path)
    _edit_config(folder, lambda d: d["talker_config"].update(intermediate_size=64))
    with pytest.raises(CheckpointError, match="shape"):
        tts_core.load_model(folder)


def test_public_api_is_lazy_and_small() -> None:
    assert set(tts_core.__all__) == {
        "AudioChunk",
        "GenerationResult",
        "Qwen3TTSModel",
        "Voice",
        "load_model",
    }
    with pytest.raises(AttributeError):
        tts_core.no_such_name  # noqa: B018
