"""Crossfades at independent joins, fades at the ends, int16 conversion."""

from __future__ import annotations

import numpy as np

from tts_core.audio import ChunkJoiner, hann_rise, to_int16

RATE = 24_000


def tone(seconds: float, freq: float, phase: float = 0.0, amp: float = 0.5) -> np.ndarray:
    t = np.arange(int(seconds * RATE)) / RATE
    return (amp * np.sin(2 * np.pi * freq * t + phase)).astype(np.float32)


def run(joiner: ChunkJoiner, pieces: list[tuple[np.ndarray, bool]]) -> np.ndarray:
    out = [joiner.push(p, independent) for p, independent in pieces]
    return np.concatenate([*out, joiner.finish()])


def normal_step(*signals: np.ndarray) -> float:
    """Largest sample-to-sample step inside the signals themselves."""
    return max(float(np.max(np.abs(np.diff(s)))) for s in signals)


def test_hann_gains_sum_to_one():
    rise = hann_rise(480)
    assert np.allclose(rise + rise[::-1], 1.0, atol=1e-6)
    assert rise[0] < 0.01 and rise[-1] > 0.99


def test_hard_cut_would_jump_but_crossfade_stays_within_normal_steps():
    a, b = tone(0.5, 220.0), tone(0.5, 330.0, phase=np.pi / 2)  # b starts at its peak
    hard = np.concatenate([a, b])
    assert np.abs(np.diff(hard))[a.size - 1] > 5 * normal_step(a, b)  # the problem being solved

    joiner = ChunkJoiner(overlap=480, fade=120)
    out = run(joiner, [(a[:5000], False), (a[5000:], False), (b, True)])
    assert out.size == a.size + b.size - 480  # overlap-add shortens by the overlap
    join, rise = a.size - 480, hann_rise(480)  # a's last 480 samples fade into b's first 480
    assert np.array_equal(out[120:join], a[120:join])  # untouched after the fade-in
    assert np.array_equal(out[join : a.size], a[join:] * (1.0 - rise) + b[:480] * rise)
    assert np.array_equal(out[a.size : -120], b[480:-120])  # untouched before the fade-out
    assert float(np.max(np.abs(np.diff(out)))) <= 1.05 * normal_step(a, b)


def test_zero_overlap_disables_crossfade():
    a, b = tone(0.2, 200.0), tone(0.2, 300.0)
    out = run(ChunkJoiner(overlap=0, fade=0), [(a, False), (b, True)])
    assert np.array_equal(out, np.concatenate([a, b]))


def test_dependent_pieces_are_concatenated_exactly():
    signal = tone(0.6, 180.0)
    pieces = [(p, False) for p in np.array_split(signal, 7)]
    out = run(ChunkJoiner(overlap=480, fade=120), pieces)
    assert out.size == signal.size
    assert np.array_equal(out[120:-120], signal[120:-120])  # untouched between the end fades


def test_first_samples_fade_in_and_last_fade_out_across_small_pieces():
    signal = np.full(2000, 0.5, dtype=np.float32)
    out = run(ChunkJoiner(overlap=0, fade=240), [(p, False) for p in np.array_split(signal, 40)])
    assert out[0] < 0.01 and out[-1] < 0.01
    assert np.all(np.diff(out[:240]) >= 0) and np.all(np.diff(out[-240:]) <= 0)
    assert np.allclose(out[240:-240], 0.5)


def test_to_int16_keeps_one_scale_and_clips():
    quiet = np.full(10, 0.1, dtype=np.float32)
    assert to_int16(quiet).dtype == np.int16
    assert int(to_int16(quiet)[0]) == round(0.1 * 32767)  # not peak-normalised to full scale
    assert to_int16(np.array([2.0, -2.0], np.float32)).tolist() == [32767, -32767]
