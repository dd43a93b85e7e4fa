"""Requests, admission, streaming and stats: the engine, and the slot that holds it while the
model loads."""

from .backend import LANGUAGES, Backend, BackendChunk, SynthesisParams, Voice
from .engine import Engine
from .errors import BackendError, EngineBusy, InputError
from .handle import StreamHandle
from .knobs import SHARED_KNOBS, Knob
from .loading import EngineSlot, LoadProgress, ModelLoading
from .requests import EngineConfig, SynthesisRequest
from .stats import RequestStats
from .streams import EngineStream, StreamEvent
from .validation import Limits

__all__ = [
    "LANGUAGES",
    "Backend",
    "BackendChunk",
    "BackendError",
    "Engine",
    "EngineBusy",
    "EngineConfig",
    "EngineSlot",
    "EngineStream",
    "InputError",
    "Knob",
    "Limits",
    "LoadProgress",
    "ModelLoading",
    "RequestStats",
    "StreamEvent",
    "StreamHandle",
    "SHARED_KNOBS",
    "SynthesisParams",
    "SynthesisRequest",
    "Voice",
]
