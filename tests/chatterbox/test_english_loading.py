"""Loading an English-model folder: dispatch by its files (t3_cfg.safetensors; no config.json),
strict keys and shapes with errors naming the tensor or file, the unused tensors dropped, the
S3 tokenizer's buffers (absent from the English s3gen file, which the official loads
non-strict) rebuilt bit-equal to the ones the official writes, sizes file errors."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from tts_core.models.chatterbox.config import SizesError
from tts_core.models.chatterbox.english import ChatterboxEnglishModel, EnglishSizes
from tts_core.models.chatterbox.model import ChatterboxTurboModel
from tts_core.models.checkpoint import CheckpointError
from tts_core.models.registry import (
    CHATTERBOX_ENGLISH,
    CHATTERBOX_TURBO,
    detect_architecture,
    load_model,
)

from .conftest import FIXTURES

TINY = FIXTURES / "chatterbox-english-tiny-a"
TURBO = FIXTURES / "chatterbox-turbo-tiny-a"


@pytest.fixture
def copy(tmp_path):
    folder = tmp_path / "ckpt"
    shutil.copytree(TINY, folder)
    return folder


def test_registry_dispatch_by_files():
    assert detect_architecture(TINY) == CHATTERBOX_ENGLISH
    assert detect_architecture(TURBO) == CHATTERBOX_TURBO
    assert isinstance(load_model(TINY), ChatterboxEnglishModel)
    assert isinstance(load_model(TURBO), ChatterboxTurboModel)


def test_unused_tensors_are_not_kept():
    model = ChatterboxEnglishModel.from_pretrained(TINY)
    keys = set(model.t3.state_dict())
    assert "tfmr.embed_tokens.weight" not in keys and "text_head.weight" not in keys
    assert "speech_head.bias" not in keys  # Llama's head has no bias
    assert model.flow.decoder.estimator.time_embed_mixer is None  # regular CFM, no mixer


def test_s3_tokenizer_buffers_rebuilt_as_the_official_writes_them():
    """The English s3gen file has no `tokenizer._mel_filters` / `window`: ours are rebuilt and
    equal, bit for bit, the ones the official wrote into the Turbo file (the same librosa
    filters and Hann window; the Turbo loader reads them from there)."""
    with safe_open(str(TINY / "s3gen.safetensors"), "pt") as file:
        assert "tokenizer._mel_filters" not in file.keys()
    with safe_open(str(TURBO / "s3gen_meanflow.safetensors"), "pt") as file:
        filters, window = (
            file.get_tensor("tokenizer._mel_filters"),
            file.get_tensor("tokenizer.window"),
        )
    tokenizer = ChatterboxEnglishModel.from_pretrained(TINY)._front_end()[1]
    assert torch.equal(tokenizer._mel_filters, filters) and torch.equal(tokenizer.window, window)


def test_s3gen_file_with_the_buffers_loads_them(copy):
    path = copy / "s3gen.safetensors"
    state = load_file(path)
    with safe_open(str(TURBO / "s3gen_meanflow.safetensors"), "pt") as file:
        for name in ("_mel_filters", "window"):
            state[f"tokenizer.{name}"] = file.get_tensor(f"tokenizer.{name}") * 2
    save_file(state, path)
    tokenizer = ChatterboxEnglishModel.from_pretrained(copy)._front_end()[1]
    assert torch.equal(tokenizer.window, state["tokenizer.window"])  # the file's, not rebuilt


@pytest.mark.parametrize(
    "name", ["t3_cfg.safetensors", "s3gen.safetensors", "tokenizer.json", "ve.safetensors"]
)
def test_missing_file_is_named(copy, name):
    (copy / name).unlink()
    if name == "t3_cfg.safetensors":  # no T3 file: not an English folder at all
        with pytest.raises(Exception, match="config.json"):
            detect_architecture(copy)
        return
    with pytest.raises(FileNotFoundError, match=name.replace(".", r"\.")):
        ChatterboxEnglishModel.from_pretrained(copy)


def test_renamed_tensor_is_named(copy):
    path = copy / "t3_cfg.safetensors"
    state = load_file(path)
    state["tfmr.layers.0.self_attn.q_proj.renamed"] = state.pop(
        "tfmr.layers.0.self_attn.q_proj.weight"
    )
    save_file(state, path)
    with pytest.raises(CheckpointError, match=r"tfmr\.layers\.0\.self_attn\.q_proj\.weight"):
        ChatterboxEnglishModel.from_pretrained(copy)


def test_stray_s3gen_tensor_is_refused(copy):
    path = copy / "s3gen.safetensors"
    state = load_file(path)
    state["stray.weight"] = torch.zeros(2)
    save_file(state, path)
    with pytest.raises(CheckpointError, match="stray.weight"):
        ChatterboxEnglishModel.from_pretrained(copy)


def test_sizes_that_do_not_match_the_tensors_are_refused(copy):
    sizes = json.loads((copy / "chatterbox_sizes.json").read_text())
    sizes["llama"]["intermediate"] = 40
    (copy / "chatterbox_sizes.json").write_text(json.dumps(sizes))
    with pytest.raises(CheckpointError, match="shape mismatch"):
        ChatterboxEnglishModel.from_pretrained(copy)


def test_sizes_file_errors_and_released_defaults(tmp_path):
    released = EnglishSizes.of_folder(tmp_path)
    assert (released.llama.n_layer, released.llama.hidden, released.llama.heads) == (30, 1024, 16)
    assert released.perceiver_heads == 4 and released.parts.decoder.mid_blocks == 12
    (tmp_path / "chatterbox_sizes.json").write_text(json.dumps({"llama": {}}))
    with pytest.raises(SizesError):
        EnglishSizes.of_folder(tmp_path)


def test_tokenizer_without_start_is_refused(copy):
    data = json.loads((copy / "tokenizer.json").read_text())
    data["added_tokens"] = [t for t in data["added_tokens"] if t["content"] != "[START]"]
    data["model"]["vocab"].pop("[START]")
    (copy / "tokenizer.json").write_text(json.dumps(data))
    with pytest.raises(CheckpointError, match=r"\[START\]"):
        ChatterboxEnglishModel.from_pretrained(copy)


def test_only_float32():
    with pytest.raises(ValueError, match="float32"):
        ChatterboxEnglishModel.from_pretrained(TINY, dtype=torch.bfloat16)
