"""Where the Chatterbox backends compute: the stream's Perth watermark runs on the scheduler's
model thread, between its steps. Beside them, on the consumer's thread, its torch threads and
the steps' shared the 2 cores: +0.45 s per 1 s chunk at real size (BENCHMARKS.md), where the
watermark alone takes ~15 ms."""

from __future__ import annotations

import threading

import numpy as np

from tts_core.audio import perth_watermark
from tts_core.backends.chatterbox import ChatterboxBackend
from tts_core.engine import SynthesisParams

from .conftest import FIXTURES, shared_model

TINY = FIXTURES / "chatterbox-turbo-tiny-a"


def test_the_stream_watermark_runs_on_the_model_thread(monkeypatch) -> None:
    backend = ChatterboxBackend(shared_model(TINY), TINY.name, "cpu")
    threads: list[threading.Thread] = []

    def marker(enabled, sample_rate):  # noqa: ANN001, ANN202 - stream_marker's signature
        def mark(audio: np.ndarray, final: bool) -> np.ndarray:
            threads.append(threading.current_thread())
            return audio

        return mark

    monkeypatch.setattr(perth_watermark, "stream_marker", marker)  # imported per stream
    params = SynthesisParams(seed=1, first_chunk_tokens=3, chunk_tokens=5)
    consumer = threading.current_thread()
    chunks = list(
        backend.stream("Hi there.", backend.create_voice(None, None), params, threading.Event())
    )
    model_thread = backend.loop.call(threading.current_thread)
    assert len(threads) == len(chunks) > 1
    assert all(t is model_thread for t in threads) and model_thread is not consumer
