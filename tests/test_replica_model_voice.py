"""--replicas on a Qwen3-TTS CustomVoice checkpoint (#41): the ingress forwards the request's
ModelVoice (a preset and its instruction) to the replica, whose engine builds and speaks it.
No Ray cluster: the deployment handle is faked by driving a real EngineReplica's stream on an
event loop of its own, as Serve does (its engine on the tiny CustomVoice checkpoint), so what
crosses the handle is exactly what the ingress sends. Seeded sampling: the ingress's audio is the single process's (within one int16 step).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from tts_core.audio import to_int16
from tts_core.engine import Engine, InputError, SynthesisParams, SynthesisRequest
from tts_core.engine.requests import EngineConfig, ModelVoice

FIXTURES = Path(__file__).resolve().parent / "fixtures"
TEXT = "Hello from a preset voice."

pytestmark = pytest.mark.slow


class _Pieces:
    """What `handle.options(stream=True).stream.remote(...)` gives: an iterator with cancel(),
    over the replica's async generator (driven on a loop of its own, as Serve's replica does)."""

    def __init__(self, generator) -> None:  # noqa: ANN001 - an async generator
        self.generator = generator
        self.loop = asyncio.new_event_loop()

    def __iter__(self):  # noqa: ANN204
        return self

    def __next__(self):  # noqa: ANN204
        try:
            return self.loop.run_until_complete(anext(self.generator))
        except StopAsyncIteration:
            raise StopIteration from None

    def cancel(self) -> None:
        self.loop.run_until_complete(self.generator.aclose())
        self.loop.close()


class FakeHandle:
    """Ray Serve's deployment handle, driving the replica's generator from this thread."""

    def __init__(self, replica) -> None:  # noqa: ANN001 - an EngineReplica
        self.replica = replica
        self.calls: list[tuple] = []

    def options(self, stream: bool):  # noqa: ANN201, ARG002
        return SimpleNamespace(stream=SimpleNamespace(remote=self._remote))

    def _remote(self, *args) -> _Pieces:  # noqa: ANN002
        self.calls.append(args)
        return _Pieces(self.replica.stream(*args))


@pytest.fixture(scope="module")
def custom_voice_engine():
    pytest.importorskip("ray.serve")
    from tts_core.backends import load_backend

    backend, _ = load_backend(
        str(FIXTURES / "qwen3-tiny-cv"), "cpu", allow_fallback=False, quantize="none"
    )
    return Engine(backend)


def ingress_over(engine: Engine) -> tuple[Engine, FakeHandle]:
    from tts_core.scale.backend import ReplicaBackend
    from tts_core.scale.replica import EngineReplica

    replica = EngineReplica.__new__(EngineReplica)  # its __init__ builds from flags under Ray
    replica.engine, replica.replica_id = engine, "replica-1"
    handle = FakeHandle(replica)
    info = {**engine.info(), "torch_threads": 1}
    config = EngineConfig(
        fade_ms=0.0, crossfade_ms=0.0
    )  # as scale.replica_engine: the replica fades
    return Engine(ReplicaBackend(handle, info, replicas=1), config), handle


def test_the_ingress_forwards_the_preset_and_its_instruction(custom_voice_engine) -> None:
    ingress, handle = ingress_over(custom_voice_engine)
    assert (ingress.backend.task_type, ingress.backend.speakers) == (
        "CustomVoice",
        tuple(custom_voice_engine.backend.speakers),
    )
    spec = ModelVoice(speaker="dylan", instruct="Speak slowly and calmly.")
    params = SynthesisParams("auto", seed=7, max_new_tokens=12)
    request = SynthesisRequest(TEXT, params=params, model_voice=spec)
    through, _ = ingress.synthesize(request)
    alone, _ = custom_voice_engine.synthesize(
        SynthesisRequest(TEXT, params=params, model_voice=spec)
    )
    assert handle.calls[-1][-1] == spec  # the replica got the preset, not a clip
    assert handle.calls[-1][1] is None
    assert through.size > 0
    # same engine, same seed: the same codes; two runs' float32 sums maybe not in one order
    # (tests/test_family_page_browser.py SAME_RUN_LSB): within one int16 step
    a, b = to_int16(through).astype(int), to_int16(alone).astype(int)
    assert a.size == b.size and int(np.abs(a - b).max()) <= 1


def test_a_preset_the_checkpoint_lacks_is_the_replicas_input_error(custom_voice_engine) -> None:
    ingress, _ = ingress_over(custom_voice_engine)
    params = SynthesisParams("auto", seed=7, max_new_tokens=12)
    request = SynthesisRequest(TEXT, params=params, model_voice=ModelVoice(speaker="nobody"))
    with pytest.raises(InputError, match="nobody"):
        ingress.synthesize(request)
