"""tts_core: streaming voice-cloning TTS engine.

Public API (imported lazily, so `import tts_core` stays cheap and free of side effects):
    load_model(name_or_path, device="cpu", dtype=torch.float32) -> Qwen3TTSModel or
        VoxCPMModel, chosen by the checkpoint's config.json (tts_core.models.registry)
    Qwen3TTSModel, Voice, AudioChunk, GenerationResult (Qwen3-TTS's)
"""

from __future__ import annotations

from typing import Any

_LAZY = {
    "load_model": "tts_core.models.registry",
    "Qwen3TTSModel": "tts_core.models.qwen3_tts.model",
    "Voice": "tts_core.models.qwen3_tts.model",
    "AudioChunk": "tts_core.models.qwen3_tts.model",
    "GenerationResult": "tts_core.models.qwen3_tts.model",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'tts_core' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
