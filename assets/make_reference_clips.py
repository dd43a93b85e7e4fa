"""Rebuild the example reference clips (synthetic: eSpeak NG voices, no recordings needed).

Run: .venv/bin/python assets/make_reference_clips.py
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import soundfile as sf

from tts_core.audio import SAMPLE_RATE, resample
from tts_core.backends.espeak_lib import PARAM_PITCH, PARAM_RATE, get_library

CLIPS = {
    "reference_female_en.wav": (
        "en-us+f3",
        60,
        150,
        "This is a short sample of a calm, clear voice.",
    ),
    "reference_male_en.wav": ("en", 30, 135, "Here is another voice, a little lower and slower."),
}


def main() -> None:
    lib = get_library()
    for name, (voice, pitch, rate, text) in CLIPS.items():
        pieces: list[np.ndarray] = []
        settings = {PARAM_PITCH: pitch, PARAM_RATE: rate}
        lib.synthesize(text, voice, settings, lambda a, out=pieces: out.append(a) or True)
        audio = resample(np.concatenate(pieces), lib.sample_rate, SAMPLE_RATE)
        path = Path(__file__).parent / name
        sf.write(path, audio, SAMPLE_RATE, subtype="PCM_16")
        print(f"{path}: {audio.size / SAMPLE_RATE:.2f} s")


if __name__ == "__main__":
    main()
