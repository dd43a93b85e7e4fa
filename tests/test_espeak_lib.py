"""eSpeak NG gives the same samples for the same text and settings, call after call (issue 39
item 7). The library keeps waveform state in C statics between syntheses (the pitch-flutter
phase, the roughness cycle count, the gain, the breath noise's generator: see
tts_core/backends/espeak_state.py); before the reset, "Hello world." came out 23190, 23193,
23208, ... samples long in one process. A fresh process is the reference: its first synthesis
is what every later one must repeat.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("espeakng_loader")

from tts_core.backends.espeak_lib import PARAM_PITCH, PARAM_RANGE, PARAM_RATE, get_library  # noqa: E402
from tts_core.backends.espeak_state import WAVEGEN_STATICS, elf_symbols  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
HANG_GUARD_S = 300  # only stops a hung child; nothing here is timed
TEXT = "Hello world."
PLAIN, BREATHY = "en-us", "en-us+f3"  # +f3 has breath noise, echo and roughness 4


def speak(voice: str, text: str = TEXT, pitch: int = 50) -> np.ndarray:
    pieces: list[np.ndarray] = []
    get_library().synthesize(text, voice, {PARAM_PITCH: pitch}, lambda a: pieces.append(a) or True)
    return np.concatenate(pieces)


def digest(voice: str) -> str:
    return hashlib.sha256(speak(voice).tobytes()).hexdigest()


def test_the_wheels_library_names_the_state_it_carries():
    """If a new wheel were stripped or renamed a static, the reset would silently do nothing."""
    assert get_library().wavegen.complete
    symbols = elf_symbols(get_library().path)
    assert all(len(symbols[name]) == 1 for name in WAVEGEN_STATICS)


@pytest.mark.parametrize("voice", [PLAIN, BREATHY])
def test_same_text_same_samples_in_a_process(voice):
    first = speak(voice)
    speak(BREATHY if voice == PLAIN else PLAIN, "Something else in between, a little longer.")
    again = [speak(voice) for _ in range(3)]  # the old code gave 3 different lengths here
    assert all(a.tobytes() == first.tobytes() for a in again)


def test_settings_of_an_earlier_call_do_not_carry_over():
    """eSpeak keeps a parameter once set: a call that leaves rate and range out must get the
    defaults, not the last caller's (a full run's earlier tests set them and the fresh-process
    comparison below failed)."""
    first = speak(PLAIN)
    get_library().synthesize(
        "Fast and flat.", PLAIN, {PARAM_RATE: 400, PARAM_RANGE: 5}, lambda a: True
    )
    assert speak(PLAIN).tobytes() == first.tobytes()


def test_a_fresh_process_gives_the_same_samples():
    here = {voice: digest(voice) for voice in (PLAIN, BREATHY, PLAIN)}
    code = (
        "from test_espeak_lib import digest, PLAIN, BREATHY; print(digest(PLAIN), digest(BREATHY))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT / "tests",
        capture_output=True,
        text=True,
        timeout=HANG_GUARD_S,
        env=_env(),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == [here[PLAIN], here[BREATHY]]


def _env() -> dict[str, str]:
    paths = [str(ROOT), str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
