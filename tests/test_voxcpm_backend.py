"""VoxCPMBackend through the engine on the tiny VoxCPM2 checkpoint (tests/fixtures/voxcpm2-tiny).

The golden cases' text, seed and reference clip (24 kHz, as the engine hands clips to backends)
go through `Engine` with fades off, so the streamed audio is checked three ways: bit-exact
against `model.stream` with the same chunking (the same code path), against `model.generate`
within `fp32_pair_bound` (a streamed and a full VAE pass are two float32 evaluations of the
same audio: the error model of tests/qwen3/conftest.py), and against the official
voxcpm==2.0.3 golden within `check_fp32`'s bounds.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from qwen3.conftest import check_audio, check_fp32, fp32_pair_bound, load_goldens
from voxcpm2.conftest import FIXTURES, shared_model

from tts_core.backends.voxcpm import VoxCPMBackend
from tts_core.engine import (
    Backend,
    Engine,
    EngineConfig,
    InputError,
    Limits,
    SynthesisParams,
    SynthesisRequest,
)

TINY = FIXTURES / "voxcpm2-tiny"
# the golden clip is 62.5 ms (a tiny checkpoint); the engine's 1 s minimum is a product limit
LIMITS = Limits(min_reference_s=0.05)
FIRST, STEADY = 1, 2  # patches in the first and in every later chunk


@pytest.fixture(scope="module")
def backend() -> VoxCPMBackend:
    return VoxCPMBackend(shared_model(TINY), "voxcpm2-tiny", "cpu")


@pytest.fixture(scope="module")
def goldens():
    return load_goldens("voxcpm2-tiny-model")


def _engine(backend: VoxCPMBackend) -> Engine:
    config = EngineConfig(limits=LIMITS, fade_ms=0.0, max_concurrent=1, max_queue=0)
    return Engine(backend, config)


def test_backend_contract(backend: VoxCPMBackend) -> None:
    model = backend.model
    assert isinstance(backend, Backend)
    assert (backend.name, backend.can_clone, backend.needs_reference) == ("voxcpm", True, False)
    assert backend.capabilities.independent_phrases is False
    assert backend.default_concurrency == backend.loop.max_batch == 8  # --max-batch's default
    assert backend.sample_rate == model.sample_rate == 48000
    assert backend.frame_samples == model.patch_size * model.vae.decode_hop_length == 90
    assert backend.weight_format == "float32" and backend.sampling_defaults() == {
        "cfg_value": 2.0,
        "inference_timesteps": 10,
    }
    voice = backend.create_voice(None, None)
    assert voice.data is None and voice.summary["mode"] == "zero-shot"


@pytest.mark.parametrize("key", ["zero_shot", "reference", "ref_text"])
def test_engine_stream_equals_model(backend: VoxCPMBackend, goldens, key: str) -> None:
    case, model = goldens.cases[key], backend.model
    clip = goldens["ref_clip"].numpy()
    assert goldens.meta["clip_rate"] == 24000  # the engine's reference rate: no resampling
    ref_text = goldens.meta["ref_text"] if case["voice"] == "ref_text" else None
    request = SynthesisRequest(
        case["text"],
        reference=None if case["voice"] == "none" else (24000, clip),
        reference_text=ref_text,
        params=SynthesisParams(seed=case["seed"], first_chunk_frames=FIRST, chunk_frames=STEADY),
    )
    events = list(_engine(backend).stream(request))
    audio = np.concatenate([e.audio for e in events])
    stats = events[-1].stats

    voice = None if case["voice"] == "none" else model.create_voice(clip, 24000, ref_text)
    chunks = list(
        model.stream(
            case["text"], voice, seed=case["seed"], first_chunk_patches=FIRST, chunk_patches=STEADY
        )
    )
    assert np.array_equal(audio, np.concatenate([c.audio for c in chunks]))  # same code path
    full = model.generate(case["text"], voice, seed=case["seed"])
    assert audio.shape == full.audio.shape
    assert float(np.abs(audio - full.audio).max()) <= fp32_pair_bound(goldens, f"mode_{key}")
    print(check_fp32(audio, goldens, f"mode_{key}"))  # the official voxcpm==2.0.3 audio

    assert len(events) >= 2 and events[-1].final and not any(e.final for e in events[:-1])
    assert events[0].audio.size == FIRST * backend.frame_samples
    check_audio(audio)
    assert stats["stop_reason"] == full.stop_reason and stats["done"]
    assert stats["voice"]["mode"] == {"none": "zero-shot", "ref": "reference"}.get(
        case["voice"], "continuation"
    )
    assert stats["sample_rate"] == backend.sample_rate  # native rate (the engine change)


def test_cancel_stops_within_one_patch(backend: VoxCPMBackend, monkeypatch) -> None:
    """Stop set while the 2nd patch is made (the chunk needs 3): no 3rd patch is generated, and
    the row is freed at the scheduler's next step."""
    net, cancel, made = backend.model.net, threading.Event(), []
    encode = net.encode_patches

    def counting(patches):  # noqa: ANN001, ANN202 - LocEnc of each new patch (and the prompt)
        if patches.shape[1] == 1:  # one new patch (the prompt is longer)
            made.append(patches)
            if len(made) == 2:
                cancel.set()
        return encode(patches)

    monkeypatch.setattr(net, "encode_patches", counting)
    params = SynthesisParams(seed=5, first_chunk_frames=1, chunk_frames=3)
    pieces = list(
        backend.stream(
            "Hello world, this is a test.", backend.create_voice(None, None), params, cancel
        )
    )
    assert len(made) == 2  # the tiny model's stop head can end no earlier than the 4th patch
    assert [p.frames for p in pieces] == [1]
    _wait_until(lambda: backend.loop.active == 0)


