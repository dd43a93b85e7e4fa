"""A stand-in for the Hugging Face Hub in tests (no network): repo id -> a local folder."""

from __future__ import annotations

import shutil
from pathlib import Path


class FakeHub:
    """`snapshot_download` and `list_repo_files` stand-ins over `repos` (repo id -> folder);
    records every snapshot's allow_patterns in `calls` and every listing in `listed`."""

    def __init__(self, tmp_path: Path, repos: dict[str, Path]) -> None:
        self.tmp_path, self.repos = tmp_path, repos
        self.calls: list[tuple[str, list[str]]] = []
        self.listed: list[str] = []

    def __call__(self, repo_id: str, allow_patterns: list[str], **_options) -> str:
        self.calls.append((repo_id, list(allow_patterns)))
        folder = self.tmp_path / "cache" / repo_id.replace("/", "--") / str(len(self.calls))
        folder.mkdir(parents=True)
        for path in self.repos[repo_id].iterdir():  # only the requested files, as the Hub
            if path.name in allow_patterns:
                shutil.copy(path, folder / path.name)
        return str(folder)

    def list_repo_files(self, repo_id: str, **_options) -> list[str]:
        self.listed.append(repo_id)
        return sorted(path.name for path in self.repos[repo_id].iterdir())

    def install(self, monkeypatch) -> FakeHub:  # noqa: ANN001 - pytest's MonkeyPatch
        monkeypatch.setattr("huggingface_hub.snapshot_download", self)
        monkeypatch.setattr("huggingface_hub.list_repo_files", self.list_repo_files)
        return self
