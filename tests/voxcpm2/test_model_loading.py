"""Strict loading of model.safetensors (the official loader's strict=False is not copied) and
of the tokenizer; the sample rate and sizes come from the folder's files."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from safetensors.torch import load_file, save_file

from tts_core.models.voxcpm import CheckpointError
from tts_core.models.voxcpm.model import VoxCPMModel

from .conftest import shared_model


def _copy(tmp_path: Path, folder: Path) -> Path:
    out = tmp_path / folder.name
    shutil.copytree(folder, out)
    return out


def _edit_weights(folder: Path, edit) -> None:
    state = load_file(str(folder / "model.safetensors"))
    edit(state)
    save_file(state, str(folder / "model.safetensors"))


def test_loads_every_tensor_and_reads_rates_from_config(model_folder: Path) -> None:
    model = shared_model(model_folder)
    cfg = json.loads((model_folder / "config.json").read_text(encoding="utf-8"))
    assert model.sample_rate == cfg["audio_vae_config"]["out_sample_rate"]
    assert set(model.net.state_dict()) == set(load_file(str(model_folder / "model.safetensors")))


def test_missing_key_is_an_error(tmp_path: Path, model_folder: Path) -> None:
    folder = _copy(tmp_path, model_folder)
    _edit_weights(folder, lambda s: s.pop("feat_decoder.estimator.time_mlp.linear_1.bias"))
    with pytest.raises(CheckpointError, match=r"1 missing key.*time_mlp\.linear_1\.bias"):
        VoxCPMModel.from_folder(folder)


def test_unexpected_key_is_an_error(tmp_path: Path, model_folder: Path) -> None:
    folder = _copy(tmp_path, model_folder)

    def rename(state: dict) -> None:  # a misnamed tensor: missing under one name, unexpected
        state["base_lm.layers.0.self_attn.qkv_proj.weight"] = state.pop(
            "base_lm.layers.0.self_attn.q_proj.weight"
        )

    _edit_weights(folder, rename)
    with pytest.raises(CheckpointError, match=r"missing key.*q_proj.*unexpected key.*qkv_proj"):
        VoxCPMModel.from_folder(folder)


def test_shape_mismatch_is_an_error(tmp_path: Path, model_folder: Path) -> None:
    folder = _copy(tmp_path, model_folder)
    _edit_weights(folder, lambda s: s.update({"stop_head.weight": s["stop_head.weight"][:1]}))
    with pytest.raises(CheckpointError, match=r"shape mismatch.*stop_head\.weight"):
        VoxCPMModel.from_folder(folder)


def test_missing_weights_or_tokenizer_are_errors(tmp_path: Path, model_folder: Path) -> None:
    folder = _copy(tmp_path, model_folder)
    (folder / "model.safetensors").unlink()
    with pytest.raises(CheckpointError, match="no weights"):
        VoxCPMModel.from_folder(folder)
    folder = _copy(tmp_path / "b", model_folder)
    (folder / "tokenizer.json").unlink()
    with pytest.raises(FileNotFoundError, match="tokenizer.json"):
        VoxCPMModel.from_folder(folder)
