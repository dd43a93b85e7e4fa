"""The offline voice starts without librosa or numba (issue: cold start).

librosa's first pitch analysis JIT-compiles numba code: on a fresh machine (empty numba cache)
the eSpeak voice was "starting" for minutes after the page was up. The warm-up, and every module
the app imports on its way to serving, must therefore stay clear of both. Each check runs in a
fresh interpreter, since this test process may have imported librosa already (other tests do).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
JIT_MODULES = ("librosa", "numba", "llvmlite")  # llvmlite: numba's compiler
HANG_GUARD_S = 300  # only stops a hung child; nothing here is timed


def imported_in_fresh_process(code: str) -> dict:
    """Run `code` in a new interpreter; returns the JSON it prints last (it must define `out`)."""
    report = f"""
import json, sys
out = {{}}
{code}
out["jit_modules"] = sorted(m for m in sys.modules if m.split(".")[0] in {JIT_MODULES!r})
print(json.dumps(out))
"""
    done = subprocess.run(
        [sys.executable, "-c", report],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=HANG_GUARD_S,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_espeak_warm_up_imports_no_jit() -> None:
    """load_backend("espeak") = EspeakBackend() + warm_up(): pitch calibration and analysis."""
    out = imported_in_fresh_process("""
from tts_core.backends import load_backend
backend, notice = load_backend("espeak")
out["notice"] = notice is not None
out["lines"] = {k: v.base_hz for k, v in backend.pitch_lines().items()}
import numpy as np
from tts_core.backends.espeak_voice import CALIBRATION_TEXT
t = np.arange(48_000) / 24_000
clip = (0.3 * np.sin(2 * np.pi * 220 * t) * (1 - np.cos(2 * np.pi * 4 * t))).astype(np.float32)
out["voice"] = backend.create_voice(clip, None).summary
""")
    assert out["notice"] is False
    assert set(out["lines"]) == {"", "+f3"} and all(hz > 50 for hz in out["lines"].values())
    assert out["voice"]["ref_f0_hz"] is not None and out["voice"]["variant"] == "+f3"
    assert out["jit_modules"] == [], f"the eSpeak start path imported {out['jit_modules']}"


def test_app_start_path_imports_no_jit() -> None:
    """What app.py imports before it serves: the audio, UI and server packages."""
    out = imported_in_fresh_process("""
import app
import tts_core.audio, tts_core.audio.analysis, tts_core.engine, tts_core.server, tts_core.ui
from tts_core.backends import espeak
""")
    assert out["jit_modules"] == [], f"the app's start path imported {out['jit_modules']}"


def test_chatterbox_cloning_imports_no_jit() -> None:
    """Chatterbox's voice encoder trims and transforms the clip with audio.analysis, not librosa
    (whose first use JIT-compiled 17 s on a fresh machine, and whose numba cache crashed when
    processes filled it at once)."""
    out = imported_in_fresh_process("""
import soundfile as sf
from tts_core.models.chatterbox.model import ChatterboxTurboModel
model = ChatterboxTurboModel.from_pretrained("tests/fixtures/chatterbox-turbo-tiny-a")
audio, rate = sf.read("tests/fixtures/chatterbox-ref-44k.wav", dtype="float32")
voice = model.create_voice(audio if audio.ndim == 1 else audio.mean(axis=1), rate)
out["cloned"] = voice is not None
""")
    assert out["cloned"] and out["jit_modules"] == [], out["jit_modules"]
