"""ctypes binding of libespeak-ng (from the espeakng-loader wheel), synchronous retrieval mode.

eSpeak NG keeps global state (voice, parameters, one callback) and is not thread-safe, so one
process-wide lock serializes every call. `synthesize` runs one phrase and hands each short
buffer to `on_audio` the moment the library produces it (on the calling thread). Each synthesis
starts from the waveform generator's fresh state, so one text always gives the same samples.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable
from ctypes import c_char_p, c_int, c_size_t, c_uint, c_void_p

import numpy as np

from .espeak_state import WavegenState

AUDIO_OUTPUT_SYNCHRONOUS = 2  # espeak_AUDIO_OUTPUT: synth calls block and use the callback
POS_CHARACTER = 1
CHARS_UTF8 = 1
ENDPAUSE = 0x1000  # add the normal sentence-end pause
PARAM_RATE, PARAM_VOLUME, PARAM_PITCH, PARAM_RANGE = 1, 2, 3, 4
SETTABLE = (PARAM_RATE, PARAM_VOLUME, PARAM_PITCH, PARAM_RANGE)  # reset to defaults when not given
BUFFER_MS = 40  # length of each callback buffer: the streaming granularity

_Callback = ctypes.CFUNCTYPE(c_int, ctypes.POINTER(ctypes.c_short), c_int, c_void_p)


class EspeakError(RuntimeError):
    pass


class EspeakLibrary:
    """The loaded library. Use `get_library()`; all methods take the lock themselves."""

    def __init__(self) -> None:
        import espeakng_loader  # deferred: no library loading at import time

        self.lock = threading.Lock()
        self.path = espeakng_loader.get_library_path()
        self._lib = ctypes.CDLL(self.path)
        self._declare()
        data = espeakng_loader.get_data_path().encode()
        rate = self._lib.espeak_Initialize(AUDIO_OUTPUT_SYNCHRONOUS, BUFFER_MS, data, 0)
        if rate <= 0:
            raise EspeakError(f"espeak_Initialize failed ({rate})")
        self.sample_rate = int(rate)  # 22050 for the bundled voices
        self.wavegen = WavegenState(self._lib, self.path)  # snapshot now: no synthesis has run yet
        # eSpeak keeps a parameter set once; a synthesis sets every one, the ones it is not
        # given to these defaults, so its samples depend on its own settings, not on the last
        self.defaults = {
            parameter: int(self._lib.espeak_GetParameter(parameter, 0)) for parameter in SETTABLE
        }
        self._sink: Callable[[np.ndarray], bool] | None = None
        self._callback = _Callback(self._on_buffer)  # kept referenced: C holds the pointer
        self._lib.espeak_SetSynthCallback(self._callback)
        version = ctypes.c_char_p()
        self._lib.espeak_Info.restype = ctypes.c_char_p
        self.version = (self._lib.espeak_Info(ctypes.byref(version)) or b"?").decode()

    def _declare(self) -> None:
        lib = self._lib
        lib.espeak_Initialize.argtypes = [c_int, c_int, c_char_p, c_int]
        lib.espeak_Initialize.restype = c_int
        lib.espeak_SetSynthCallback.argtypes = [_Callback]
        lib.espeak_SetVoiceByName.argtypes = [c_char_p]
        lib.espeak_SetParameter.argtypes = [c_int, c_int, c_int]
        lib.espeak_GetParameter.argtypes = [c_int, c_int]
        lib.espeak_GetParameter.restype = c_int
        lib.espeak_Synth.argtypes = [
            c_void_p,
            c_size_t,
            c_uint,
            c_int,
            c_uint,
            c_uint,
            c_void_p,
            c_void_p,
        ]
        lib.espeak_Synth.restype = c_int

    def _on_buffer(self, wav, count, _events) -> int:  # noqa: ANN001 - ctypes signature
        if count <= 0 or not wav or self._sink is None:
            return 0
        samples = np.ctypeslib.as_array(wav, shape=(count,)).astype(np.float32) / 32768.0
        return 0 if self._sink(samples) else 1  # 1 tells eSpeak to abort this synthesis

    def synthesize(
        self,
        text: str,
        voice: str,
        settings: dict[int, int],
        on_audio: Callable[[np.ndarray], bool],
    ) -> None:
        """Speak `text`; `on_audio(samples)` gets float32 buffers and returns False to abort."""
        payload = text.encode("utf-8") + b"\0"
        with self.lock:
            if self._lib.espeak_SetVoiceByName(voice.encode()) != 0:
                raise EspeakError(f"eSpeak NG has no voice '{voice}'")
            for parameter, value in {**self.defaults, **settings}.items():
                self._lib.espeak_SetParameter(parameter, int(value), 0)
            self.wavegen.restore()  # same text and settings -> same samples (see espeak_state)
            self._sink = on_audio
            try:
                flags = CHARS_UTF8 | ENDPAUSE
                self._lib.espeak_Synth(
                    payload, len(payload), 0, POS_CHARACTER, 0, flags, None, None
                )
            finally:
                self._sink = None


_library: EspeakLibrary | None = None
_library_lock = threading.Lock()


def get_library() -> EspeakLibrary:
    global _library
    with _library_lock:
        if _library is None:
            _library = EspeakLibrary()
        return _library
