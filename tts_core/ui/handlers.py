"""Gradio event handlers: inputs -> engine request -> yields for the page and the API.

Each handler takes the engine from the slot per request (while the model loads: its "still
loading" message). Errors the user can fix become gr.Error with the engine's or the voice
registry's message; anything unexpected is logged and reported as a short internal error.

The inputs are the API's parameters (ApiParameters: the request's fields and the knobs every
known backend declares), by position in `names` order or by name. Named voices are looked up
as a `Viewer`: the page's own event passes its browser's owner key; the API endpoints have
none, so with private voices they take the built-in voices only.
"""

from __future__ import annotations

import inspect
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import gradio as gr
import numpy as np

from ..audio import SAMPLE_RATE, to_int16
from ..backends import request_knobs
from ..engine import (
    BackendError,
    Engine,
    EngineBusy,
    EngineSlot,
    InputError,
    Knob,
    StreamEvent,
    StreamHandle,
    SynthesisParams,
    SynthesisRequest,
)
from ..engine.handoff import run_on_thread
from ..engine.knobs import parse_knobs, served_knobs
from ..server.pcm_stream import model_voice_of
from ..server.state import ApiConfig
from ..server.streaming import chain_events, open_streams
from ..server.text_split import done_at_the_end, split_request
from ..server.voices import Viewer, VoiceDamaged, VoiceNotFound, VoiceRegistry

log = logging.getLogger(__name__)

# Gradio 6.31 publishes a streamed chunk only when the next one arrives: if none follows within
# this many seconds, a 1-sample zero chunk is sent to flush it (it also makes sure a
# single-chunk stream has a second yield, without which it may not play).
PUBLISH_NUDGE_S = 0.15
_NUDGE = np.zeros(1, dtype=np.int16)


MAX_INPUT_CHARS = ApiConfig.max_input_chars  # the deployment's text limit, unless given


class PiecesHandle(StreamHandle):
    """A StreamHandle on several requests in a row (a long text's pieces): each validated and
    in line now (as /v1's open_streams), their events one stream."""

    def __init__(self, engine: Engine, requests: list[SynthesisRequest]) -> None:
        self.cancel_event = threading.Event()
        streams = open_streams(engine, requests, self.cancel_event)  # may raise InputError
        events = done_at_the_end(chain_events(streams, self.cancel_event), len(streams))
        self._handoff = run_on_thread(self._pump(events), "tts-stream")


# A Qwen3-TTS CustomVoice checkpoint's preset and its instruction (VoiceDesign: the voice's
# description; #41)
MODEL_VOICE_FIELDS = ("speaker", "instructions")
# The request's fields besides its knobs
FIELDS = ("text", "language", "reference", "reference_text", "voice", *MODEL_VOICE_FIELDS)
ANYONE = Viewer()  # a caller without an owner key (gradio_client, plain HTTP)
OWNER_KEY = "owner_key"  # the page's own event: its browser's key, after the API's values
# gradio_client and plain HTTP callers may pass every value by position: the first release's
# order, kept so their calls keep working; knobs declared since come after `voice`
# (SECOND_RELEASE_ORDER, then as request_knobs gives them). The page's inputs and the
# handlers' signature are both made from ApiParameters.names.
FIRST_RELEASE_ORDER = (
    "text",
    "language",
    "reference",
    "reference_text",
    "temperature",
    "top_k",
    "top_p",
    "repetition_penalty",
    "seed",
    "first_chunk_frames",
    "chunk_frames",
    "cfg_value",
    "inference_timesteps",
    "voice",
)
# ... then the knobs the known backends had declared when `speaker` and `instructions` came
# (#41), and those two; any knob declared since comes after them
SECOND_RELEASE_ORDER = (
    "first_chunk_tokens",
    "chunk_tokens",
    "watermark",
    "exaggeration",
    "cfg_weight",
    "min_p",
    *MODEL_VOICE_FIELDS,
)


