"""What Chatterbox's reference front end needs beyond the app's own dependencies: librosa
(the VoiceEncoder's trim and STFT) and scipy (pyloudnorm's K-weighting filter), installed by
`pip install "tts-core[chatterbox]"`. Imported when a clip is cloned, not at import time, so
the app and the other models never load them."""

from __future__ import annotations

from types import ModuleType

INSTALL = 'pip install "tts-core[chatterbox]"'


def librosa() -> ModuleType:
    try:
        import librosa as module
    except ImportError as exc:
        raise ImportError(f"cloning a voice for Chatterbox needs librosa: {INSTALL}") from exc
    return module


def scipy_signal() -> ModuleType:
    try:
        import scipy.signal as module
    except ImportError as exc:
        raise ImportError(f"cloning a voice for Chatterbox needs scipy: {INSTALL}") from exc
    return module
