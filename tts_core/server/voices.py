"""Named voices: the built-in ones shipped in assets/voices and the ones users register.

A voice is a reference clip (+ optional transcript) that the engine clones. Built-in voices
carry OpenAI's stock names so unmodified OpenAI clients work. Registered voices are kept on
disk, one folder per voice (`<root>/<name>/reference.wav` + `meta.json`), written to a temp
folder and renamed into place, so they survive a restart and a crash never leaves half a voice.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import soundfile as sf

from ..audio import SAMPLE_RATE, to_int16
from ..engine import InputError, Limits
from ..engine.validation import clean_reference_text, prepare_reference

BUILTIN_FOLDER = Path(__file__).resolve().parents[2] / "assets" / "voices"
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
REFERENCE_FILE, META_FILE = "reference.wav", "meta.json"


@dataclass
class NamedVoice:
    name: str
    reference: Path  # 24 kHz mono WAV
    transcript: str | None
    kind: str  # "builtin" or "custom"
    description: str = ""
    created_at: int = 0

    def as_json(self) -> dict:
        data = asdict(self)
        data.pop("reference")
        return {"id": self.name, "object": "voice", **data}


class VoiceNotFound(KeyError):
    pass


class VoiceRegistry:
    """Built-in voices (read-only) + registered voices under `root` (created on demand)."""

    def __init__(self, root: str | Path, builtin_folder: Path = BUILTIN_FOLDER) -> None:
        self.root = Path(root)
        self._builtin = _load_builtins(builtin_folder)
        self._lock = threading.Lock()

    def names(self) -> list[str]:
        return sorted(self._builtin) + sorted(v.name for v in self._custom())

    def list(self) -> list[NamedVoice]:
        return [self._builtin[n] for n in sorted(self._builtin)] + self._custom()

    def get(self, name: str) -> NamedVoice:
        if name in self._builtin:
            return self._builtin[name]
        if NAME_PATTERN.match(name):
            voice = _read_custom(self.root / name)
            if voice is not None:
                return voice
        raise VoiceNotFound(name)

    def register(
        self,
        name: str,
        audio_source: str | Path | tuple[int, np.ndarray],
        transcript: str | None,
        limits: Limits | None = None,
        replace: bool = False,
    ) -> NamedVoice:
        """Check the clip like a synthesis reference (InputError), then store it under `name`.

        Raises FileExistsError when the name is taken and `replace` is false.
        """
        check_name(name)
        if name in self._builtin:
            raise FileExistsError(f"'{name}' is a built-in voice and cannot be replaced.")
        limits = limits or Limits()
        transcript = clean_reference_text(transcript, limits)
        audio, _notices = prepare_reference(audio_source, limits)
        if audio is None:
            raise InputError("A reference clip is needed to register a voice.")
        with self._lock:
            target = self.root / name
            if target.exists() and not replace:
                raise FileExistsError(f"A voice named '{name}' already exists.")
            self._write(target, name, audio, transcript)
        return self.get(name)

    def delete(self, name: str) -> None:
        if name in self._builtin:
            raise FileExistsError(f"'{name}' is a built-in voice and cannot be deleted.")
        with self._lock:
            self.get(name)  # VoiceNotFound
            shutil.rmtree(self.root / name)

    def _write(self, target: Path, name: str, audio: np.ndarray, transcript: str | None) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=self.root))
        sf.write(staging / REFERENCE_FILE, to_int16(audio), SAMPLE_RATE, subtype="PCM_16")
        meta = {"name": name, "transcript": transcript, "created_at": int(time.time())}
        (staging / META_FILE).write_text(json.dumps(meta, ensure_ascii=False, indent=1))
        if target.exists():
            shutil.rmtree(target)
        staging.rename(target)

    def _custom(self) -> list[NamedVoice]:
        if not self.root.is_dir():
            return []
        found = (_read_custom(p) for p in sorted(self.root.iterdir()) if p.is_dir())
        return [v for v in found if v is not None and v.name not in self._builtin]


def check_name(name: object) -> str:
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        raise InputError(
            "Voice names are 1-64 characters: letters, digits, '_', '-' or '.', "
            "starting with a letter or digit."
        )
    return name


def _read_custom(folder: Path) -> NamedVoice | None:
    meta_path, reference = folder / META_FILE, folder / REFERENCE_FILE
    if folder.name.startswith(".") or not meta_path.is_file() or not reference.is_file():
        return None
    try:
        meta = json.loads(meta_path.read_text())
    except (OSError, ValueError):  # half-written or damaged: skip it, keep serving the rest
        return None
    return NamedVoice(
        name=folder.name,
        reference=reference,
        transcript=meta.get("transcript"),
        kind="custom",
        created_at=int(meta.get("created_at", 0)),
    )


def _load_builtins(folder: Path) -> dict[str, NamedVoice]:
    manifest = folder / "voices.json"
    if not manifest.is_file():
        return {}
    voices = {}
    for name, entry in json.loads(manifest.read_text()).items():
        path = folder / entry["file"]
        if path.is_file():
            voices[name] = NamedVoice(
                name, path, entry.get("transcript"), "builtin", entry.get("description", "")
            )
    return voices
