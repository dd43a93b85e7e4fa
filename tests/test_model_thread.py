"""Where a served model computes: its engine's loop thread (`EngineLoop.call`, the one thread
for the steps, prompts and voices: tts_core/serving/loop.py) and, for work done once,
`run_on_passing_thread` (engine/model_thread.py)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import torch

from tts_core.engine.model_thread import run_on_passing_thread
from tts_core.models.voxcpm.model import VoxCPMModel
from tts_core.serving import EngineLoop

TINY = Path(__file__).resolve().parent / "fixtures" / "voxcpm2-tiny"


@pytest.fixture(scope="module")
def model() -> VoxCPMModel:
    return VoxCPMModel.from_folder(TINY, device="cpu", dtype=torch.float32)


def served_loop(model: VoxCPMModel) -> EngineLoop:
    return EngineLoop(model.runner(1), make_request=model.request, thread_name="tts-voxcpm")


def test_calls_run_on_the_loop_thread_and_raise_there(model):
    loop = served_loop(model)
    assert loop._thread is None  # a loop never used holds no thread
    try:
        idents = {loop.call(threading.get_ident) for _ in range(3)}
        assert idents == {loop._thread.ident} and threading.get_ident() not in idents
        assert loop.call(lambda a, b=0: a + b, 1, b=2) == 3
        with pytest.raises(ZeroDivisionError):
            loop.call(lambda: 1 / 0)
    finally:
        loop.close()


def test_a_call_from_the_loop_thread_runs_inline_instead_of_deadlocking(model):
    loop = served_loop(model)
    result: list[int] = []
    caller = threading.Thread(target=lambda: result.append(loop.call(lambda: loop.call(lambda: 5))))
    caller.start()
    caller.join(timeout=60)  # a hang detector: the nested call runs inline at once
    try:
        assert not caller.is_alive() and result == [5]
    finally:
        loop.close()


def test_a_closed_loop_ends_its_thread_and_refuses_work(model):
    loop = served_loop(model)
    loop.call(lambda: None)
    thread = loop._thread
    loop.close()
    assert not thread.is_alive()
    with pytest.raises(RuntimeError, match="closed"):
        loop.call(lambda: None)
    with pytest.raises(RuntimeError, match="closed"):
        loop.submit("Hello.", None, seed=1)


def test_run_on_passing_thread_returns_and_raises_here():
    ident = run_on_passing_thread(threading.get_ident)
    assert ident != threading.get_ident()
    with pytest.raises(KeyError):
        run_on_passing_thread(lambda: {}["missing"])
