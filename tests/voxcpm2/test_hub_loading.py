"""Loading VoxCPM2 by Hub repo id or local folder, `tts_core.load_model`'s dispatch on
config.json and `detect_architecture`. The Hub is replaced by a fake `snapshot_download` that
serves copies of the tiny checkpoints (no network in tests)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from hub_fake import FakeHub
from huggingface_hub.errors import LocalEntryNotFoundError
from qwen3.conftest import bf16_bound, check_audio, run_error

import tts_core
from tts_core.models.qwen3_tts.model import Qwen3TTSModel
from tts_core.models.registry import (
    QWEN3_TTS,
    VOXCPM2,
    UnknownArchitectureError,
    detect_architecture,
)
from tts_core.models.voxcpm import VoxCPMModel
from tts_core.models.voxcpm.checkpoint import DOWNLOAD_PATTERNS

from .conftest import FIXTURES, shared_model

TINY = FIXTURES / "voxcpm2-tiny"
FLOAT32_AND_64 = (torch.float32, torch.float64)


def _copy(source: Path, target: Path, skip: tuple[str, ...] = ()) -> Path:
    target.mkdir(parents=True, exist_ok=True)
    for path in source.iterdir():
        if path.name not in skip:
            shutil.copy(path, target / path.name)
    return target


@pytest.fixture
def hub(tmp_path: Path, monkeypatch) -> FakeHub:
    repos = {"openbmb/VoxCPM2": TINY, "Qwen/tiny": FIXTURES / "qwen3-tiny-a"}
    return FakeHub(tmp_path, repos).install(monkeypatch)


def test_detect_architecture_local() -> None:
    assert detect_architecture(TINY) == VOXCPM2
    assert detect_architecture(FIXTURES / "voxcpm2-release") == VOXCPM2  # config.json only
    assert detect_architecture(FIXTURES / "qwen3-tiny-a") == QWEN3_TTS


def test_detect_architecture_downloads_config_only(hub: FakeHub) -> None:
    assert detect_architecture("openbmb/VoxCPM2") == VOXCPM2
    assert hub.calls == [("openbmb/VoxCPM2", ["config.json"])]
    assert hub.listed == []  # a repo with config.json is never asked for its file list


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"architecture": "voxcpm"}, "architecture 'voxcpm'"),
        ({"model_type": "llama"}, "model_type 'llama'"),
        ([1, 2], "JSON object"),
    ],
)
def test_unknown_architecture_is_a_clear_error(tmp_path: Path, config, message: str) -> None:
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(UnknownArchitectureError, match=message):
        tts_core.load_model(tmp_path)


def test_missing_config_is_named(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="config.json"):
        detect_architecture(tmp_path)


def test_load_model_dispatches_on_the_config() -> None:
    voxcpm = tts_core.load_model(TINY)
    assert isinstance(voxcpm, VoxCPMModel) and voxcpm.sample_rate == 48000
    assert voxcpm.net.dtype == torch.float32
    assert isinstance(tts_core.load_model(FIXTURES / "qwen3-tiny-a"), Qwen3TTSModel)


def _first_patch_audio(model) -> torch.Tensor:
    chunks = model.stream("Hello.", None, seed=1, chunk_patches=1, first_chunk_patches=1)
    return torch.from_numpy(next(iter(chunks)).audio).double()


def test_load_model_bfloat16_voxcpm() -> None:
    """bf16 LM / DiT stacks, float32 VAE. The first patch's audio (seeded noise through LocDiT,
    then the VAE) is the float32 model's up to bf16 rounding: within bf16_bound of float64 (error
    model of tests/qwen3/conftest.py, E = the float32 run's error; measured 0.4 A u_bf16)."""
    model = tts_core.load_model(TINY, dtype=torch.bfloat16)
    assert model.net.dtype == torch.bfloat16 and model.vae.dtype == torch.float32
    ours16 = _first_patch_audio(model)
    ours32, exact = (_first_patch_audio(shared_model(TINY, dt)) for dt in FLOAT32_AND_64)
    bound = bf16_bound(run_error(ours32, exact))
    assert bound < 0.5 * float(exact.abs().max())  # a bound a real error would break
    assert float((ours16 - exact).abs().max()) <= bound
    audio = model.generate("Hello.", None, seed=1).audio
    assert audio.dtype.name == "float32"
    check_audio(audio)


