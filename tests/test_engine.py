"""The engine over the real eSpeak backend: streaming, stats, joins, cancellation, concurrency."""

from __future__ import annotations

import sys
import threading
import time

import numpy as np
import pytest
from conftest import HANG_S

from tts_core.engine import (
    BackendChunk,
    Engine,
    EngineConfig,
    StreamHandle,
    SynthesisParams,
    SynthesisRequest,
)
from tts_core.engine.capabilities import Capabilities

TEXT = "The first sentence is short. The second one is a little longer, with a comma! Third?"
RATE = 24_000


def request(text: str = TEXT, language: str = "english", **params) -> SynthesisRequest:
    return SynthesisRequest(text, params=SynthesisParams(language=language, **params))


def test_stream_yields_sized_chunks_and_final_stats(engine):
    events = list(engine.stream(request(first_chunk_frames=2, chunk_frames=6)))
    assert len(events) >= 4
    assert [e.index for e in events] == list(range(len(events)))
    assert [e.final for e in events] == [False] * (len(events) - 1) + [True]
    frame, held = engine.backend.frame_samples, 480  # the joiner holds back the 20 ms overlap
    assert events[0].audio.size >= 2 * frame - held
    assert all(e.audio.size >= 6 * frame - held for e in events[1:-1])
    assert all(e.audio.dtype == np.float32 and e.audio.ndim == 1 for e in events)

    stats = events[-1].stats
    total = sum(e.audio.size for e in events)
    assert stats["done"] and stats["stop_reason"] == "end"
    assert stats["chunks"] == len(events)
    assert stats["audio_s"] == pytest.approx(total / RATE, abs=1e-3)
    assert 0 < stats["time_to_first_audio_s"] <= stats["wall_s"]
    rtf = stats["compute_s"] / stats["audio_s"]  # both rounded to 4 decimals in the stats
    assert stats["real_time_factor"] == pytest.approx(rtf, rel=0.01, abs=2e-4)
    assert len(stats["chunk_compute_s"]) == len(events)
    walls = [w for w, _ in stats["timeline"]]
    audio = [a for _, a in stats["timeline"]]
    assert walls == sorted(walls) and audio == sorted(audio)
    assert (stats["backend"], stats["device"]) == ("espeak", "cpu")
    # stats are live: the first event already carries a partial snapshot
    assert events[0].stats["chunks"] == 1 and not events[0].stats["done"]


def test_full_synthesis_matches_the_stream(engine):
    # eSpeak NG varies timing slightly from run to run, so lengths agree closely, not exactly
    streamed = np.concatenate([e.audio for e in engine.stream(request())])
    full, stats = engine.synthesize(request())
    assert full.size == pytest.approx(streamed.size, rel=0.01)
    assert stats["audio_s"] == pytest.approx(full.size / RATE, abs=1e-3)


def test_phrase_joins_are_crossfaded_without_discontinuity(espeak_backend):
    from tts_core.audio import ChunkJoiner

    # the backend marks each new phrase; rebuild the joins to look at the samples around them
    pieces = list(
        espeak_backend.stream(
            TEXT,
            espeak_backend.create_voice(None, None),
            SynthesisParams(language="english"),
            threading.Event(),
        )
    )
    assert sum(p.independent for p in pieces) == 2  # three sentences -> two independent joins
    joiner = ChunkJoiner(overlap=480, fade=120)
    out = np.concatenate([*(joiner.push(p.audio, p.independent) for p in pieces), joiner.finish()])
    steps = np.abs(np.diff(out))
    normal = float(np.percentile(steps, 99.9))
    joins, total = [], 0  # output index where each crossfade starts, from the piece sizes
    for piece in pieces:
        overlap = min(480, total, piece.audio.size) if piece.independent else 0
        joins += [total - overlap] if overlap else []
        total += piece.audio.size - overlap
    assert len(joins) == 2 and total == out.size
    for join in joins:
        assert float(steps[join - 2 : join + 482].max()) <= normal


def test_cancel_stops_promptly(espeak_backend):
    engine = Engine(espeak_backend)
    long_text = " ".join(["This sentence is repeated to make a long text."] * 18)
    cancel = threading.Event()
    events = []
    for event in engine.stream(request(long_text), cancel):
        events.append(event)
        if len(events) == 2:
            cancel.set()
    assert events[-1].final and events[-1].stats["stop_reason"] == "cancelled"
    full, _ = engine.synthesize(request(long_text))
    assert sum(e.audio.size for e in events) < full.size / 2
    assert engine.active_requests == 0


def test_handle_cancel_ends_the_worker(held_backend):
    """The handle's cancel reaches the backend, which is asked for one piece at most after it
    (counted, not timed: the held request waits for its cancel, see HeldBackend)."""
    engine = Engine(held_backend)
    long_text = " ".join(["Another long sentence to keep the voice busy for a while."] * 15)
    handle = StreamHandle(engine, request(long_text))
    assert handle.next_event(timeout=HANG_S) is not None
    run = held_backend.wait_holding()
    handle.cancel()
    rest = drain(handle)
    assert run.cancelled.is_set() and run.after_cancel <= 1
    assert not any(e.final and e.stats["stop_reason"] == "end" for e in rest)
    assert run.ended.is_set() and engine.active_requests == 0


