"""Chatterbox Turbo (Resemble AI, MIT) in our own PyTorch (issue #25): T3 on GPT-2, the S3Gen
meanflow flow and HiFT vocoder, the VoiceEncoder, S3 tokenizer and CAMPPlus for cloning, and
conds.pt as the built-in voice; equal to the official chatterbox-tts 0.1.7 on float32 CPU.
The original English model (Llama T3 with CFG, perceiver, exaggeration; S3Gen's 10-step CFM with
CFG) shares those modules: english.py, english_t3.py."""

from ...lazy import lazy_exports

# name -> its module, imported on first use: the package itself imports no torch, so the
# backends read their knob defaults (chunking.py, config.py) without loading the model's code
_EXPORTS = {
    "ChatterboxEnglishModel": ".english",
    "ChatterboxTurboModel": ".model",
    "ChatterboxVoice": ".voice",
    "EnglishResult": ".english",
    "EnglishSampling": ".english_t3",
    "TurboResult": ".model",
    "TurboSampling": ".sampling",
    "VoiceFileError": ".voice",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
