"""What Chatterbox's reference front end needs beyond the app's own dependencies: scipy
(pyloudnorm's K-weighting filter), installed by `pip install "tts-core[chatterbox]"`. Imported
when a clip is cloned, not at import time, so the app and the other models never load it. (The
VoiceEncoder's trim and STFT, once librosa's, are numpy code in audio.analysis: librosa's numba
JIT cost a fresh machine seconds on the first clone, and its on-disk cache crashed when several
processes filled it at once.)"""

from __future__ import annotations

from types import ModuleType

INSTALL = 'pip install "tts-core[chatterbox]"'


def scipy_signal() -> ModuleType:
    try:
        import scipy.signal as module
    except ImportError as exc:
        raise ImportError(f"cloning a voice for Chatterbox needs scipy: {INSTALL}") from exc
    return module
