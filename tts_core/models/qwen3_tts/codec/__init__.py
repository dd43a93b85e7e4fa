"""The Qwen3-TTS 12 Hz speech tokenizer (codec): Mimi-style encoder and an exact streaming decoder."""

from .config import (
    CodecConfigError,
    CodecDecoderConfig,
    MimiEncoderConfig,
    SpeechTokenizerConfig,
    load_speech_tokenizer_config,
)
from .decoder import CodecDecoder
from .speech_tokenizer import CodecCheckpointError, SpeechTokenizer
from .streaming import DecoderState

__all__ = [
    "CodecCheckpointError",
    "CodecConfigError",
    "CodecDecoder",
    "CodecDecoderConfig",
    "DecoderState",
    "MimiEncoderConfig",
    "SpeechTokenizer",
    "SpeechTokenizerConfig",
    "load_speech_tokenizer_config",
]