@pytest.mark.parametrize(
    "option",
    [
        {"quantize": "int8"},
        {"compile": True},
        {"cuda_graphs": True},
        {"decoder_dtype": torch.bfloat16},
        {"warm_chunks": ()},
    ],
)
def test_qwen3_options_are_refused_for_voxcpm(option: dict) -> None:
    with pytest.raises(ValueError, match=f"{next(iter(option))}=.*only applies to Qwen3-TTS"):
        tts_core.load_model(TINY, **option)


@pytest.mark.parametrize("quantize", [None, "none", "auto"])
def test_float_quantize_settings_are_accepted_for_voxcpm(quantize) -> None:
    assert isinstance(tts_core.load_model(TINY, quantize=quantize), VoxCPMModel)


@pytest.mark.parametrize(
    ("skip", "message"),
    [
        (("tokenizer.json",), "tokenizer.json"),
        (("audiovae.pth",), "audiovae.safetensors or audiovae.pth"),
        (("model.safetensors",), "model.safetensors or pytorch_model.bin"),
    ],
)
def test_missing_file_in_a_local_folder_is_named(tmp_path: Path, skip, message: str) -> None:
    folder = _copy(TINY, tmp_path / "ckpt", skip)
    with pytest.raises(FileNotFoundError, match=message):
        tts_core.load_model(folder)


def test_hub_id_downloads_only_the_needed_files(hub: FakeHub) -> None:
    model = tts_core.load_model("openbmb/VoxCPM2")
    assert isinstance(model, VoxCPMModel)
    assert hub.calls == [
        ("openbmb/VoxCPM2", ["config.json"]),
        ("openbmb/VoxCPM2", list(DOWNLOAD_PATTERNS)),
    ]


def test_backend_loads_from_the_hub(hub: FakeHub) -> None:
    from tts_core.backends.voxcpm import VoxCPMBackend

    backend = VoxCPMBackend.load("openbmb/VoxCPM2", device="cpu")
    assert backend.model_name == "openbmb/VoxCPM2" and backend.sample_rate == 48000
    assert backend.weight_format == "float32" and hub.calls[-1][1] == list(DOWNLOAD_PATTERNS)


def test_qwen3_hub_download_is_unchanged(hub: FakeHub) -> None:
    from tts_core.models.qwen3_tts.checkpoint import DOWNLOAD_PATTERNS as QWEN3_PATTERNS
    from tts_core.models.qwen3_tts.checkpoint import resolve_checkpoint

    with pytest.raises(FileNotFoundError, match="speech_tokenizer"):  # top-level files only
        resolve_checkpoint("Qwen/tiny")
    assert hub.calls == [("Qwen/tiny", QWEN3_PATTERNS)]


def test_file_missing_on_the_hub_is_named(tmp_path: Path, hub: FakeHub) -> None:
    hub.repos["openbmb/VoxCPM2"] = _copy(TINY, tmp_path / "repo", ("tokenizer.json",))
    with pytest.raises(FileNotFoundError, match="missing: tokenizer.json"):
        tts_core.load_model("openbmb/VoxCPM2")


def test_no_network_is_said(monkeypatch) -> None:
    def offline(repo_id: str, allow_patterns: list[str], **_options) -> str:
        raise LocalEntryNotFoundError("Please check your internet connection and try again.")

    monkeypatch.setattr("huggingface_hub.snapshot_download", offline)
    with pytest.raises(FileNotFoundError, match="no network connection to the Hub"):
        tts_core.load_model("openbmb/VoxCPM2")


def test_missing_local_folder_is_not_sent_to_the_hub(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="not found"):
        tts_core.load_model(tmp_path / "nope")
