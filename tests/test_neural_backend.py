"""`NeuralBackend` (backends/neural.py), the part of the neural backends written once,
on a fake model that offers what a model offers the engine (`runner(max_batch)`, `request(...)`,
`create_voice`): its voices made on the loop thread and refused by name, its requests' knobs
with their defaults, its chunks as BackendChunks, a refused request as an InputError, and a
cancelled stream's row freed. No checkpoint (torch only for `load`'s dtype): the fast tier."""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np
import pytest

from tts_core.audio.cadence import Cadence
from tts_core.backends.neural import NeuralBackend
from tts_core.engine.backend import Backend, ReferenceNeeds, SynthesisParams
from tts_core.engine.errors import InputError
from tts_core.engine.knobs import Knob
from tts_core.serving import Sequence


@dataclass
class TickChunk:
    audio: np.ndarray
    ticks: int
    stop_reason: str | None
    batch_size: int


class TickRunner:
    """Each row emits its `level` once per step, `len(text)` times, then stops ("done")."""

    max_batch = 2

    def admit(self, seq: Sequence) -> bool:
        return True

    def prefill(self, seq: Sequence, positions: int) -> bool:
        return True

    def decode(self, seqs: list[Sequence], out) -> None:  # noqa: ANN001
        for seq in seqs:
            out.emit(seq, seq.level, len(seqs), "done" if seq.frames + 1 == seq.length else None)

    def deliver(self, seq, frames, compute_s, stop_reason, batch) -> TickChunk:  # noqa: ANN001
        return TickChunk(np.array(frames, np.float32), len(frames), stop_reason, batch)

    def release(self, seq: Sequence) -> None:
        pass


class TickModel:
    def __init__(self) -> None:
        self.voices_made_on: list[str] = []

    def runner(self, max_batch: int) -> TickRunner:
        return TickRunner()

    def request(self, text, voice, seed=None, level=1.0, first=1, every=1, should_stop=None):  # noqa: ANN001, ANN201
        if not text:
            raise ValueError("nothing to say")
        seq = Sequence(Cadence(first, every), should_stop or (lambda: False), 100, "cap")
        seq.length, seq.level = len(text), level * voice
        return seq

    def create_voice(self, clip: np.ndarray, rate: int, ref_text: str | None) -> float:
        self.voices_made_on.append(threading.current_thread().name)
        if not np.any(clip):
            raise ValueError("it is silent")
        return 2.0  # a voice doubles the level


class TickBackend(NeuralBackend):
    name, title = "tick", "Tick"
    description = "a fake model"
    knobs = (Knob("level", float, 0.0, 10.0),)  # no declared default: the model's
    knob_defaults = {"level": 1.5}
    reference = ReferenceNeeds(transcript="required")
    needs_reference = True
    default_max_batch = 2
    chunk_frames = "ticks"
    sample_rate, frame_samples, weight_format = 24_000, 1, "float32"

    def submit(self, text, voice, params, cancel):  # noqa: ANN001, ANN201
        return self.loop.submit(
            text,
            voice,
            seed=params.seed,
            **self.knob_values(params),
            first=params.first_chunk_frames,
            every=params.chunk_frames,
            should_stop=cancel.is_set,
        )


@pytest.fixture
def backend():
    backend = TickBackend(TickModel(), "tick-model", "cpu")
    yield backend
    backend.close()


CLIP = np.full(100, 0.1, np.float32)


def test_a_declaration_is_a_backend(backend):
    assert isinstance(backend, Backend)
    assert backend.default_concurrency == backend.loop.max_batch == 2
    assert backend.sampling_defaults() == {"level": 1.5}


def test_voices_are_made_on_the_loop_thread_and_refused_by_name(backend):
    voice = backend.create_voice(CLIP, "the words")
    assert voice.data == 2.0 and voice.summary == {"mode": "continuation", "transcript": True}
    assert backend.model.voices_made_on == ["tts-tick"]
    refusals = [
        ((None, "the words"), "reference", "give a reference clip and its transcript"),
        ((CLIP, " "), "reference_text", "needs the reference clip's transcript"),
        ((np.zeros((100, 2), np.float32), "w"), "reference", "mono"),
        ((np.full(100, np.inf, np.float32), "w"), "reference", "NaN or infinite"),
        ((np.zeros(100, np.float32), "w"), "reference", "Reference clip: it is silent"),
    ]
    for args, param, message in refusals:
        with pytest.raises(InputError, match=message) as refused:
            backend.create_voice(*args)
        assert refused.value.param == param


