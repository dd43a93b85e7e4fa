"""speech_output.speech_bytes: what a chunk of a streamed response costs the event loop.

The model thread's hand-off wakes the loop once a chunk (engine/handoff.py); encoding PCM or WAV
on the loop must add no second cross-thread wake-up (`call_soon_threadsafe`: a write to the
loop's self-pipe and another pass of the loop) and no task of its own. Counted on a loop that
counts them, the events from a generator (no hand-off, so no wake-up of the model's): every
count is of calls the code makes, not of time.
"""

from __future__ import annotations

import asyncio
import base64
import json
import threading

import numpy as np
import pytest

from tts_core.audio import to_int16
from tts_core.engine.streams import StreamEvent
from tts_core.server.speech_output import speech_bytes

CHUNKS = 5
RATE, FRAME = 24_000, 1920


class CountingLoop(asyncio.SelectorEventLoop):
    """asyncio's loop, counting the wake-ups from other threads and the tasks made."""

    def __init__(self) -> None:
        super().__init__()
        self.threadsafe_calls = 0
        self.tasks = 0

    def call_soon_threadsafe(self, *args, **kwargs):  # noqa: ANN002, ANN003, ANN201
        self.threadsafe_calls += 1
        return super().call_soon_threadsafe(*args, **kwargs)

    def create_task(self, *args, **kwargs):  # noqa: ANN002, ANN003, ANN201
        self.tasks += 1
        return super().create_task(*args, **kwargs)


def events(count: int) -> list[StreamEvent]:
    rng = np.random.default_rng(0)
    audio = [rng.uniform(-1, 1, FRAME * (i + 1)).astype(np.float32) for i in range(count)]
    return [
        StreamEvent(a, i, i == count - 1, {"done": i == count - 1}) for i, a in enumerate(audio)
    ]


def served(response_format: str, sse: bool = False) -> tuple[list[bytes], int, int]:
    """(the response's pieces, cross-thread wake-ups, tasks made) while speech_bytes made
    them: the first event taken, as the route does, then the rest."""
    first, *rest = events(CHUNKS)
    cancel = threading.Event()

    async def body() -> tuple[list[bytes], int, int]:
        loop = asyncio.get_running_loop()
        loop.threadsafe_calls = loop.tasks = 0
        stream = speech_bytes(first, (e for e in rest), response_format, sse, RATE, FRAME, cancel)
        pieces = [piece async for piece in stream]
        return pieces, loop.threadsafe_calls, loop.tasks

    with asyncio.Runner(loop_factory=CountingLoop) as runner:
        return runner.run(body())


@pytest.mark.parametrize("response_format", ["pcm", "wav"])
def test_pcm_and_wav_take_no_cross_thread_wake_up_and_no_task_a_chunk(response_format):
    pieces, wake_ups, tasks = served(response_format)
    # before: one call_soon_threadsafe a chunk and one at the end (CHUNKS + 1), one task
    assert (wake_ups, tasks) == (0, 0)
    audio = b"".join(pieces)
    if response_format == "wav":
        assert audio[:4] == b"RIFF"
        audio = audio[44:]
    expected = b"".join(to_int16(e.audio).astype("<i2").tobytes() for e in events(CHUNKS))
    assert audio == expected
    assert len(pieces) == CHUNKS  # a chunk's bytes go out as one piece, as soon as it is fed


def test_sse_deltas_then_done_without_a_cross_thread_wake_up():
    pieces, wake_ups, tasks = served("pcm", sse=True)
    assert (wake_ups, tasks) == (0, 0)
    kinds = [json.loads(p.decode().split("data: ", 1)[1])["type"] for p in pieces]
    assert kinds == ["speech.audio.delta"] * CHUNKS + ["speech.audio.done"]
    deltas = [json.loads(p.decode().split("data: ", 1)[1]) for p in pieces[:CHUNKS]]
    audio = b"".join(base64.b64decode(d["audio"]) for d in deltas)
    assert audio == b"".join(to_int16(e.audio).tobytes() for e in events(CHUNKS))
    done = json.loads(pieces[-1].decode().split("data: ", 1)[1])
    frames = sum(i + 1 for i in range(CHUNKS))  # event i holds i + 1 frames
    assert done["usage"]["output_tokens"] == frames and done["stats"] == {"done": True}


def failing(first_events: list[StreamEvent]):  # noqa: ANN201 - a generator of events
    yield from first_events
    raise RuntimeError("the model failed")


def collect(response_format: str, sse: bool) -> tuple[list[bytes], BaseException | None]:
    """The pieces of a response whose synthesis fails after three events, and its error."""
    first, *rest = events(3)
    pieces: list[bytes] = []

    async def body() -> BaseException | None:
        stream = speech_bytes(
            first, failing(rest), response_format, sse, RATE, FRAME, threading.Event()
        )
        try:
            async for piece in stream:
                pieces.append(piece)
        except RuntimeError as error:
            return error
        return None

    return pieces, asyncio.run(body())


def test_an_error_after_the_start_comes_after_the_bytes_made_before_it():
    pieces, error = collect("pcm", sse=False)
    assert str(error) == "the model failed"
    assert b"".join(pieces) == b"".join(to_int16(e.audio).tobytes() for e in events(3))


def test_an_sse_error_after_the_start_is_its_error_event():
    pieces, error = collect("pcm", sse=True)
    assert error is None
    kinds = [json.loads(p.decode().split("data: ", 1)[1]) for p in pieces]
    assert [k["type"] for k in kinds] == ["speech.audio.delta"] * 3 + ["speech.audio.error"]
    assert kinds[-1]["error"]["message"] == "the model failed"
