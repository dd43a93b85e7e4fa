"""Loading a Turbo folder: dispatch by its files (no config.json in the release), strict keys
and shapes with errors that name the tensor, the unused T3 tensors dropped, sizes file."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from tts_core.models.chatterbox.config import ChatterboxSizes, SizesError
from tts_core.models.chatterbox.model import ChatterboxTurboModel
from tts_core.models.checkpoint import CheckpointError
from tts_core.models.registry import CHATTERBOX_TURBO, detect_architecture, load_model

from .conftest import FIXTURES

TINY = FIXTURES / "chatterbox-turbo-tiny-a"


@pytest.fixture
def copy(tmp_path):
    folder = tmp_path / "ckpt"
    shutil.copytree(TINY, folder)
    return folder


def test_registry_dispatch_by_files():
    assert detect_architecture(TINY) == CHATTERBOX_TURBO
    assert isinstance(load_model(TINY), ChatterboxTurboModel)


def test_unused_t3_tensors_are_not_kept():
    model = ChatterboxTurboModel.from_pretrained(TINY)
    keys = set(model.t3.state_dict())
    assert "tfmr.wte.weight" not in keys and "text_head.weight" not in keys
    assert "speech_head.bias" in keys  # GPT-2 Turbo's head has a bias


def test_hift_weight_norm_is_folded_to_the_same_bits():
    """The loaded vocoder holds each weight-normed conv's weight once (no parametrization left
    to recompute per forward), equal bit for bit to the parametrized module's, and vocodes the
    same samples."""
    from torch.nn.utils import parametrize

    from tts_core.models.chatterbox.checkpoint import load_part
    from tts_core.models.chatterbox.hift import HiFTGenerator

    model = ChatterboxTurboModel.from_pretrained(TINY)
    plain = load_part(
        HiFTGenerator(model.sizes.hift), TINY / "s3gen_meanflow.safetensors", "mel2wav."
    )
    normed = dict(plain.named_modules())
    folded = [
        name
        for name, module in model.hift.named_modules()
        if parametrize.is_parametrized(normed[name], "weight")
    ]
    assert len(folded) == 82  # conv_pre, 3 ups, 72 resblock convs, conv_post, 5 F0 convs
    for name, module in model.hift.named_modules():
        assert not parametrize.is_parametrized(module)
        if name in folded:
            assert torch.equal(module.weight, normed[name].weight), name
    mel = torch.randn(1, 80, 30, generator=torch.Generator().manual_seed(0)) - 5.0
    ours = model.hift.inference(mel, torch.Generator().manual_seed(1))
    assert torch.equal(ours, plain.inference(mel, torch.Generator().manual_seed(1)))


def test_sizes_from_file_and_released_defaults(tmp_path):
    sizes = ChatterboxSizes.of_folder(TINY)
    assert (sizes.t3.n_layer, sizes.t3.n_embd, sizes.t3.n_head) == (2, 32, 4)
    released = ChatterboxSizes.of_folder(tmp_path)  # no sizes file: the release's constants
    assert (released.t3.n_layer, released.t3.n_embd, released.decoder.mid_blocks) == (24, 1024, 12)
    (tmp_path / "chatterbox_sizes.json").write_text(json.dumps({"t3": {}}))
    with pytest.raises(SizesError, match="missing"):
        ChatterboxSizes.of_folder(tmp_path)


def test_missing_file_is_named(copy):
    (copy / "s3gen_meanflow.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match="s3gen_meanflow.safetensors"):
        ChatterboxTurboModel.from_pretrained(copy)


def test_renamed_tensor_is_named(copy):
    path = copy / "t3_turbo_v1.safetensors"
    state = load_file(path)
    state["tfmr.h.0.attn.c_attn.weight_renamed"] = state.pop("tfmr.h.0.attn.c_attn.weight")
    save_file(state, path)
    with pytest.raises(
        CheckpointError, match=r"missing key\(s\): tfmr\.h\.0\.attn\.c_attn\.weight"
    ):
        ChatterboxTurboModel.from_pretrained(copy)


def test_sizes_that_do_not_match_the_tensors_are_refused(copy):
    sizes = json.loads((copy / "chatterbox_sizes.json").read_text())
    sizes["encoder"]["linear_units"] = 48
    (copy / "chatterbox_sizes.json").write_text(json.dumps(sizes))
    with pytest.raises(CheckpointError, match="shape mismatch"):
        ChatterboxTurboModel.from_pretrained(copy)


def test_only_float32():
    with pytest.raises(ValueError, match="float32"):
        ChatterboxTurboModel.from_pretrained(TINY, dtype=torch.bfloat16)


def test_watermark_needs_the_optional_package(monkeypatch):
    """Without resemble-perth (its weights; found by find_spec, never imported) a clear error."""
    import importlib.util

    from tts_core.audio import perth_watermark

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "perth" else real_find_spec(name, *a),
    )
    monkeypatch.setattr(perth_watermark, "_shared", None)
    from tts_core.models.chatterbox.model import apply_watermark

    with pytest.raises(RuntimeError, match=r"resemble-perth.*tts-core\[chatterbox-watermark\]"):
        apply_watermark(torch.zeros(24000).numpy())


def test_released_sizes_give_the_released_keys_and_shapes():
    """Our modules at the release's sizes (no chatterbox_sizes.json) hold exactly the tensors of
    the released files (tools/oracle/chatterbox/dump_release_shapes.py: the official classes at
    their hard-coded sizes), less the two unused T3 tensors."""
    from tts_core.models.chatterbox.campplus import CAMPPlus
    from tts_core.models.chatterbox.checkpoint import T3_UNUSED
    from tts_core.models.chatterbox.flow import Flow
    from tts_core.models.chatterbox.hift import HiFTGenerator
    from tts_core.models.chatterbox.s3_tokenizer import S3Tokenizer
    from tts_core.models.chatterbox.t3 import T3Turbo
    from tts_core.models.chatterbox.voice_encoder import VoiceEncoder

    release = json.loads((FIXTURES / "chatterbox-turbo-release-shapes.json").read_text())
    sizes = ChatterboxSizes()
    with torch.device("meta"):
        parts = {
            "ve.safetensors": {"": VoiceEncoder(sizes.ve_hidden)},
            "t3_turbo_v1.safetensors": {"": T3Turbo(sizes.t3)},
            "s3gen_meanflow.safetensors": {
                "flow.": Flow(sizes.encoder, sizes.decoder, sizes.campplus.embedding_size),
                "mel2wav.": HiFTGenerator(sizes.hift),
                "tokenizer.": S3Tokenizer(sizes.s3tok),
                "speaker_encoder.": CAMPPlus(sizes.campplus),
            },
        }
    for file, modules in parts.items():
        ours = {
            prefix + key: list(value.shape)
            for prefix, module in modules.items()
            for key, value in module.state_dict().items()
        }
        expected = {key: shape for key, shape in release[file].items() if key not in T3_UNUSED}
        assert ours == expected, file
