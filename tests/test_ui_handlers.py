"""The page's stream handler without a server: what each yield carries."""

from __future__ import annotations

import gradio as gr
import numpy as np
import pytest

from tts_core.ui import handlers

ADVANCED = (0.9, 50, 1.0, 1.05, -1)


def page_outputs(engine, text, reference=None, first=2, steady=6):
    return list(
        handlers.stream_to_page(engine, text, "english", reference, "", *ADVANCED, first, steady)
    )


def audio_of(output) -> np.ndarray | None:
    value = output[0]
    return value[1] if isinstance(value, tuple) else None


def test_yields_int16_chunks_a_flush_nudge_and_the_full_clip(engine):
    outputs = page_outputs(engine, "One sentence here. And a second one, which is longer.")
    audio = [audio_of(o) for o in outputs]
    assert all(a.dtype == np.int16 for a in audio if a is not None)
    assert all(o[0][0] == 24_000 for o in outputs if isinstance(o[0], tuple))
    real = [a for a in audio if a is not None and a.size > 1]
    nudges = [i for i, a in enumerate(audio) if a is not None and a.size == 1]
    last_real = max(i for i, a in enumerate(audio) if a is not None and a.size > 1)
    assert nudges and nudges[-1] > last_real  # the last real chunk is flushed by a nudge
    assert all(not audio[n].any() for n in nudges)  # nudges are silence

    final = outputs[-1]
    stats = final[4]
    assert stats["done"] and stats["chunks"] == len(real)
    assert "Done" in final[1] and "time to first audio" in final[1]
    sample_rate, full = final[3]
    assert sample_rate == 24_000 and np.array_equal(full, np.concatenate(real))
    plot = final[2]
    assert set(plot["series"]) == {"generated", "playback"}


def test_single_chunk_stream_still_gets_a_second_yield(engine):
    outputs = page_outputs(engine, "Hi.", first=25, steady=50)
    audio = [audio_of(o) for o in outputs if audio_of(o) is not None]
    assert len([a for a in audio if a.size > 1]) == 1
    assert len(audio) >= 2  # Gradio may not play a stream that got a single yield


def test_bad_input_is_a_gradio_error(engine):
    with pytest.raises(gr.Error, match="enter some text"):
        page_outputs(engine, "   ")


def test_request_notices_are_shown(engine, write_clip, speech_like):
    from tts_core.engine import Engine, EngineConfig, Limits

    short_limit = Engine(engine.backend, EngineConfig(limits=Limits(max_reference_s=2.0)))
    clip = write_clip("long.wav", speech_like(5.0, 24_000))
    final = page_outputs(short_limit, "Cut the reference.", reference=clip)[-1]
    assert "only its first 2 s were used" in final[1]
