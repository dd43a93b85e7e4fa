"""Gradio event handlers: inputs -> engine request -> yields for the page and the API.

Errors the user can fix become gr.Error with the engine's message; anything unexpected is
logged with its traceback and reported as a short internal error. Either way the server
keeps serving.
"""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import gradio as gr
import numpy as np

from ..audio import to_int16
from ..engine import (
    BackendError,
    Engine,
    EngineBusy,
    InputError,
    StreamEvent,
    StreamHandle,
    SynthesisParams,
    SynthesisRequest,
)
from .formatting import stats_markdown, timeline_frame

log = logging.getLogger(__name__)

# Gradio 6.31 publishes a streamed chunk only when the next one arrives: if none follows within
# this many seconds, a 1-sample zero chunk is sent to flush it (it also makes sure a
# single-chunk stream has a second yield, without which it may not play).
PUBLISH_NUDGE_S = 0.15
_NUDGE = np.zeros(1, dtype=np.int16)


def make_request(
    text: str,
    language: str,
    reference: str | None,
    reference_text: str | None,
    temperature: float | None = None,
    top_k: float | None = None,
    top_p: float | None = None,
    repetition_penalty: float | None = None,
    seed: float | None = None,
    first_chunk_frames: float = 2,
    chunk_frames: float = 6,
    cfg_value: float | None = None,
    inference_timesteps: float | None = None,
) -> SynthesisRequest:
    """The page's inputs, in the order of the API (gradio_client) parameters: the fields of
    SynthesisParams, appended at the end when new so positional callers keep working."""
    params = SynthesisParams(
        language=language or "auto",
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
        repetition_penalty=repetition_penalty,
        seed=seed,
        first_chunk_frames=first_chunk_frames,
        chunk_frames=chunk_frames,
        cfg_value=cfg_value,
        inference_timesteps=inference_timesteps,
    )
    return SynthesisRequest(text, reference or None, reference_text, params)


@contextmanager
def user_errors() -> Iterator[None]:
    """InputError/BackendError -> gr.Error(message); other exceptions -> short gr.Error."""
    try:
        yield
    except gr.Error:
        raise
    except (InputError, BackendError, EngineBusy) as exc:
        raise gr.Error(str(exc), print_exception=False) from None
    except Exception as exc:  # noqa: BLE001 - never show a stack trace to the user
        log.exception("request failed")
        raise gr.Error(f"Internal error ({type(exc).__name__}); see the server log.") from None


def stream_to_page(engine: Engine, *inputs: Any) -> Iterator[tuple]:
    """Outputs: live audio, stats Markdown, timeline plot, full clip, stats JSON."""
    skip = gr.skip()
    with user_errors():
        handle = StreamHandle(engine, make_request(*inputs))
    pieces: list[np.ndarray] = []
    last_chunk_at: float | None = None  # set while a chunk waits to be flushed by a nudge
    stats: dict[str, Any] = {}
    try:
        for event in _events_with_timeouts(handle):
            if event is None:
                if last_chunk_at is not None:
                    last_chunk_at = None
                    yield (engine.sample_rate, _NUDGE), skip, skip, skip, skip
                continue
            stats = event.stats
            if not pieces:
                _warn(stats, engine.notice)
            pieces.append(event.audio)
            state = "Done" if event.final else "Generating…"
            if event.audio.size:
                last_chunk_at = time.perf_counter()
                audio = (engine.sample_rate, to_int16(event.audio))
                text = stats_markdown(stats, state, engine.notice)
                yield audio, text, timeline_frame(stats), skip, skip
        if last_chunk_at is not None:
            time.sleep(max(0.0, PUBLISH_NUDGE_S - (time.perf_counter() - last_chunk_at)))
            yield (engine.sample_rate, _NUDGE), skip, skip, skip, skip
        full = (engine.sample_rate, to_int16(np.concatenate(pieces)))
        state = "Stopped" if stats.get("stop_reason") == "cancelled" else "Done"
        text = stats_markdown(stats, state, engine.notice)
        yield skip, text, timeline_frame(stats), full, stats
    finally:
        handle.cancel()  # Stop, disconnect or error: end the synthesis now


def _warn(stats: dict[str, Any], page_notice: str | None) -> None:
    """Toasts for what this request did differently (e.g. a long reference was cut)."""
    for notice in stats.get("notices", []):
        if notice != page_notice:
            gr.Warning(notice)


def _events_with_timeouts(handle: StreamHandle) -> Iterator[StreamEvent | None]:
    """Engine events, with None whenever PUBLISH_NUDGE_S passes without one."""
    while True:
        with user_errors():
            try:
                event = handle.next_event(timeout=PUBLISH_NUDGE_S)
            except StopIteration:
                return
        yield event


def stream_to_api(engine: Engine, *inputs: Any) -> Iterator[tuple]:
    """/synthesize: one (chunk WAV, stats) per chunk; the last one's stats have done=true."""
    with user_errors():
        handle = StreamHandle(engine, make_request(*inputs))
    try:
        for event in _events_with_timeouts(handle):
            if event is None:
                continue
            audio = (engine.sample_rate, to_int16(event.audio)) if event.audio.size else None
            yield audio, event.stats
    finally:
        handle.cancel()


def synthesize_full(engine: Engine, *inputs: Any) -> Iterator[tuple]:
    """/synthesize_full: the finished clip (WAV) and the final stats (`predict` returns them).

    A generator that yields `gr.skip()` while it works: Gradio looks for a lost client, and
    stops a job, only between messages, so without them a request whose client went away
    would run on to its end, holding the engine. Stop/cancel and a lost client end it within
    PUBLISH_NUDGE_S.
    """
    skip = gr.skip()
    with user_errors():
        handle = StreamHandle(engine, make_request(*inputs))
    pieces, stats = [], {}
    try:
        for event in _events_with_timeouts(handle):
            if event is not None:
                pieces.append(event.audio)
                stats = event.stats
            yield skip, skip
    finally:
        handle.cancel()
    yield (engine.sample_rate, to_int16(np.concatenate(pieces))), stats


def bind(fn: Callable, engine: Engine) -> Callable:
    """fn(engine, *inputs) -> a Gradio handler whose API parameters carry make_request's names
    (a generator stays a generator function: Gradio decides streaming from that)."""
    if inspect.isgeneratorfunction(fn):

        def handler(*inputs: Any) -> Iterator:
            yield from fn(engine, *inputs)
    else:

        def handler(*inputs: Any) -> Any:
            return fn(engine, *inputs)

    handler.__signature__ = inspect.signature(make_request).replace(return_annotation=Any)
    handler.__name__ = handler.__qualname__ = fn.__name__
    handler.__doc__ = fn.__doc__
    return handler