class ApiParameters:
    """The Gradio API's parameters, by name: the request's fields and `knobs` (the page's
    controls for them are looked up by these names, and the handlers' signature carries them,
    so gradio_client callers pass any of them by name)."""

    def __init__(self, knobs: Sequence[Knob], max_input_chars: int = MAX_INPUT_CHARS) -> None:
        self.knobs = tuple(knobs)
        self.max_input_chars = max_input_chars  # the deployment's text limit (ApiConfig's)
        knob_names = [knob.name for knob in self.knobs]
        released = (*FIRST_RELEASE_ORDER, *SECOND_RELEASE_ORDER)
        first = [name for name in released if name in FIELDS or name in knob_names]
        self.names = (*first, *(name for name in knob_names if name not in first))
        # `text` is required; any other value left out is None (a knob's default)
        kind, empty = inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.empty
        parameters = [
            inspect.Parameter(name, kind, default=empty if name == "text" else None)
            for name in self.names
        ]
        self.signature = inspect.Signature(parameters, return_annotation=Any)

    @classmethod
    def for_engine(
        cls, engine: Engine | None = None, max_input_chars: int = MAX_INPUT_CHARS
    ) -> ApiParameters:
        """The parameters of every known backend's knobs, and of `engine`'s backend's
        (tts_core.backends.request_knobs)."""
        return cls(request_knobs(engine), max_input_chars)

    def open(self, engine: Engine, request: SynthesisRequest) -> StreamHandle:
        """A handle on `request`, its text checked against the deployment's limit and cut into
        pieces the engine takes (spoken one after the other, as /v1 does)."""
        limit = engine.config.limits.max_chars
        return PiecesHandle(engine, split_request(request, self.max_input_chars, limit))

    def request(
        self,
        inputs: tuple,
        named: dict[str, Any],
        voices: VoiceRegistry | None = None,
        viewer: Viewer = ANYONE,
        task_type: str = "Base",
    ) -> SynthesisRequest:
        """The API's values (positional in `names` order, or by name) -> an engine request;
        InputError for a bad knob value, or for values that are not this API's. A named voice
        is one `viewer` may use (VoiceNotFound otherwise). `task_type`: the served
        checkpoint's; other than Base, the voice is `speaker` / `instructions` (no clip)."""
        try:
            values = self.signature.bind(*inputs, **named).arguments
        except TypeError as exc:
            raise InputError(f"This API takes {', '.join(self.names)}: {exc}.") from None
        knobs = parse_knobs(values, self.knobs)  # InputError naming the knob
        params = SynthesisParams(values.get("language") or "auto", **knobs)
        text, voice = values["text"], values.get("voice")
        spec = model_voice_of(task_type, values.get("speaker"), values.get("instructions"))
        if spec is not None:
            return SynthesisRequest(text, params=params, model_voice=spec)
        if voice:
            if voices is None:
                raise InputError("Named voices are not available here; upload a clip instead.")
            named_voice, clip = voices.load(voice, viewer)
            return SynthesisRequest(text, (SAMPLE_RATE, clip), named_voice.transcript, params)
        return SynthesisRequest(
            text, values.get("reference") or None, values.get("reference_text"), params
        )


def make_request(
    *inputs: Any,
    voices: VoiceRegistry | None = None,
    api: ApiParameters | None = None,
    viewer: Viewer = ANYONE,
    task_type: str = "Base",
    **named: Any,
) -> SynthesisRequest:
    """The API's values (`api`'s parameters, default: every known backend's knobs) -> a
    SynthesisRequest (ApiParameters.request)."""
    return (api or ApiParameters.for_engine()).request(inputs, named, voices, viewer, task_type)


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


def _open(
    engine: Engine,
    inputs: tuple,
    named: dict[str, Any],
    voices: VoiceRegistry | None,
    api: ApiParameters | None,
    viewer: Viewer,
    served_only: bool = False,
) -> StreamHandle:
    """A handle on the API's values' request (`served_only`: the served model's knobs only)."""
    with user_errors():
        api = api or ApiParameters.for_engine(engine)
        task_type = getattr(engine.backend, "task_type", "Base")  # vLLM-Omni's; cloning: Base
        request = make_request(
            *inputs, voices=voices, api=api, viewer=viewer, task_type=task_type, **named
        )
        if served_only:
            request.params = request.params.only(served_knobs(engine.backend))
        return api.open(engine, request)


