"""The process-wide engine cache: one engine per (model, device), built once, thread-safely."""

from __future__ import annotations

import threading

from .engine import Engine, EngineConfig

_engines: dict[tuple[str, str], Engine] = {}
_lock = threading.Lock()


def get_engine(
    model: str = "espeak",
    device: str = "auto",
    config: EngineConfig | None = None,
    allow_fallback: bool = True,
    dtype: str = "auto",
    quantize: str = "auto",
    max_batch: int | None = None,
) -> Engine:
    """The cached engine for (model, device); the first call loads the backend (in `dtype`,
    with `quantize`, decoding up to `max_batch` streams together: see Qwen3Backend.load).

    With allow_fallback, a model that cannot be loaded (no weights, no network) gives the
    offline eSpeak voice instead, and `engine.notice` says why.
    """
    from ..backends import load_backend  # deferred: backends import engine types

    key = (model, device)
    with _lock:  # held while loading so two first requests never load the model twice
        engine = _engines.get(key)
        if engine is None:
            backend, notice = load_backend(model, device, allow_fallback=allow_fallback,
                                           dtype=dtype, quantize=quantize, max_batch=max_batch)  # fmt: skip
            engine = Engine(backend, config, notice)
            _engines[key] = engine
        return engine


def clear_engines() -> None:
    """Forget cached engines (tests)."""
    with _lock:
        _engines.clear()
