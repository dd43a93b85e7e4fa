"""Gradio event handlers: inputs -> engine request -> yields for the page and the API.

Each handler takes the engine from the slot per request (a request while the model loads gets
its "still loading" message). Errors the user can fix become gr.Error with the engine's or the
voice registry's message; anything unexpected is logged with its traceback and reported as a
short internal error. Either way the server keeps serving.
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

from ..audio import SAMPLE_RATE, to_int16
from ..engine import (
    BackendError,
    Engine,
    EngineBusy,
    EngineSlot,
    InputError,
    StreamEvent,
    StreamHandle,
    SynthesisParams,
    SynthesisRequest,
)
from ..server.voices import VoiceDamaged, VoiceNotFound, VoiceRegistry

log = logging.getLogger(__name__)

# Gradio 6.31 publishes a streamed chunk only when the next one arrives: if none follows within
# this many seconds, a 1-sample zero chunk is sent to flush it (it also makes sure a
# single-chunk stream has a second yield, without which it may not play).
PUBLISH_NUDGE_S = 0.15
_NUDGE = np.zeros(1, dtype=np.int16)


def make_request(
    text: str,
    language: str,
    reference: str | None = None,  # optional for gradio_client: a voice, or none (eSpeak)
    reference_text: str | None = None,
    temperature: float | None = None,
    top_k: float | None = None,
    top_p: float | None = None,
    repetition_penalty: float | None = None,
    seed: float | None = None,
    first_chunk_frames: float = 2,
    chunk_frames: float = 6,
    cfg_value: float | None = None,
    inference_timesteps: float | None = None,
    voice: str | None = None,
    *,
    voices: VoiceRegistry | None = None,
) -> SynthesisRequest:
    """The page's inputs, in the order of the API (gradio_client) parameters: new ones are
    appended at the end so positional callers keep working. `voice` names a built-in or saved
    voice (from `voices`) used instead of the reference clip and its transcript."""
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
    if voice:
        if voices is None:
            raise InputError("Named voices are not available here; upload a clip instead.")
        named, clip = voices.load(voice)
        return SynthesisRequest(text, (SAMPLE_RATE, clip), named.transcript, params)
    return SynthesisRequest(text, reference or None, reference_text, params)


# make_request's parameters are the API's (the registry is the page's, not the caller's)
API_SIGNATURE = inspect.signature(make_request).replace(
    parameters=[
        p
        for p in inspect.signature(make_request).parameters.values()
        if p.kind is not p.KEYWORD_ONLY
    ],  # fmt: skip
    return_annotation=Any,
)


@contextmanager
def user_errors() -> Iterator[None]:
    """Engine and voice errors -> gr.Error(message); other exceptions -> short gr.Error."""
    try:
        yield
    except gr.Error:
        raise
    except VoiceNotFound as exc:
        raise gr.Error(f"There is no voice named '{exc.args[0]}'.", print_exception=False) from None
    except (InputError, BackendError, EngineBusy, VoiceDamaged) as exc:
        raise gr.Error(str(exc), print_exception=False) from None
    except Exception as exc:  # noqa: BLE001 - never show a stack trace to the user
        log.exception("request failed")
        raise gr.Error(f"Internal error ({type(exc).__name__}); see the server log.") from None


def stream_to_page(
    engine: Engine, *inputs: Any, voices: VoiceRegistry | None = None
) -> Iterator[tuple]:
    """Outputs: live audio, full clip, stats (the page's stats panel draws them)."""
    skip = gr.skip()
    with user_errors():
        handle = StreamHandle(engine, make_request(*inputs, voices=voices))
    pieces: list[np.ndarray] = []
    last_chunk_at: float | None = None  # set while a chunk waits to be flushed by a nudge
    stats: dict[str, Any] = {}
    try:
        for event in _events_with_timeouts(handle):
            if event is None:  # yield anyway: Gradio stops a job (Stop) only at a yield
                nudge = last_chunk_at is not None
                last_chunk_at = None
                yield ((engine.sample_rate, _NUDGE) if nudge else skip), skip, skip
                continue
            stats = event.stats
            if not pieces:
                _warn(stats, engine.notice)
            pieces.append(event.audio)
            if event.audio.size:
                last_chunk_at = time.perf_counter()
                yield (engine.sample_rate, to_int16(event.audio)), skip, stats
        if last_chunk_at is not None:
            time.sleep(max(0.0, PUBLISH_NUDGE_S - (time.perf_counter() - last_chunk_at)))
            yield (engine.sample_rate, _NUDGE), skip, skip
        yield skip, (engine.sample_rate, to_int16(np.concatenate(pieces))), stats
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


def stream_to_api(
    engine: Engine, *inputs: Any, voices: VoiceRegistry | None = None
) -> Iterator[tuple]:
    """/synthesize: one (chunk WAV, stats) per chunk; the last one's stats have done=true."""
    with user_errors():
        handle = StreamHandle(engine, make_request(*inputs, voices=voices))
    try:
        for event in _events_with_timeouts(handle):
            if event is None:
                continue
            audio = (engine.sample_rate, to_int16(event.audio)) if event.audio.size else None
            yield audio, event.stats
    finally:
        handle.cancel()


def synthesize_full(
    engine: Engine, *inputs: Any, voices: VoiceRegistry | None = None
) -> Iterator[tuple]:
    """/synthesize_full: the finished clip (WAV) and the final stats (`predict` returns them).

    A generator that yields `gr.skip()` while it works: Gradio looks for a lost client, and
    stops a job, only between messages, so without them a request whose client went away
    would run on to its end, holding the engine. Stop/cancel and a lost client end it within
    PUBLISH_NUDGE_S.
    """
    skip = gr.skip()
    with user_errors():
        handle = StreamHandle(engine, make_request(*inputs, voices=voices))
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


def bind(fn: Callable, slot: EngineSlot, voices: VoiceRegistry | None) -> Callable[..., Iterator]:
    """fn(engine, *inputs, voices=) -> a Gradio handler that takes the engine from `slot` per
    request and whose API parameters carry make_request's names (every handler here is a
    generator, and stays one: Gradio decides streaming from that)."""

    def handler(*inputs: Any) -> Iterator:
        with user_errors():
            engine = slot.engine  # ModelLoading while the model loads
        yield from fn(engine, *inputs, voices=voices)

    handler.__signature__ = API_SIGNATURE
    handler.__name__ = handler.__qualname__ = fn.__name__
    handler.__doc__ = fn.__doc__
    return handler
