"""Chatterbox Turbo (Resemble AI, MIT) in our own PyTorch (issue #25): T3 on GPT-2, the S3Gen
meanflow flow and HiFT vocoder, the VoiceEncoder, S3 tokenizer and CAMPPlus for cloning, and
conds.pt as the built-in voice; equal to the official chatterbox-tts 0.1.7 on float32 CPU.
The original English model (Llama T3 with CFG, perceiver, exaggeration; S3Gen's 10-step CFM with
CFG) shares those modules: english.py, english_t3.py."""

from .english import ChatterboxEnglishModel, EnglishResult
from .english_t3 import EnglishSampling
from .model import ChatterboxTurboModel, TurboResult
from .sampling import TurboSampling
from .voice import ChatterboxVoice, VoiceFileError

__all__ = [
    "ChatterboxEnglishModel",
    "ChatterboxTurboModel",
    "ChatterboxVoice",
    "EnglishResult",
    "EnglishSampling",
    "TurboResult",
    "TurboSampling",
    "VoiceFileError",
]
