"""The layers the imports draw (issue 39): no import circle anywhere in `tts_core` (imports at
the top, in functions and under TYPE_CHECKING all count); the generic engine (`tts_core/serving`)
imports no model package, and no model imports its served loop: the models plug into the engine
(their runner and request), and the backend above both serves them."""

from __future__ import annotations

import ast
from pathlib import Path

import tts_core

ROOT = Path(tts_core.__file__).parent
FACE = "__init__"  # a package's face: it hands names on; an import of the package is of its face


def module_of(path: Path) -> str:
    parts = ("tts_core", *path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == FACE else parts)


def imports(path: Path, modules: set[str]) -> set[str]:
    """The `tts_core` modules `path` imports (a package's face counts as the package)."""
    here = module_of(path)
    base = here if path.stem == FACE else here.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            root = base
            for _ in range(node.level - 1):
                root = root.rpartition(".")[0]
            target = (
                (f"{root}.{node.module}" if node.module else root) if node.level else node.module
            )
            found.add(target)
            found.update(f"{target}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return (found & modules) - {here}


def graph() -> dict[str, set[str]]:
    files = sorted(ROOT.rglob("*.py"))
    modules = {module_of(path) for path in files}
    return {module_of(path): imports(path, modules) for path in files}


def circle(edges: dict[str, set[str]]) -> list[str] | None:
    """One import circle (its modules in order), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = 1
        path.append(module)
        for target in sorted(edges[module]):
            if state.get(target) == 1:
                return path[path.index(target) :]
            if target not in state and (found := visit(target)):
                return found
        state[module] = 2
        path.pop()
        return None

    for module in sorted(edges):
        if module not in state and (found := visit(module)):
            return found
    return None


def without_faces(edges: dict[str, set[str]]) -> dict[str, set[str]]:
    """Edges into a package's face replaced by nothing when the importer lives inside that
    package (a submodule importing its own package's face reaches its siblings, which it would
    import directly; the face's re-exports are not a layer)."""
    faces = {
        m
        for m in edges
        if (ROOT / Path(*m.split(".")[1:]) / f"{FACE}.py").exists() or m == "tts_core"
    }
    return {
        m: {t for t in targets if not (t in faces and m.startswith(t + "."))}
        for m, targets in edges.items()
    }


def test_the_import_graph_is_read():
    edges = graph()
    assert "tts_core.serving.batch" in edges["tts_core.serving.loop"]
    assert "tts_core.models.qwen3_tts.config" in edges["tts_core.models.qwen3_tts.model"]


def test_tts_core_has_no_import_circle():
    found = circle(without_faces(graph()))
    assert found is None, " -> ".join(found or [])


def test_the_engine_imports_no_model():
    edges = graph()
    serving = {m: t for m, t in edges.items() if m.startswith("tts_core.serving")}
    reached = {t for targets in serving.values() for t in targets}
    assert not {t for t in reached if t.startswith("tts_core.models")}


def test_no_model_imports_the_served_loop():
    """A model steps its own requests alone (serving.alone, serving.batch); the loop that serves
    many (serving.loop, or the package's face, which loads it) and the thread placement of a
    served model's work (engine.model_thread) are the backend's."""
    edges = graph()
    loop = {"tts_core.serving", "tts_core.serving.loop", "tts_core.engine.model_thread"}
    models = {m: t & loop for m, t in edges.items() if m.startswith("tts_core.models")}
    assert {m: t for m, t in models.items() if t} == {}
