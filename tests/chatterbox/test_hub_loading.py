"""Chatterbox by Hub repo id: a release has no config.json, so the registry asks the repo for
its file list and its T3 file names the model; then only the model's own files are downloaded.
The Hub is tests/hub_fake.py's stand-in (no network)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from hub_fake import FakeHub

from tts_core.models.chatterbox.checkpoint import DOWNLOAD_PATTERNS as TURBO_PATTERNS
from tts_core.models.chatterbox.english import DOWNLOAD_PATTERNS as ENGLISH_PATTERNS
from tts_core.models.chatterbox.english import ChatterboxEnglishModel
from tts_core.models.chatterbox.model import ChatterboxTurboModel
from tts_core.models.registry import (
    CHATTERBOX_ENGLISH,
    CHATTERBOX_TURBO,
    detect_architecture,
    load_model,
)

from .conftest import FIXTURES

TURBO, ENGLISH = FIXTURES / "chatterbox-turbo-tiny-a", FIXTURES / "chatterbox-english-tiny-a"


@pytest.fixture
def hub(tmp_path: Path, monkeypatch) -> FakeHub:
    repos = {"ResembleAI/chatterbox-turbo": TURBO, "ResembleAI/chatterbox": ENGLISH}
    return FakeHub(tmp_path, repos).install(monkeypatch)


@pytest.mark.parametrize(
    ("repo", "architecture"),
    [
        ("ResembleAI/chatterbox-turbo", CHATTERBOX_TURBO),
        ("ResembleAI/chatterbox", CHATTERBOX_ENGLISH),
    ],
)
def test_a_release_repo_is_known_by_its_t3_file(hub: FakeHub, repo: str, architecture: str) -> None:
    assert detect_architecture(repo) == architecture
    assert hub.calls == [(repo, ["config.json"])] and hub.listed == [repo]


@pytest.mark.parametrize(
    ("repo", "model_class", "patterns"),
    [
        ("ResembleAI/chatterbox-turbo", ChatterboxTurboModel, TURBO_PATTERNS),
        ("ResembleAI/chatterbox", ChatterboxEnglishModel, ENGLISH_PATTERNS),
    ],
)
def test_load_model_downloads_only_the_models_files(
    hub: FakeHub, repo, model_class, patterns
) -> None:
    model = load_model(repo)
    assert isinstance(model, model_class)
    assert hub.calls == [(repo, ["config.json"]), (repo, list(patterns))]
    assert model.generate("Hi.", None, seed=1, watermark=False).audio.size > 0


def test_the_backend_loader_takes_a_repo_id(hub: FakeHub) -> None:
    from tts_core.backends import load_backend

    backend, notice = load_backend(
        "ResembleAI/chatterbox-turbo", device="cpu", allow_fallback=False
    )
    try:
        assert notice is None and backend.model_name == "ResembleAI/chatterbox-turbo"
        assert backend.sample_rate == 24000
    finally:
        backend.close()


def test_a_repo_with_neither_config_nor_t3_file_is_named(hub: FakeHub, tmp_path: Path) -> None:
    repo = tmp_path / "not-a-model"
    repo.mkdir()
    shutil.copy(TURBO / "vocab.json", repo / "vocab.json")
    hub.repos["someone/not-a-model"] = repo
    with pytest.raises(FileNotFoundError, match="missing: config.json"):
        detect_architecture("someone/not-a-model")


def test_a_file_missing_from_the_release_repo_is_named(hub: FakeHub, tmp_path: Path) -> None:
    repo = shutil.copytree(
        TURBO, tmp_path / "repo", ignore=shutil.ignore_patterns("ve.safetensors")
    )
    hub.repos["ResembleAI/chatterbox-turbo"] = Path(repo)
    with pytest.raises(FileNotFoundError, match="missing: ve.safetensors"):
        load_model("ResembleAI/chatterbox-turbo")


@pytest.mark.parametrize("repo", ["ResembleAI/chatterbox-turbo", "ResembleAI/chatterbox"])
def test_max_batch_reaches_both_chatterbox_backends(hub: FakeHub, repo: str) -> None:
    from tts_core.backends import load_backend

    backend, _ = load_backend(repo, device="cpu", allow_fallback=False, max_batch=3)
    try:
        assert backend.default_concurrency == backend.loop.max_batch == 3
    finally:
        backend.close()
