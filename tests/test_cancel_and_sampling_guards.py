"""A Stop frees the neural model within one frame; sampling values at the edge of float32
cannot crash a response halfway; ffmpeg is never taken from a folder another user can plant."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import soundfile as sf
import torch

from tts_core.engine import Engine, EngineConfig, SynthesisParams, SynthesisRequest
from tts_core.models.qwen3_tts.sampling import SamplingParams, TalkerSampler, draw

FIXTURES = Path(__file__).resolve().parent / "fixtures"
CHECKPOINT = FIXTURES / "qwen3-tiny-a"
TEXT = "A sentence long enough for many frames of speech from the tiny model."


@pytest.fixture(scope="module")
def tiny_backend():
    if not (CHECKPOINT / "config.json").is_file():
        pytest.skip("tests/fixtures/qwen3-tiny-a is not there")
    from tts_core.backends.qwen3 import Qwen3Backend

    return Qwen3Backend.load(str(CHECKPOINT), "cpu")


@pytest.fixture(scope="module")
def reference() -> tuple[int, object]:
    audio, rate = sf.read(FIXTURES / "ref_clip_24k.wav", dtype="float32")
    return rate, audio


def test_model_stops_within_one_frame_of_should_stop(tiny_backend, reference):
    """The backend asked for cancel once per chunk: a 50-frame chunk ran to its end."""
    model = tiny_backend.model
    voice = model.create_voice(reference[1], reference[0])
    asked = []

    def should_stop() -> bool:
        asked.append(1)
        return len(asked) > 3  # stop after the third frame

    chunks = list(
        model.stream(
            TEXT,
            voice,
            first_chunk_frames=50,
            chunk_frames=50,
            greedy=True,
            should_stop=should_stop,
        )
    )
    assert chunks == [] and len(asked) == 4  # no chunk: three frames made, none decoded
    full = list(model.stream(TEXT, voice, first_chunk_frames=50, chunk_frames=50, greedy=True))
    assert sum(c.frames for c in full) > 4  # without the stop it goes on


def test_stop_during_the_first_chunk_ends_as_cancelled(tiny_backend, reference):
    """Cancelled before any audio: "cancelled", not "The voice produced no audio"."""
    engine = Engine(tiny_backend, EngineConfig())
    cancel = threading.Event()
    params = SynthesisParams(seed=1, first_chunk_frames=60, chunk_frames=60)
    asked = []
    scheduler = tiny_backend.loop
    real_submit = scheduler.submit

    def counting_submit(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        stop = kwargs["should_stop"]

        def should_stop() -> bool:  # the scheduler asks once per step, i.e. once per frame
            asked.append(1)
            if len(asked) == 2:
                cancel.set()  # Stop pressed while the first frame is made
            return stop()

        kwargs["should_stop"] = should_stop
        return real_submit(*args, **kwargs)

    scheduler.submit = counting_submit
    try:
        events = list(engine.stream(SynthesisRequest(TEXT, reference, None, params), cancel))
    finally:
        del scheduler.submit
    assert [e.stats["stop_reason"] for e in events] == ["cancelled"]
    assert len(asked) == 2 and events[0].audio.size == 0
    assert engine.active_requests == 0
    assert scheduler.active == 0 and scheduler.runner.arena.free_positions == (
        scheduler.runner.capacity
    )  # the row and its cache span were given back


@pytest.mark.parametrize(("temperature", "penalty"), [(1e-45, 1.0), (0.9, 1e-40), (1e-45, 1e-40)])
def test_sampler_survives_values_that_overflow_float32(temperature, penalty):
    """temperature 1e-45 / repetition_penalty 1e-40 passed validation and crashed the sampler
    mid-response (softmax of inf is NaN, multinomial refuses it); now such a row takes its
    argmax, the temperature -> 0 limit."""
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 64, generator=generator) * 5
    params = SamplingParams(
        do_sample=True, temperature=temperature, top_k=10, top_p=0.9, repetition_penalty=penalty
    )
    sampler = TalkerSampler(
        params, eos_id=63, suppressed=torch.tensor([60, 61]), generator=generator, min_new_tokens=0
    )
    history = torch.tensor([[5, 7], [1, 2], [3, 3]])
    ids = sampler(logits, history)
    assert ids.shape == (3,) and bool(((ids >= 0) & (ids < 64)).all())
    direct = draw(logits.clone(), params, generator)
    if penalty == 1.0:
        assert torch.equal(direct, logits.argmax(dim=-1))


def test_sampler_is_unchanged_for_ordinary_values():
    logits = torch.randn(4, 128, generator=torch.Generator().manual_seed(1))
    params = SamplingParams(do_sample=True, temperature=0.9, top_k=50, top_p=0.95)
    a = draw(logits, params, torch.Generator().manual_seed(7))
    probs = torch.nn.functional.softmax(logits / 0.9, dim=-1)  # same warps, by hand
    kth = torch.topk(logits / 0.9, 50)[0][..., -1, None]
    warped = (logits / 0.9).masked_fill(logits / 0.9 < kth, float("-inf"))
    from tts_core.models.qwen3_tts.sampling import top_p

    probs = top_p(warped, 0.95).softmax(dim=-1)
    b = torch.multinomial(probs, 1, generator=torch.Generator().manual_seed(7)).squeeze(1)
    assert torch.equal(a, b)


def test_non_finite_sampling_parameters_are_refused():
    with pytest.raises(ValueError, match="finite"):
        SamplingParams(do_sample=True, temperature=float("nan"), top_k=0, top_p=1.0)


def test_ffmpeg_is_not_taken_from_a_planted_folder(tmp_path):
    """$TMPDIR/tts_core-ffmpeg-<uid> had a predictable name and was put first on PATH
    without an ownership check: whatever another user planted there ran as us."""
    planted = tmp_path / f"tts_core-ffmpeg-{os.getuid()}"
    planted.mkdir()
    for name in ("ffmpeg", "ffprobe"):
        (planted / name).write_text("#!/bin/sh\necho planted\n")
        (planted / name).chmod(0o777)
    script = (
        "import os, shutil, stat\n"
        "from tts_core.audio.ffmpeg import ensure_ffmpeg_on_path\n"
        "found = ensure_ffmpeg_on_path()\n"
        "folder = os.path.dirname(shutil.which('ffmpeg'))\n"
        "info = os.stat(folder)\n"
        "print(found, shutil.which('ffprobe'), folder, oct(stat.S_IMODE(info.st_mode)),"
        " info.st_uid == os.getuid())\n"
    )
    empty = tmp_path / "empty"
    empty.mkdir()  # no system ffmpeg on PATH: the wheel's binary must be linked somewhere
    env = {**os.environ, "TMPDIR": str(tmp_path), "PATH": str(empty)}
    done = subprocess.run(
        [sys.executable, "-c", script],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    found, ffprobe, folder, mode, owned = done.stdout.split()
    assert str(planted) not in (found, ffprobe, folder)
    assert mode == "0o700" and owned == "True"
    assert not Path(folder).exists()  # removed when the process ended
