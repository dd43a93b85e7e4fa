"""tts_core: streaming voice-cloning TTS engine.

Public API (imported lazily, so `import tts_core` stays cheap and free of side effects):
    load_model(name_or_path, device="cpu", dtype=torch.float32) -> Qwen3TTSModel,
        VoxCPMModel, ChatterboxTurboModel or ChatterboxEnglishModel, chosen by the checkpoint's
        files (tts_core.models.registry); every one takes the same calls (models/contract.py):
        voice = model.create_voice(audio, sr, ref_text=None)  # or create_voice("clip.wav")
        stream = model.stream(text, voice, seed=None, <knob>=...)  # stream.seed: the seed used
        result = model.generate(text, voice, seed=None, <knob>=...)  # result.seed
    Qwen3TTSModel, Voice, AudioChunk, GenerationResult (Qwen3-TTS's)
"""

from __future__ import annotations

from .lazy import lazy_exports

_LAZY = {
    "load_model": "tts_core.models.registry",
    "Qwen3TTSModel": "tts_core.models.qwen3_tts.model",
    "Voice": "tts_core.models.qwen3_tts.model",
    "AudioChunk": "tts_core.models.qwen3_tts.model",
    "GenerationResult": "tts_core.models.qwen3_tts.model",
}

__all__ = sorted(_LAZY)
__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
