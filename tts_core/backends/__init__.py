"""Voice backends and the loader that picks one (with the offline fallback)."""

from __future__ import annotations

import logging

from ..engine.backend import Backend

log = logging.getLogger(__name__)

ESPEAK = "espeak"


def load_backend(
    name: str,
    device: str = "auto",
    allow_fallback: bool = True,
    dtype: str = "auto",
    quantize: str = "auto",
    max_batch: int | None = None,
) -> tuple[Backend, str | None]:
    """(backend, notice). `name` is "espeak" or a Hub repo id / local folder of a Qwen3-TTS or
    VoxCPM2 checkpoint: the backend is chosen from its config.json, not from the name. `dtype`,
    `quantize` and `max_batch` (None: its default) are Qwen3Backend.load's; VoxCPM2 takes
    `dtype` and decodes one stream at a time.

    When the neural model cannot be loaded and `allow_fallback` is set, returns the eSpeak
    backend with a notice saying why (logged too).
    """
    if name == ESPEAK:
        return _espeak(), None
    try:
        return _neural(name, device, dtype, quantize, max_batch), None
    except Exception as exc:  # noqa: BLE001 - any load failure means "use the offline voice"
        if not allow_fallback:
            raise
        first_line = (str(exc).strip().splitlines() or [""])[0]
        reason = f"{type(exc).__name__}: {first_line[:240]}"
        log.warning(
            "Could not load model %r (%s); falling back to the offline eSpeak voice.", name, reason
        )
        notice = (
            f"The neural model '{name}' could not be loaded ({reason}). "
            "You are hearing the offline eSpeak NG voice instead, which does not clone voices."
        )
        return _espeak(), notice


def _neural(name: str, device: str, dtype: str, quantize: str, max_batch: int | None) -> Backend:
    from ..models.registry import VOXCPM2, detect_architecture

    if detect_architecture(name) == VOXCPM2:
        from .voxcpm import VoxCPMBackend

        return VoxCPMBackend.load(name, device, dtype=dtype)
    from .qwen3 import Qwen3Backend

    extra = {} if max_batch is None else {"max_batch": max_batch}
    return Qwen3Backend.load(name, device, dtype=dtype, quantize=quantize, **extra)


def _espeak() -> Backend:
    from .espeak import EspeakBackend

    backend = EspeakBackend()
    backend.warm_up()
    return backend
