"""The Chatterbox package's layers (issue 39, serving above models): the engine's runner and the
request both models subclass (models/chatterbox/runner.py) sit below the models and reach one
only through the instance they are given, so they load without either model's module (no
import circle); each backend serves its model through the generic EngineLoop made from the
model's `runner` and `request`, whose chunks are the model's `stream`."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import tts_core
from tts_core.backends.chatterbox import ChatterboxBackend
from tts_core.backends.chatterbox_english import ChatterboxEnglishBackend
from tts_core.serving import EngineLoop

from .conftest import FIXTURES, shared_model
from .english_common import english_model
from .test_batching import _chunk_record

MODEL_MODULES = ("tts_core.models.chatterbox.model", "tts_core.models.chatterbox.english")


def test_the_runner_module_loads_without_either_model() -> None:
    code = "import sys, tts_core.models.chatterbox.runner\nprint(' '.join(sorted(sys.modules)))"
    # a fresh interpreter (this one has imported the models) on this checkout's tts_core
    root = str(Path(tts_core.__file__).parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    ).stdout.split()
    assert "tts_core.models.chatterbox.runner" in out
    assert not set(MODEL_MODULES) & set(out)


@pytest.mark.parametrize(
    ("backend_class", "load", "folder", "thread"),
    [
        (ChatterboxBackend, shared_model, "chatterbox-turbo-tiny-a", "tts-chatterbox"),
        (
            ChatterboxEnglishBackend,
            english_model,
            "chatterbox-english-tiny-a",
            "tts-chatterbox-english",
        ),
    ],
)
def test_a_backend_serves_its_model_on_the_generic_loop(backend_class, load, folder, thread):
    model = load(FIXTURES / folder)
    backend = backend_class(model, folder, "cpu", max_batch=3)
    try:
        loop = backend.loop
        assert type(loop) is EngineLoop and loop.max_batch == 3
        assert loop.call(lambda: threading.current_thread().name) == thread
        served = loop.submit("Hello there.", None, seed=4, max_new_tokens=12)
        reference = model.stream("Hello there.", seed=4, max_new_tokens=12)
        assert [_chunk_record(c) for c in served] == [_chunk_record(c) for c in reference]
    finally:
        backend.close()
