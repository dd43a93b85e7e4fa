"""Audio stays at the backend's native rate end to end: engine events and stats, the page's
handlers, and every /v1 format (a 48 kHz stand-in backend; eSpeak and Qwen3 speak 24 kHz)."""

from __future__ import annotations

import httpx
import numpy as np
from test_engine import FrameChunks
from test_openai_api import make_api, parse_streamed_wav, serve

from tts_core.engine import Engine, SynthesisParams, SynthesisRequest

RATE = 48_000


class Native48k(FrameChunks):
    """FrameChunks speaking 48 kHz: 3840 samples (80 ms) a frame."""

    sample_rate = RATE
    frame_samples = 3840


def backend() -> Native48k:
    t = np.arange(12 * 3840) / RATE
    signal = (0.5 * np.sin(2 * np.pi * 300 * t)).astype(np.float32)
    return Native48k(signal, first=2, steady=4)


def test_engine_events_and_stats_carry_the_native_rate():
    engine = Engine(backend())
    assert engine.sample_rate == RATE and engine.info()["sample_rate"] == RATE
    events = list(engine.stream(SynthesisRequest("x", None, None, SynthesisParams())))
    audio = np.concatenate([e.audio for e in events])
    stats = events[-1].stats
    assert stats["sample_rate"] == RATE
    assert stats["audio_s"] == round(audio.size / RATE, 4) == 0.96
    fade = 240  # 5 ms at 48 kHz (120 would mean the engine assumed 24 kHz)
    assert events[0].audio.size == 2 * 3840 - fade  # the joiner holds back the fade-out length
    signal = backend().signal
    assert np.array_equal(audio[fade:-fade], signal[fade:-fade])
    assert not np.array_equal(audio[fade // 2 : fade], signal[fade // 2 : fade])


def test_the_page_handler_labels_audio_with_the_native_rate():
    from tts_core.ui import handlers

    engine = Engine(backend())
    outputs = list(handlers.synthesize_full(engine, "Hello", "auto", None, None))
    (rate, samples), stats = outputs[-1]
    assert rate == RATE and samples.size == 12 * 3840 and stats["sample_rate"] == RATE


def test_v1_formats_follow_the_native_rate(tmp_path):
    engine = Engine(backend())
    with serve(make_api(engine, tmp_path)) as url:
        for fmt in ("wav", "flac", "pcm"):
            body = {"input": "Hello", "voice": "alloy", "response_format": fmt}
            if fmt == "wav":  # streamed (a WAV not asked to stream comes whole, sized)
                body["stream_format"] = "audio"
            response = httpx.post(f"{url}/v1/audio/speech", json=body, timeout=60)
            assert response.status_code == 200, response.text[:200]
            assert response.headers["x-sample-rate"] == str(RATE)
            if fmt == "wav":
                assert parse_streamed_wav(response.content, RATE).size == 12 * 3840
            elif fmt == "flac":  # STREAMINFO: 20-bit sample rate at byte 18 (length unknown)
                data = response.content
                assert data[:4] == b"fLaC"
                assert (data[18] << 12 | data[19] << 4 | data[20] >> 4) == RATE
            else:
                assert len(response.content) == 2 * 12 * 3840