def drain(handle: StreamHandle) -> list:
    """The handle's remaining events (a hang detector, not a speed bound: HANG_S per event)."""
    events = []
    while True:
        try:
            event = handle.next_event(timeout=HANG_S)
        except StopIteration:
            return events
        assert event is not None, f"no event and no end in {HANG_S} s"
        events.append(event)


def test_concurrent_requests_do_not_corrupt_each_other(engine, speech_like):
    from tts_core.backends.espeak_voice import measure_f0

    # two voices an octave apart; buffers leaking between requests would mix their pitches
    low = SynthesisRequest(
        TEXT, (RATE, speech_like(3.0, RATE, f0=90.0)), None, SynthesisParams(language="english")
    )
    high = SynthesisRequest(
        TEXT, (RATE, speech_like(3.0, RATE, f0=260.0)), None, SynthesisParams(language="english")
    )
    jobs = [low, high, low, high]
    sequential = [engine.synthesize(job)[0] for job in jobs]
    results: dict[int, np.ndarray] = {}

    def worker(i: int) -> None:
        results[i] = np.concatenate([e.audio for e in engine.stream(jobs[i])])

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    for i, job in enumerate(jobs):
        assert results[i].size == pytest.approx(sequential[i].size, rel=0.02)
        f0, alone = measure_f0(results[i], RATE), measure_f0(sequential[i], RATE)
        assert np.median(f0) == pytest.approx(np.median(alone), rel=0.05)
        wrong = np.mean(f0 > 160 if job is low else f0 < 160)
        assert wrong < 0.25, f"request {i}: {wrong:.0%} of its frames have the other voice's pitch"


def test_concurrency_limit_queues_requests(espeak_backend):
    """With one slot taken, a second request waits in line (seen parked there, not timed), then
    runs once the first ends; its queue_wait_s covers at least the time it was seen waiting."""
    engine = Engine(espeak_backend, EngineConfig(max_concurrent=1))
    first = engine.stream(request())
    next(first)  # holds the only slot while it is not read on
    second = engine.stream(request("Waiting in line."))  # its place in line, taken now
    assert (engine.active_requests, engine.waiting_requests) == (1, 1)
    results: dict = {}
    thread = threading.Thread(target=lambda: results.update(events=list(second)), daemon=True)
    thread.start()
    # either it parks in the line (correct) or it gets through and produces (a broken limit)
    deadline = time.monotonic() + HANG_S
    while not (parked := _waiting_for_its_turn(thread)) and not results:
        assert time.monotonic() < deadline and thread.is_alive(), "the second request vanished"
        time.sleep(0.005)
    assert parked and not results, "the second request ran beside the first"
    # watched parked for 50 ms (a wait long enough to show in the stats, rounded to 0.1 ms)
    parked_at = time.perf_counter()
    while time.perf_counter() - parked_at < 0.05:
        assert _waiting_for_its_turn(thread) and not results
        assert (engine.active_requests, engine.waiting_requests) == (1, 1)
        time.sleep(0.005)
    released_at = time.perf_counter()
    list(first)
    thread.join(timeout=HANG_S)
    stats = results["events"][-1].stats
    assert stats["done"] and stats["stop_reason"] == "end"
    # its wait began before it was seen parked and ended after the first one's release
    assert stats["queue_wait_s"] >= released_at - parked_at - 1e-4


def _waiting_for_its_turn(thread: threading.Thread) -> bool:
    """`thread` is blocked in Ticket.wait_turn (its place in the engine's line)."""
    from tts_core.engine.admission import Ticket

    frame = sys._current_frames().get(thread.ident)
    while frame is not None:
        if frame.f_code is Ticket.wait_turn.__code__:
            return True
        frame = frame.f_back
    return False


def test_voice_is_cached_per_reference(engine, speech_like):
    clip = speech_like(2.0, RATE)
    a = engine._voice(clip, None)
    assert engine._voice(clip.copy(), None) is a
    assert engine._voice(clip, "a transcript") is not a


def test_reference_pitch_selects_variant(engine, speech_like):
    low = engine.backend.create_voice(speech_like(3.0, RATE, f0=95.0), None).summary
    high = engine.backend.create_voice(speech_like(3.0, RATE, f0=230.0), None).summary
    assert low["variant"] == "" and high["variant"] == "+f3"
    assert low["ref_f0_hz"] == pytest.approx(95.0, rel=0.05)
    assert high["ref_f0_hz"] == pytest.approx(230.0, rel=0.05)


@pytest.mark.parametrize("f0", [95.0, 150.0, 230.0])
def test_the_voice_speaks_near_the_reference_pitch(engine, speech_like, f0):
    from tts_core.backends.espeak_voice import measure_f0

    reference = (RATE, speech_like(3.0, RATE, f0=f0))
    audio, _ = engine.synthesize(SynthesisRequest(TEXT, reference, None, SynthesisParams()))
    assert float(np.median(measure_f0(audio, RATE))) == pytest.approx(f0, rel=0.12)


