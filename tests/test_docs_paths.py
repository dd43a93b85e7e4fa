"""The file paths the docs name exist: docs/architecture.md's file tree (each line's path
rebuilt from its indentation), every repository path written out in README.md, docs/*.md or
tts_core/server/README.md (tts_core/..., tests/..., benchmarks/..., tools/...), every module
tts_core/server/README.md names by its file name alone (a file of tts_core/server), and every
relative link of README.md and docs/*.md: its file, and its #anchor as a heading there."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ARCHITECTURE = ROOT / "docs" / "architecture.md"
SERVER_README = ROOT / "tts_core" / "server" / "README.md"
README = ROOT / "README.md"
LINKED_DOCS = (README, *sorted((ROOT / "docs").glob("*.md")))
LINK = re.compile(r"\]\(([^)\s]+)\)")
REPO_PATH = re.compile(r"(?<![\w/.])((?:tts_core|tests|benchmarks|tools)/[\w./*-]*\w)")
DESCRIPTION_COLUMN = 20  # tree lines indented this far continue the description above


def tree_paths(markdown: str) -> list[str]:
    """The paths of the file tree (the code block that starts with app.py): two spaces of
    indentation a level, a name ending in "/" a folder."""
    blocks = re.findall(r"```\n(.*?)```", markdown, re.S)
    tree = next(block for block in blocks if block.startswith("app.py"))
    folders: list[str] = []
    paths = []
    for line in tree.splitlines():
        match = re.match(r"^( *)(\S+)", line)
        if match is None or len(match.group(1)) >= DESCRIPTION_COLUMN:
            continue
        folders = folders[: len(match.group(1)) // 2]
        name = match.group(2)
        paths.append("/".join([*folders, name]))
        if name.endswith("/"):
            folders.append(name.rstrip("/"))
    return paths


def exists(path: str) -> bool:
    """`path` (relative to the repository; may be a glob such as espeak*.py) names something."""
    return any(ROOT.glob(path.rstrip("/"))) if "*" in path else (ROOT / path).exists()


def test_the_architecture_tree_names_files_that_exist():
    paths = tree_paths(ARCHITECTURE.read_text())
    assert "tts_core/engine/engine.py" in paths and "tts_core/server/speech_ws.py" in paths
    assert [path for path in paths if not exists(path)] == []


def test_every_repository_path_in_the_docs_exists():
    for doc in (*LINKED_DOCS, SERVER_README):
        named = set(REPO_PATH.findall(doc.read_text()))
        assert sorted(path for path in named if not exists(path)) == [], doc.name


def test_the_server_readme_names_modules_that_exist():
    text = SERVER_README.read_text()
    names = set(re.findall(r"`(\w+\.py)`", text)) | set(re.findall(r"\((\w+\.py)[:;,)]", text))
    assert "speech_ws.py" in names and "page_text_ws.py" in names
    server = ROOT / "tts_core" / "server"
    assert sorted(name for name in names if not (server / name).is_file()) == []


def heading_anchors(markdown: str) -> set[str]:
    """GitHub's anchors of a file's headings: lower case, punctuation but - and _ dropped,
    spaces to hyphens (code blocks skipped: a "# comment" there is no heading)."""
    prose = re.sub(r"```.*?```", "", markdown, flags=re.S)
    headings = re.findall(r"(?m)^#{1,6} (.+)$", prose)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def test_every_relative_link_of_the_readme_and_docs_resolves():
    broken = []
    for doc in LINKED_DOCS:
        for target in LINK.findall(doc.read_text()):
            if target.startswith(("http://", "https://", "mailto:")):
                continue
            path, _, anchor = target.partition("#")
            file = (doc.parent / path).resolve() if path else doc
            if not file.exists():
                broken.append(f"{doc.name}: {target}")
            elif anchor and anchor not in heading_anchors(file.read_text()):
                broken.append(f"{doc.name}: {target} (no such heading)")
    assert broken == []
