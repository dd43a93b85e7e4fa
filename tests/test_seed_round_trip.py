"""The seed a user can repeat (issue 39 item 7), on every tiny checkpoint: a run without a seed
draws one (models/contract.py `resolve_seed`, the one place), reports it (the library's
`stream(...).seed` / `result.seed`, the `/v1/audio/speech` header X-Seed, the engine's stats
dict that the page and gradio_client carry: key "seed"), and passing it back gives the same
audio byte for byte. Same process, same device (CPU) and torch thread count: that is what the
round trip promises. eSpeak reads no seed; it reports the seed the request carried, and its
audio for one text is the same on every call and in every process.
"""

from __future__ import annotations

import base64
import hashlib
import os
import subprocess
import sys
from pathlib import Path

import httpx  # noqa: I001 - after the test helpers, as tests/test_openai_api.py
import numpy as np
import pytest
import soundfile as sf
from test_openai_api import make_api, serve

import tts_core
from tts_core.backends import load_backend
from tts_core.engine import Engine, EngineConfig, SynthesisParams
from tts_core.engine.requests import SynthesisRequest
from tts_core.models.contract import resolve_seed

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"
HANG_GUARD_S = 300  # only stops a hung child; nothing here is timed
SHORT_CLIP = FIXTURES / "ref_clip_24k.wav"  # 3 s: VoxCPM2 tiny holds 4096 positions
LONG_CLIP = FIXTURES / "chatterbox-ref-44k.wav"  # 7 s: Chatterbox Turbo needs > 5 s
TEXT = "Hello world."
# (folder, clip, the model's own length cap: keeps a random tiny model short; not a knob)
CASES = [
    ("qwen3-tiny-a", SHORT_CLIP, {"max_new_tokens": 12}),
    ("voxcpm2-tiny", SHORT_CLIP, {"max_len": 12}),
    ("chatterbox-turbo-tiny-a", LONG_CLIP, {"max_new_tokens": 12}),
    ("chatterbox-english-tiny-a", LONG_CLIP, {"max_new_tokens": 12}),
]
IDS = [case[0] for case in CASES]


def test_no_seed_is_drawn_in_range_and_a_given_one_is_kept():
    drawn = {resolve_seed(None) for _ in range(4)} | {resolve_seed(-1)}
    assert all(isinstance(seed, int) and 0 <= seed < 2**32 for seed in drawn)
    assert resolve_seed(0) == 0 and resolve_seed(2**32 - 1) == 2**32 - 1
    for bad in (2**32, -2, 1.5, True):
        with pytest.raises(ValueError, match="seed"):
            resolve_seed(bad)


@pytest.mark.parametrize(("folder", "clip", "cap"), CASES, ids=IDS)
def test_library_round_trip(folder, clip, cap):
    model = tts_core.load_model(FIXTURES / folder)
    voice = model.create_voice(clip)
    stream = model.stream(TEXT, voice, **cap)  # no seed: a random one
    first = np.concatenate([chunk.audio for chunk in stream])
    assert isinstance(stream.seed, int)
    again = model.stream(TEXT, voice, seed=stream.seed, **cap)
    assert np.concatenate([chunk.audio for chunk in again]).tobytes() == first.tobytes()
    result = model.generate(TEXT, voice, **cap)
    assert model.generate(TEXT, voice, seed=result.seed, **cap).audio.tobytes() == (
        result.audio.tobytes()
    )


def _speech(url: str, clip: Path, **body) -> httpx.Response:
    audio = "data:audio/wav;base64," + base64.b64encode(clip.read_bytes()).decode()
    body = {"model": "tts-1", "input": TEXT, "response_format": "pcm", "ref_audio": audio, **body}
    response = httpx.post(f"{url}/v1/audio/speech", json=body, timeout=600)
    assert response.status_code == 200, response.text[:300]
    return response


@pytest.mark.parametrize(("folder", "clip"), [case[:2] for case in CASES], ids=IDS)
def test_v1_and_engine_stats_round_trip(folder, clip, tmp_path):
    backend, notice = load_backend(
        str(FIXTURES / folder), "cpu", allow_fallback=False, quantize="none"
    )
    assert notice is None
    engine = Engine(backend, EngineConfig(max_concurrent=1, max_queue=4))
    try:
        with serve(make_api(engine, tmp_path)) as url:
            random_run = _speech(url, clip)
            seed = int(random_run.headers["x-seed"])
            repeated = _speech(url, clip, seed=seed)
            assert repeated.headers["x-seed"] == str(seed)
            assert repeated.content == random_run.content
        # the stats dict the page's panel and gradio_client's result carry
        samples, rate = sf.read(clip, dtype="float32")
        request = SynthesisRequest(TEXT, reference=(rate, samples))
        audio, stats = engine.synthesize(request)
        assert isinstance(stats["seed"], int)
        seeded = SynthesisRequest(
            TEXT, reference=(rate, samples), params=SynthesisParams(seed=stats["seed"])
        )
        repeated_audio, repeated_stats = engine.synthesize(seeded)
        assert repeated_stats["seed"] == stats["seed"]
        assert repeated_audio.tobytes() == audio.tobytes()
    finally:
        close = getattr(backend, "close", None)
        if close is not None:
            close()


def _espeak_runs(espeak_backend, tmp_path, seeds) -> list[httpx.Response]:
    engine = Engine(espeak_backend, EngineConfig(max_concurrent=1, max_queue=4))
    with serve(make_api(engine, tmp_path)) as url:
        body = {"model": "tts-1", "input": TEXT, "response_format": "pcm", "voice": "alloy"}
        runs = [
            httpx.post(f"{url}/v1/audio/speech", json={**body, "seed": seed}, timeout=120)
            for seed in seeds
        ]
    assert [run.status_code for run in runs] == [200] * len(seeds)
    return runs


def test_espeak_reports_the_seed_it_was_given(espeak_backend, tmp_path):
    runs = _espeak_runs(espeak_backend, tmp_path, (1, 2))
    assert [run.headers["x-seed"] for run in runs] == ["1", "2"]


def test_espeak_repeats_a_seed(espeak_backend, tmp_path):
    """eSpeak reads no seed; its audio is the same anyway: the library's carried waveform state
    is reset before each synthesis (tts_core/backends/espeak_state.py). Twice here, and once in
    a fresh process whose history differs (only the warm-up before it)."""
    runs = _espeak_runs(espeak_backend, tmp_path, (1, 1))
    assert runs[0].content == runs[1].content
    assert _espeak_run_in_a_fresh_process() == hashlib.sha256(runs[0].content).hexdigest()


def _espeak_run_in_a_fresh_process() -> str:
    code = """
import hashlib, pathlib, tempfile
from test_seed_round_trip import _espeak_runs
from tts_core.backends.espeak import EspeakBackend
backend = EspeakBackend()
backend.warm_up()
with tempfile.TemporaryDirectory() as folder:
    print(hashlib.sha256(_espeak_runs(backend, pathlib.Path(folder), (1,))[0].content).hexdigest())
"""
    paths = [str(ROOT), str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
        timeout=HANG_GUARD_S,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-1]
