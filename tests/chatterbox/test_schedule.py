"""The default S3Gen schedule against what a listener hears (chunking.py: `chunk_timeline`,
`stall_s`): the player starts once 250 ms is buffered, and each later chunk must arrive before
the buffer runs dry. Synthetic numbers only: the costs are the ones measured on a Zen 5 (2
threads, real-size random Turbo, int8 T3; benchmarks/turbo_schedule.py), not timed here."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest

from tts_core.models.chatterbox.chunking import (
    StreamChunking,
    StreamCost,
    chunk_timeline,
    stall_s,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from listeners_bench import playback  # noqa: E402

# Measured in-process (model.stream, busy box, ratios held): a chunk took ~0.37 s of S3Gen's
# fixed cost + ~23.2 ms per token (T3's draw and S3Gen's share), a token being 40 ms of audio.
MEASURED = StreamCost(prefill_s=0.0, token_s=0.0232, pass_s=0.37)
MARGIN_S = 0.1  # the least time an arrival must beat the buffer running dry
LONG_STREAMS = range(60, 400)  # 2.4-16 s of speech: past the ramp, every chunk count


def test_stall_s_is_the_players_total_stall() -> None:
    """The same player as benchmarks/listeners_bench.py `playback`, on random arrivals:
    stall_s's positive part is its stall time (sums of a few float seconds: 1e-9)."""
    rng = random.Random(7)
    for _ in range(500):
        clock, arrivals = 0.0, []
        for _ in range(rng.randint(1, 12)):
            clock += rng.uniform(0.0, 1.5)
            arrivals.append((clock, rng.choice([0.0, rng.uniform(0.02, 2.0)])))
        expected = playback(arrivals, 0.25)["stall_s"]
        assert max(0.0, stall_s(arrivals, 0.25)) == pytest.approx(expected, abs=1e-9)


def test_stall_s_on_the_old_doubling_ramp() -> None:
    """The chunks measured with the doubling ramp (passes at 12, 24, 48, 96 tokens): the
    player starts at the second (0.68 s buffered), then runs dry 0.20 s before the third and
    0.67 s in all before the fourth."""
    arrivals = [(0.60, 0.20), (1.19, 0.48), (2.07, 0.96), (3.50, 1.92), (5.02, 2.00)]
    assert stall_s(arrivals) == pytest.approx(3.50 - 1.19 - 0.68 - 0.96)
    assert stall_s(arrivals[:3]) == pytest.approx(2.07 - 1.19 - 0.68)


def test_a_schedule_that_keeps_ahead_has_a_negative_stall() -> None:
    arrivals = [(0.5, 0.3), (0.7, 0.5), (1.3, 1.0)]  # dry at 0.5 + 0.8 = 1.3: just in time
    assert stall_s(arrivals) == pytest.approx(0.0)
    # starts at 0.5 with 0.3 s: dry at 0.8 (second comes 0.2 early), then 1.3 (third 0.3 early)
    assert stall_s([(0.5, 0.3), (0.6, 0.5), (1.0, 1.0)]) == pytest.approx(-0.2)


def test_the_default_schedule_does_not_stall_at_the_measured_costs() -> None:
    """The old doubling ramp (12, 24, 48, 96) ran a 250 ms player dry at these costs; the
    default keeps every arrival MARGIN_S ahead, however long the stream."""
    chunking = StreamChunking()
    worst = max(stall_s(chunk_timeline(chunking, total, MEASURED)) for total in LONG_STREAMS)
    assert worst <= -MARGIN_S


def test_a_slower_pass_than_the_schedule_allows_stalls() -> None:
    """The condition binds: a fixed cost 0.15 s above the measured one runs the player dry."""
    slower = StreamCost(MEASURED.prefill_s, MEASURED.token_s, MEASURED.pass_s + 0.15)
    assert max(stall_s(chunk_timeline(StreamChunking(), t, slower)) for t in LONG_STREAMS) > 0


def test_the_timeline_hands_out_every_token_once() -> None:
    """The chunks' audio adds to the tokens + the final pass's 3 silence tokens, 40 ms each;
    the first holds first_tokens - holdback - hift_right / 2 tokens."""
    chunking = StreamChunking()
    timeline = chunk_timeline(chunking, 137, MEASURED)
    assert sum(audio for _, audio in timeline) == pytest.approx((137 + 3) * 0.04)
    assert timeline[0][1] == pytest.approx((12 - 3 - 4) * 0.04)
    assert len(timeline) == len(chunking.pass_points(137)) + 1
