"""Requests, admission, streaming and stats: the engine, and the slot that holds it while the
model loads."""

from .backend import LANGUAGES, PARAM_FIELDS, Backend, BackendChunk, SynthesisParams, Voice
from .engine import Engine, EngineConfig, EngineStream, StreamEvent, SynthesisRequest
from .errors import BackendError, EngineBusy, InputError
from .handle import StreamHandle
from .loading import EngineSlot, LoadProgress, ModelLoading
from .stats import RequestStats
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
    "Limits",
    "LoadProgress",
    "ModelLoading",
    "RequestStats",
    "StreamEvent",
    "StreamHandle",
    "PARAM_FIELDS",
    "SynthesisParams",
    "SynthesisRequest",
    "Voice",
]
