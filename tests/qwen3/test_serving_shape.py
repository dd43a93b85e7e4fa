"""Qwen3-TTS below the engine (issue 39): the package has no import circle (its runner, requests
and quantization declaration sit below model.py, which builds on them), and the model's served
loop is the generic EngineLoop over `model.runner` and `model.request`, nothing Qwen3's own."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import tts_core.models.qwen3_tts as package
from tts_core.serving import EngineLoop

from .test_batching import collect, request, served_model

PACKAGE = package.__name__


def _module_of(path: Path) -> str:
    parts = path.relative_to(Path(package.__file__).parent).with_suffix("").parts
    parts = parts[:-1] if parts[-1] == "__init__" else parts
    return ".".join((PACKAGE, *parts))


def _imports(path: Path, modules: set[str]) -> set[str]:
    """The package's modules `path` imports: at the top, in functions, under TYPE_CHECKING."""
    here = _module_of(path)
    base = here if path.name == "__init__.py" else here.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            root = base
            for _ in range(node.level - 1):
                root = root.rpartition(".")[0]
            target = f"{root}.{node.module}" if node.level and node.module else node.module
            target = target or root
            found.add(target)
            found.update(f"{target}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return (found & modules) - {here}


def _circle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of `graph` (its modules in order), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = 1
        path.append(module)
        for target in sorted(graph[module]):
            if state.get(target) == 1:
                return path[path.index(target) :]
            if target not in state and (circle := visit(target)):
                return circle
        state[module] = 2
        path.pop()
        return None

    return next(
        (c for module in sorted(graph) if module not in state for c in [visit(module)] if c), None
    )


def test_the_package_has_no_import_circle():
    files = sorted(Path(package.__file__).parent.rglob("*.py"))
    modules = {_module_of(path) for path in files}
    graph = {_module_of(path): _imports(path, modules) for path in files}
    assert f"{PACKAGE}.config" in graph[f"{PACKAGE}.model"]  # the graph is read
    assert _circle(graph) is None, " -> ".join(_circle(graph) or [])


def test_a_loop_over_the_models_runner_and_request_refuses_what_its_arena_cannot_hold():
    """`EngineLoop(model.runner(n), make_request=model.request)` (no cache_positions given to
    the request): the runner holds the request to its arena at admission, so a prompt it cannot
    hold fails its own stream instead of waiting for room forever, and the loop serves on."""
    name = "qwen3-tiny-a"
    model = served_model(name)
    text, voice, kwargs = request(1, name)
    prompt_len = model.plan(text, voice, **kwargs)[0].prefill.shape[1]
    loop = EngineLoop(model.runner(1, cache_positions=prompt_len), make_request=model.request)
    try:
        with pytest.raises(ValueError, match="cache holds"):
            collect(loop.submit(text, voice, **kwargs))
        assert loop.active == 0 and loop.waiting == 0
    finally:
        loop.close()
    loop = EngineLoop(model.runner(1, cache_positions=prompt_len + 3), make_request=model.request)
    try:
        codes, _, chunks = collect(loop.submit(text, voice, **{**kwargs, "greedy": True}))
        assert chunks[-1].stop_reason == "length_cap" and codes.shape[0] == 3  # 3 positions left
    finally:
        loop.close()