def test_cancel_through_the_engine_frees_the_slot(backend: VoxCPMBackend) -> None:
    engine, cancel = _engine(backend), threading.Event()
    params = SynthesisParams(seed=5, first_chunk_frames=1, chunk_frames=1)
    stream = engine.stream(SynthesisRequest("Hello world, this is a test.", params=params), cancel)
    first = next(stream)
    cancel.set()
    rest = list(stream)
    assert not first.final and rest[-1].final and rest[-1].stats["stop_reason"] == "cancelled"
    assert engine.active_requests == 0 and engine.waiting_requests == 0
    audio, stats = engine.synthesize(SynthesisRequest("Hello.", params=params))  # slot is free
    assert audio.size > 0 and stats["stop_reason"] == "stop_head"  # long before the cap


@pytest.mark.parametrize(
    ("audio", "text", "message"),
    [
        (np.zeros((100, 2), np.float32), None, "mono"),
        (np.zeros(0, np.float32), None, "mono"),
        (np.arange(100, dtype=np.int16), None, "float"),
        (np.full(100, np.nan, np.float32), None, "NaN"),
        (None, "Some words.", "without a reference clip"),
    ],
)
def test_bad_clip_is_an_input_error(backend: VoxCPMBackend, audio, text, message: str) -> None:
    with pytest.raises(InputError, match=message):
        backend.create_voice(audio, text)


def test_silent_clip_through_the_engine(backend: VoxCPMBackend) -> None:
    engine = _engine(backend)
    request = SynthesisRequest("Hello.", reference=(24000, np.zeros(24000, np.float32)))
    with pytest.raises(InputError, match="silent"):
        engine.stream(request)
    assert engine.active_requests == 0 and engine.waiting_requests == 0


def test_guidance_and_steps_reach_the_model(backend: VoxCPMBackend) -> None:
    """cfg_value / inference_timesteps from the request change the audio; absent, the
    official defaults (2.0, 10) apply."""
    engine = _engine(backend)

    def speak(**knobs: float) -> np.ndarray:
        params = SynthesisParams(seed=5, **knobs)
        return engine.synthesize(SynthesisRequest("Guided speech.", None, None, params))[0]

    default = speak()
    assert np.array_equal(default, speak(cfg_value=2.0, inference_timesteps=10))
    assert not np.array_equal(default, speak(cfg_value=0.5))
    assert not np.array_equal(default, speak(inference_timesteps=3))


