"""Requests, streaming, stats and concurrency: the one process-wide engine."""

from .backend import LANGUAGES, PARAM_FIELDS, Backend, BackendChunk, SynthesisParams, Voice
from .engine import Engine, EngineConfig, EngineStream, StreamEvent, SynthesisRequest
from .errors import BackendError, EngineBusy, InputError
from .handle import StreamHandle
from .registry import clear_engines, get_engine
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
    "EngineStream",
    "InputError",
    "Limits",
    "RequestStats",
    "StreamEvent",
    "StreamHandle",
    "PARAM_FIELDS",
    "SynthesisParams",
    "SynthesisRequest",
    "Voice",
    "clear_engines",
    "get_engine",
]