def test_a_model_that_speaks_without_a_clip_gets_no_voice():
    backend = type("ZeroShot", (TickBackend,), {"needs_reference": False})(TickModel(), "", "cpu")
    voice = backend.create_voice(None, None)
    assert voice.data is None and voice.summary["mode"] == "zero-shot"
    with pytest.raises(InputError, match="without a reference clip") as refused:
        backend.create_voice(None, "words without their clip")
    assert refused.value.param == "reference_text"


def test_a_stream_carries_the_knobs_and_the_declared_frames(backend):
    voice = backend.create_voice(CLIP, "the words")
    params = SynthesisParams(first_chunk_frames=1, chunk_frames=2)
    chunks = list(backend.stream("abcd", voice, params, threading.Event()))
    assert [c.frames for c in chunks] == [1, 2, 1]  # 4 frames: the first alone, then by 2
    assert np.concatenate([c.audio for c in chunks]).tolist() == [3.0] * 4  # 1.5 (default) * 2
    assert [c.stop_reason for c in chunks] == [None, None, "done"]
    assert not any(c.independent for c in chunks) and chunks[0].batch_size == 1
    set_level = backend.stream("ab", voice, SynthesisParams(level=4.0), threading.Event())
    assert np.concatenate([c.audio for c in set_level]).tolist() == [8.0, 8.0]


def test_a_refused_request_is_an_input_error_and_queues_nothing(backend):
    voice = backend.create_voice(CLIP, "the words")
    with pytest.raises(InputError, match="nothing to say"):
        next(backend.stream("", voice, SynthesisParams(), threading.Event()))
    assert backend.loop.waiting == 0 and backend.loop.active == 0


def test_a_cancelled_stream_ends_after_its_chunk_and_frees_its_row(backend):
    voice, cancel = backend.create_voice(CLIP, "the words"), threading.Event()
    stream = backend.stream("a" * 50, voice, SynthesisParams(chunk_frames=1), cancel)
    next(stream)
    cancel.set()
    assert list(stream) == []  # the chunk in hand was the last
    # two loop calls in a row: the second runs after a whole step, which drops a stopped row
    backend.loop.call(lambda: None)
    backend.loop.call(lambda: None)
    assert backend.loop.active == 0 and backend.loop.waiting == 0


def test_a_stream_cancelled_before_it_starts_queues_nothing(backend, monkeypatch):
    voice, cancel = backend.create_voice(CLIP, "the words"), threading.Event()
    submitted = []
    monkeypatch.setattr(backend.loop, "submit", lambda *a, **k: submitted.append(a))
    cancel.set()
    assert list(backend.stream("abcd", voice, SynthesisParams(), cancel)) == []
    assert submitted == []


def test_a_model_that_ignores_transcripts_says_so_in_the_voice():
    """Chatterbox's declaration (transcript "ignored"): cloned from the clip alone."""
    ignoring = ReferenceNeeds(transcript="ignored")
    backend = type("Ignoring", (TickBackend,), {"reference": ignoring})(TickModel(), "", "cpu")
    try:
        summary = backend.create_voice(CLIP, "the words").summary
    finally:
        backend.close()
    assert summary == {"mode": "reference", "transcript": False, "transcript_ignored": True}


def test_load_passes_the_models_own_options_to_its_loader(caplog):
    """A spec's backend_options (e.g. Chatterbox Turbo's quantize) reach `load_model`; the
    log names the weight format the backend reports."""
    asked = []

    def load_model(name_or_path, device, dtype, quantize="auto"):  # noqa: ANN001, ANN202
        asked.append((name_or_path, device, quantize))
        return TickModel()

    loading = type("Loading", (TickBackend,), {"load_model": staticmethod(load_model)})
    caplog.set_level("INFO", logger="tts_core.backends.neural")
    backend = loading.load("tick-folder", "cpu", quantize="int8")
    backend.close()
    assert asked == [("tick-folder", "cpu", "int8")] and backend.model_name == "tick-folder"
    assert "loaded Tick tick-folder on cpu (float32, 24000 Hz)" in caplog.text