def test_the_model_computes_on_its_one_thread(backend: VoxCPMBackend, goldens) -> None:
    """Voices, prompts and patches run on the backend's scheduler thread, whoever asks (see
    tts_core/serving/loop.py: a second live OpenMP team slows every parallel op)."""
    model, seen = backend.model, set()
    hooks = [
        module.register_forward_pre_hook(lambda *_: seen.add(threading.get_ident()))
        for part in (model.net, model.vae)
        for module in part.modules()
    ]
    clip = goldens["ref_clip"].numpy()
    results: list = []

    def listener(i: int) -> None:
        voice = backend.create_voice(clip, "a reference" if i else None)
        params = SynthesisParams(seed=i, first_chunk_frames=1, chunk_frames=2)
        results.append(list(backend.stream("Hello.", voice, params, threading.Event())))

    try:
        threads = [threading.Thread(target=listener, args=(i,)) for i in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        for hook in hooks:
            hook.remove()
    assert len(results) == 2 and all(results)
    assert seen == {backend.loop._thread.ident}


# ------------------------------------------------------------------------- concurrent streams
TINY_B = FIXTURES / "voxcpm2-tiny-b"  # its streams run long enough to be joined (tens of patches)
CONCURRENT = [  # (text, voice: none / reference / + transcript, seed, first and later chunk)
    ("A second voice speaks here.", "ref", 2, 1, 2),  # 124 patches, stop head
    ("Yet another sentence to say, slowly.", "none", 2, 2, 3),  # 184: its length cap
    ("Hello world, this is a test.", "ref_text", 1, 1, 1),  # 5: joins, ends first
    ("Short.", "ref", 1, 2, 2),  # 40: joins
]


@pytest.fixture(scope="module")
def backend_b() -> VoxCPMBackend:
    return VoxCPMBackend(shared_model(TINY_B), "voxcpm2-tiny-b", "cpu")


def _request(i: int) -> SynthesisRequest:
    text, voice, seed, first, steady = CONCURRENT[i]
    clip = load_goldens("voxcpm2-tiny-b-model")["ref_clip"].numpy()  # 24 kHz
    return SynthesisRequest(
        text,
        reference=None if voice == "none" else (24000, clip),
        reference_text="a short reference" if voice == "ref_text" else None,
        params=SynthesisParams(seed=seed, first_chunk_frames=first, chunk_frames=steady),
    )


class JoinGate(threading.Event):
    """The first request's cancel event, which its scheduler's loop asks before every step
    (should_stop). Once that request's consumer has its first chunk (`started`), the gate holds
    the loop's step until the two joiners are queued in the scheduler (it runs their pending
    calls, voices and request checks, itself), so they join at that very step, while the first
    runs: an event, not a race with the consumers' threads."""

    def __init__(self, backend: VoxCPMBackend, started: threading.Event) -> None:
        super().__init__()
        self.loop, self.started, self.joined = backend.loop, started, False

    def is_set(self) -> bool:
        if (
            not self.joined
            and self.started.is_set()
            and threading.current_thread() is self.loop._thread
        ):
            scheduler = self.loop  # all four requests in it: the joiners are queued
            _wait_until(lambda: scheduler._run_calls() or scheduler.waiting + scheduler.active == 4)
            self.joined = True
        return super().is_set()


def test_four_concurrent_streams_give_each_its_audio_alone(backend_b: VoxCPMBackend) -> None:
    """Four requests through the engine on one scheduler: two start, two join once the first
    has delivered its first chunk; of different lengths (5 to 184 patches, stop head and length
    cap), each gives exactly the bytes it gives alone, with the same seed."""
    config = EngineConfig(limits=LIMITS, fade_ms=0.0, max_concurrent=4, max_queue=0)
    engine = Engine(backend_b, config)

    def run(i: int, cancel: threading.Event | None = None, started=None) -> list:  # noqa: ANN001
        events = []
        for event in engine.stream(_request(i), cancel):
            events.append(event)
            if started is not None:
                started.set()
        return events

    alone = [run(i) for i in range(4)]
    started, results = threading.Event(), {}
    gate = JoinGate(backend_b, started)

    def consumer(i: int) -> None:
        if i >= 2:
            started.wait(timeout=120)  # a hang detector: the first chunk comes within the test
        results[i] = run(i, gate if i == 0 else None, started if i == 0 else None)

    threads = [threading.Thread(target=consumer, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert gate.joined
    lengths = set()
    for i in range(4):
        audio = np.concatenate([e.audio for e in results[i]])
        expected = np.concatenate([e.audio for e in alone[i]])
        assert audio.tobytes() == expected.tobytes(), f"request {i} differs from itself alone"
        final, final_alone = results[i][-1].stats, alone[i][-1].stats
        assert final["stop_reason"] == final_alone["stop_reason"]
        assert max(_batches(final)) > 1 and set(_batches(final_alone)) == {1}
        lengths.add(audio.size)
        check_audio(audio)
    assert len(lengths) == 4
    assert {results[i][-1].stats["stop_reason"] for i in range(4)} == {"stop_head", "length_cap"}
    assert max(max(_batches(results[i][-1].stats)) for i in range(4)) >= 3
    _wait_until(lambda: backend_b.loop.active == 0)
    assert engine.active_requests == 0


def _batches(stats: dict) -> list[int]:
    """Streams decoded together for each chunk with audio (an empty final chunk has None)."""
    return [b for b in stats["chunk_batch_size"] if b is not None]


def _wait_until(condition, timeout: float = 120.0) -> None:  # noqa: ANN001
    """A hang detector (a loaded machine may take seconds), not a speed bound."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.001)