class FrameChunks:
    """A stand-in for a neural backend: one exact, continuous signal cut into frame chunks."""

    name, model_name, device = "frames", "sine", "cpu"
    can_clone, needs_reference, capabilities = False, False, Capabilities()
    frame_samples, default_concurrency, description = 1920, 1, "test signal"
    sample_rate, weight_format, weight_format_reason, decode_step = 24_000, None, "", None

    def __init__(self, signal: np.ndarray, first: int, steady: int) -> None:
        self.signal, self.sizes = signal, (first, steady)
        self.log: list[tuple[str, int]] = []  # ("made", i) as chunk i is yielded

    def sampling_defaults(self):
        return {}

    def create_voice(self, audio, reference_text):
        from tts_core.engine import Voice

        return Voice(self.name, None)

    def stream(self, text, voice, params, cancel):
        start, size, index = 0, self.sizes[0] * self.frame_samples, 0
        while start < self.signal.size:
            self.log.append(("made", index))
            index += 1
            yield BackendChunk(self.signal[start : start + size], frames=size // 1920)
            start, size = start + size, self.sizes[1] * self.frame_samples
            time.sleep(0.05)  # "compute" of the next chunk


def test_dependent_chunks_pass_through_without_crossfade_or_delay():
    t = np.arange(20 * 1920) / RATE
    signal = (0.5 * np.sin(2 * np.pi * 200 * t)).astype(np.float32)
    backend = FrameChunks(signal, first=2, steady=6)
    events, log = [], backend.log
    for event in Engine(backend).stream(request(first_chunk_frames=2, chunk_frames=6)):
        events.append(event)
        log.append(("got", event.index))
    out = np.concatenate([e.audio for e in events])
    assert out.size == signal.size  # no overlap-add anywhere
    assert np.array_equal(out[120:-120], signal[120:-120])  # only the 5 ms end fades differ
    # each model chunk becomes an event as soon as it exists, not one chunk later: event i
    # reaches the consumer before the backend is asked for chunk i + 1 (order, not seconds)
    made = [i for kind, i in log if kind == "made"]
    assert made == [0, 1, 2, 3]  # 20 frames: 2 + 6 + 6 + 6
    for i in made[:-1]:
        assert log.index(("got", i)) < log.index(("made", i + 1)), log


SAMPLES = {
    "chinese": "你好，欢迎使用语音合成。",
    "english": "Hello and welcome.",
    "german": "Guten Tag und willkommen.",
    "italian": "Buongiorno e benvenuti.",
    "portuguese": "Bom dia e bem-vindos.",
    "spanish": "Buenos días y bienvenidos.",
    "japanese": "こんにちは、ようこそ。",
    "korean": "안녕하세요, 환영합니다.",
    "french": "Bonjour et bienvenue.",
    "russian": "Здравствуйте и добро пожаловать.",
}


@pytest.mark.parametrize("language", sorted(SAMPLES))
def test_every_language_speaks(engine, language):
    audio, stats = engine.synthesize(request(SAMPLES[language], language=language))
    assert stats["audio_s"] > 0.5 and float(np.max(np.abs(audio))) > 0.05


def test_auto_language_follows_the_script():
    from tts_core.backends.espeak_text import guess_language

    guesses = {lang: guess_language(text) for lang, text in SAMPLES.items()}
    for language in ("chinese", "japanese", "korean", "russian", "english"):
        assert guesses[language] == language


class CountingBackend:
    """A backend, counting the pieces it has handed to the engine."""

    def __init__(self, inner) -> None:  # noqa: ANN001
        self._inner, self.pieces = inner, 0

    def __getattr__(self, name: str):  # noqa: ANN204 - the inner backend's attributes
        return getattr(self._inner, name)

    def stream(self, *args):  # noqa: ANN002, ANN201
        for piece in self._inner.stream(*args):
            self.pieces += 1
            yield piece


def test_first_audio_arrives_long_before_the_synthesis_ends(espeak_backend):
    """Streamed, not one file at the end: the first event reaches the consumer when the backend
    has handed over a small part of the text's pieces (counted, not timed)."""
    backend = CountingBackend(espeak_backend)
    long_text = " ".join(f"Sentence number {i} is here to make the text long." for i in range(18))
    events, pieces_at_first = [], None
    for event in Engine(backend).stream(request(long_text)):
        events.append(event)
        pieces_at_first = pieces_at_first or backend.pieces
    stats = events[-1].stats
    assert stats["audio_s"] > 30 and len(events) > 10
    # the first chunk is 2 frames (0.16 s) of > 30 s: its pieces and at most one more
    assert pieces_at_first <= backend.pieces / 10, (pieces_at_first, backend.pieces)
    assert 0 < stats["time_to_first_audio_s"] < stats["wall_s"]