def stream_to_page(
    engine: Engine,
    *inputs: Any,
    voices: VoiceRegistry | None = None,
    api: ApiParameters | None = None,
    viewer: Viewer = ANYONE,
    **named: Any,
) -> Iterator[tuple]:
    """Outputs: live audio, full clip, stats (the page's stats panel draws them)."""
    skip = gr.skip()
    # the page sends its hidden controls too: only the served model's knobs are set
    handle = _open(engine, inputs, named, voices, api, viewer, served_only=True)
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
    engine: Engine,
    *inputs: Any,
    voices: VoiceRegistry | None = None,
    api: ApiParameters | None = None,
    viewer: Viewer = ANYONE,
    **named: Any,
) -> Iterator[tuple]:
    """/synthesize: one (chunk WAV, stats) per chunk; the last one's stats have done=true."""
    handle = _open(engine, inputs, named, voices, api, viewer)
    try:
        for event in _events_with_timeouts(handle):
            if event is None:
                continue
            audio = (engine.sample_rate, to_int16(event.audio)) if event.audio.size else None
            yield audio, event.stats
    finally:
        handle.cancel()


def synthesize_full(
    engine: Engine,
    *inputs: Any,
    voices: VoiceRegistry | None = None,
    api: ApiParameters | None = None,
    viewer: Viewer = ANYONE,
    **named: Any,
) -> Iterator[tuple]:
    """/synthesize_full: the finished clip (WAV) and the final stats (`predict` returns them).
    It yields `gr.skip()` while it works: Gradio notices a lost client, and stops a job, only
    between messages, so a Stop or a lost client ends it within PUBLISH_NUDGE_S."""
    skip = gr.skip()
    handle = _open(engine, inputs, named, voices, api, viewer)
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


def bind(
    fn: Callable,
    slot: EngineSlot,
    voices: VoiceRegistry | None,
    api: ApiParameters | None = None,
) -> Callable[..., Iterator]:
    """fn(engine, *inputs, voices=, api=) -> a Gradio handler that takes the engine from `slot`
    per request, with `api`'s signature (gradio_client calls by its names). It stays a
    generator: Gradio decides streaming from that. Its callers have no owner key (ANYONE)."""
    api = api or ApiParameters.for_engine()

    def handler(*inputs: Any) -> Iterator:
        with user_errors():
            engine = slot.engine  # ModelLoading while the model loads
        yield from fn(engine, *inputs, voices=voices, api=api)

    handler.__signature__ = api.signature
    handler.__name__ = handler.__qualname__ = fn.__name__
    handler.__doc__ = fn.__doc__
    return handler


def bind_page(
    slot: EngineSlot, voices: VoiceRegistry | None, api: ApiParameters | None = None
) -> Callable[..., Iterator]:
    """The page's own Generate for the standard player: stream_to_page on the API's inputs
    and, after them, the browser's owner key (the voices it may use). Its first yield clears
    the last run's full clip, so no stale clip stays next to this run's outcome; an error
    (the model still loading included) also reaches the stats panel as {"error": message}
    before it is raised (Gradio shows it in a toast)."""
    api = api or ApiParameters.for_engine()
    key = inspect.Parameter(OWNER_KEY, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None)
    signature = api.signature.replace(parameters=[*api.signature.parameters.values(), key])

    def stream_page(*inputs: Any) -> Iterator:
        *values, owner_key = inputs
        viewer = Viewer(owner_key=owner_key if isinstance(owner_key, str) and owner_key else None)
        skip = gr.skip()
        yield skip, None, skip
        try:
            with user_errors():
                engine = slot.engine  # ModelLoading while the model loads
            yield from stream_to_page(engine, *values, voices=voices, api=api, viewer=viewer)
        except gr.Error as exc:
            # "at": the same error twice is still a new value for the panel's change event
            yield skip, skip, {"error": exc.message, "at": time.time()}
            raise

    stream_page.__signature__ = signature
    return stream_page
