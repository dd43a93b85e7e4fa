"""The TADA package's layers (issue 39, serving above models): the engine's runner and the
request (models/tada/runner.py) sit below the model and reach it only through the instance they
are given, so they load without models/tada/model.py (no import circle); the backend serves the
model through the generic EngineLoop made from the model's `runner` and `request`, whose chunks
are the model's `stream`."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import tts_core
from tts_core.backends.tada import TadaBackend
from tts_core.serving import EngineLoop

from .test_batching import alone, model_of, request_args, same
from .test_generate import prompt_of


def test_the_runner_module_loads_without_the_model() -> None:
    code = "import sys, tts_core.models.tada.runner\nprint(' '.join(sorted(sys.modules)))"
    # a fresh interpreter (this one has imported the model) on this checkout's tts_core
    root = str(Path(tts_core.__file__).parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    ).stdout.split()
    assert "tts_core.models.tada.runner" in out
    assert "tts_core.models.tada.model" not in out


def test_the_backend_serves_its_model_on_the_generic_loop(tiny_folder, goldens) -> None:
    model, voice = model_of({}, tiny_folder), prompt_of(goldens)
    backend = TadaBackend(model, tiny_folder.name, "cpu", max_batch=3)
    try:
        loop = backend.loop
        assert type(loop) is EngineLoop and loop.max_batch == 3
        assert loop.call(lambda: threading.current_thread().name) == "tts-tada"
        served = list(loop.submit(voice, **request_args(0)))
        assert same(served, alone(model, voice, 0))
    finally:
        backend.close()
