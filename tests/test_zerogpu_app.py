"""The ZeroGPU variant (zerogpu_app.py) off ZeroGPU: the `spaces.GPU` decorator is then a
no-op, so this checks behaviour, not the GPU grant: the page streams, through gradio_client, the
very audio `model.stream` makes for the same voice and seed (the decode engine with one row on
the calling thread, which is what runs inside the decorated call on ZeroGPU)."""

from __future__ import annotations

import inspect
from pathlib import Path

import numpy as np
import pytest
from conftest import free_port
from gradio_client import Client

import zerogpu_app

CHECKPOINT = Path(__file__).resolve().parent / "fixtures" / "qwen3-tiny-a"
TEXT = "Hello from the shared GPU."


@pytest.fixture(scope="module")
def served():
    if not (CHECKPOINT / "config.json").is_file():
        pytest.skip("tests/fixtures/qwen3-tiny-a is not there")
    with pytest.MonkeyPatch.context() as patch:
        port = free_port()
        patch.setenv("TTS_MODEL", str(CHECKPOINT))
        zerogpu_app.model.cache_clear()
        demo = zerogpu_app.build_demo().queue(default_concurrency_limit=1)
        demo.launch(server_port=port, prevent_thread_lock=True, quiet=True)
        try:
            yield Client(f"http://127.0.0.1:{port}/", verbose=False)
        finally:
            demo.close()
            zerogpu_app.model.cache_clear()


def test_the_decorated_generator_yields_what_model_stream_makes(served) -> None:
    """`speak` (what runs inside the GPU call) streams model.stream's chunks, bit for bit."""
    voice_name = next(iter(zerogpu_app.recorded_voices()))
    pieces = list(zerogpu_app.speak(TEXT, voice_name, None, "", 7))
    assert len(pieces) >= 2 and {rate for rate, _ in pieces} == {24_000}
    tts = zerogpu_app.model()
    audio, rate, transcript = zerogpu_app.reference(voice_name, None, "")
    voice = tts.create_voice(audio, rate, ref_text=transcript)
    chunks = tts.stream(
        TEXT,
        voice,
        seed=7,
        first_chunk_frames=zerogpu_app.FIRST_CHUNK_FRAMES,
        chunk_frames=zerogpu_app.CHUNK_FRAMES,
    )
    expected = [np.clip(np.round(c.audio * 32767.0), -32768, 32767) for c in chunks if c.audio.size]
    assert len(pieces) == len(expected)
    for (_, got), want in zip(pieces, expected, strict=True):
        assert np.array_equal(got, want.astype(np.int16))


def test_the_page_streams_through_gradio_client(served) -> None:
    """Gradio turns the yielded chunks into an HLS stream (AAC): the client sees its playlist
    as the chunks arrive; the audio itself is checked above, before the lossy encoding."""
    job = served.submit(TEXT, "arctic-slt", None, "", 7, api_name="/speak")
    outputs = list(job)
    assert outputs and all(str(path).endswith(".m3u8") for path in outputs if path)
    assert job.status().success


def test_empty_text_is_a_clear_error(served) -> None:
    from gradio_client.exceptions import AppError

    with pytest.raises(AppError, match="type some text"):
        served.predict("  ", "arctic-slt", None, "", 0, api_name="/speak")


def test_the_generator_is_what_spaces_decorates() -> None:
    """Off ZeroGPU `spaces.GPU` returns the function itself; on ZeroGPU it wraps generator
    functions (its generator wrapper), so `speak` must stay one."""
    assert inspect.isgeneratorfunction(zerogpu_app.speak)
