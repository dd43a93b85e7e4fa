"""Chatterbox Turbo (Resemble AI, MIT) in our own PyTorch (issue #25), equal to the official
chatterbox-tts 0.1.7 on float32 CPU: T3 on GPT-2, S3Gen (meanflow flow, HiFT), the cloning front
ends and conds.pt's built-in voice; and the original English model (english.py, english_t3.py:
Llama T3 with CFG, S3Gen's 10-step CFM), which shares the rest."""

from ...lazy import lazy_exports

# name -> its module, imported on first use: the package itself imports no torch, so the
# backends read their knob defaults (chunking.py, config.py) without loading the model's code
_EXPORTS = {
    "ChatterboxEnglishModel": ".english",
    "ChatterboxTurboModel": ".model",
    "ChatterboxVoice": ".voice",
    "EnglishResult": ".english",
    "EnglishSampling": ".sampling",
    "TurboResult": ".model",
    "TurboSampling": ".sampling",
    "VoiceFileError": ".voice",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
