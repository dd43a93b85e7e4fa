"""engine/stats.py: every event carries its request's stats so far (as_dict), made on the event
loop for a served request. Each chunk's figures are rounded once, as the chunk comes, not again
at every later event: an event late in a long stream costs what the first one does. Counted
(calls of the rounding), not timed; the figures equal the ones rounded afresh."""

from __future__ import annotations

import tts_core.engine.stats as stats_module
from tts_core.engine.stats import RequestStats

CHUNKS = 50


def test_an_events_stats_round_no_more_values_after_fifty_chunks(monkeypatch):
    stats = RequestStats("qwen3", "m", "cpu", 24_000, "int8")
    for index in range(CHUNKS):
        stats.add_chunk(11_520 + index, 0.4 + index / 1000, batch_size=1)
    calls = 0
    real_round = stats_module._round

    def counted(value):  # noqa: ANN001, ANN202
        nonlocal calls
        calls += 1
        return real_round(value)

    monkeypatch.setattr(stats_module, "_round", counted)
    event = stats.as_dict()
    # the request's own figures (first audio, queue, voice, audio, compute, wall, RTF): 7,
    # whatever the chunks; before, every chunk's lists were rounded again: 7 + 4 x CHUNKS
    assert calls == 7

    fresh = [real_round(v) for v in stats.chunk_compute_s]
    assert event["chunk_compute_s"] == fresh and len(fresh) == CHUNKS
    assert event["chunk_audio_s"] == [real_round(v) for v in stats.chunk_audio_s]
    assert event["timeline"] == [[real_round(w), real_round(a)] for w, a in stats.timeline]
    assert event["audio_s"] == real_round(sum(11_520 + i for i in range(CHUNKS)) / 24_000)


def test_each_event_gets_lists_of_its_own():
    """A consumer that changes one event's lists changes no other event's."""
    stats = RequestStats("qwen3", "m", "cpu", 24_000)
    stats.add_chunk(100, 0.1)
    first = stats.as_dict()
    first["timeline"][0][0] = -1.0
    first["chunk_audio_s"].append(9.0)
    stats.add_chunk(100, 0.1)
    second = stats.as_dict()
    assert second["timeline"][0][0] >= 0 and len(second["chunk_audio_s"]) == 2
