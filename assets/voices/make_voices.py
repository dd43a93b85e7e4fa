"""Rebuild the built-in voices behind OpenAI's stock voice names (synthetic eSpeak NG clips);
the recorded voices in voices.json (`"recorded": true`, CMU ARCTIC) are kept untouched.

We have no recordings of OpenAI's voices and no network, so each name gets a distinct ~3 s
clip spoken by eSpeak NG with its own variant, pitch, pitch range and rate. They are reference
clips: the neural model clones their (robotic) timbre; the eSpeak backend takes their pitch and
rate. They do NOT sound like OpenAI's voices. Output: 24 kHz 16-bit mono WAV + voices.json.

Run: .venv/bin/python assets/voices/make_voices.py
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import soundfile as sf

from tts_core.audio import SAMPLE_RATE, resample
from tts_core.backends.espeak_lib import PARAM_PITCH, PARAM_RANGE, PARAM_RATE, get_library

FOLDER = Path(__file__).resolve().parent
TEXT = "Hello. This is a short sample of my voice."
# name: (eSpeak voice+variant, pitch 0-100, pitch range 0-100, words per minute, description)
VOICES = {
    "alloy": ("en-us+m3", 45, 40, 165, "neutral mid-pitched, American English"),
    "ash": ("en-us+m1", 30, 50, 170, "low male, American English"),
    "ballad": ("en-gb-x-rp+m7", 40, 70, 150, "expressive male, British English"),
    "coral": ("en-us+f2", 65, 60, 175, "bright female, American English"),
    "echo": ("en-us+m2", 35, 30, 160, "calm male, American English"),
    "fable": ("en+m4", 50, 60, 160, "male storyteller, British English"),
    "onyx": ("en-us+m5", 15, 35, 150, "deep male, American English"),
    "nova": ("en-us+f1", 70, 55, 180, "warm female, American English"),
    "sage": ("en+f4", 55, 35, 155, "measured female, British English"),
    "shimmer": ("en-us+f5", 80, 65, 170, "light high female, American English"),
    "verse": ("en-gb-scotland+m6", 45, 65, 165, "lively male, Scottish English"),
}


def synthesize(voice: str, pitch: int, pitch_range: int, rate: int) -> np.ndarray:
    lib = get_library()
    pieces: list[np.ndarray] = []
    settings = {PARAM_PITCH: pitch, PARAM_RANGE: pitch_range, PARAM_RATE: rate}
    lib.synthesize(TEXT, voice, settings, lambda a: pieces.append(a) or True)
    audio = resample(np.concatenate(pieces), lib.sample_rate, SAMPLE_RATE)
    return (0.8 * audio / max(1e-6, float(np.max(np.abs(audio))))).astype(np.float32)


def main() -> None:
    # the real recordings (CMU ARCTIC) are kept as they are, first: they are the page's default
    old = json.loads((FOLDER / "voices.json").read_text())
    manifest = {name: entry for name, entry in old.items() if entry.get("recorded")}
    for name, (voice, pitch, pitch_range, rate, description) in VOICES.items():
        audio = synthesize(voice, pitch, pitch_range, rate)
        sf.write(FOLDER / f"{name}.wav", audio, SAMPLE_RATE, subtype="PCM_16")
        manifest[name] = {
            "file": f"{name}.wav",
            "transcript": TEXT,
            "description": f"{description} (synthetic eSpeak NG '{voice}', not OpenAI's voice)",
        }
        print(f"{name}: {audio.size / SAMPLE_RATE:.2f} s ({voice}, pitch {pitch}, {rate} wpm)")
    text = json.dumps(manifest, indent=2, ensure_ascii=False) + "\n"
    (FOLDER / "voices.json").write_text(text)


if __name__ == "__main__":
    main()
