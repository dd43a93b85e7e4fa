"""ModelThread and run_on_passing_thread: where a model's computations run (model_thread.py)."""

from __future__ import annotations

import threading

import pytest

from tts_core.engine.model_thread import ModelThread, run_on_passing_thread


def test_calls_run_on_one_thread_and_raise_there():
    model_thread = ModelThread("test-model")
    try:
        idents = {model_thread.call(threading.get_ident) for _ in range(3)}
        assert len(idents) == 1 and threading.get_ident() not in idents
        with pytest.raises(ZeroDivisionError):
            model_thread.call(lambda: 1 / 0)
    finally:
        model_thread.close()


def test_a_call_from_the_model_thread_runs_inline_instead_of_deadlocking():
    model_thread = ModelThread("test-model")
    result: list[int] = []
    caller = threading.Thread(
        target=lambda: result.append(model_thread.call(lambda: model_thread.call(lambda: 5)))
    )
    caller.start()
    caller.join(timeout=10)
    try:
        assert not caller.is_alive() and result == [5]
    finally:
        model_thread.close()


def test_iterate_advances_and_closes_the_generator_on_the_model_thread():
    model_thread, seen, closed = ModelThread("test-model"), [], []

    def numbers():
        try:
            for n in range(10):
                seen.append(threading.get_ident())
                yield n
        finally:
            closed.append(threading.get_ident())

    items = model_thread.iterate(numbers())
    assert [next(items), next(items)] == [0, 1]
    items.close()
    try:
        home = model_thread.call(threading.get_ident)
        assert set(seen) == {home} and closed == [home]
    finally:
        model_thread.close()


def test_run_on_passing_thread_returns_and_raises_here():
    ident = run_on_passing_thread(threading.get_ident)
    assert ident != threading.get_ident()
    with pytest.raises(KeyError):
        run_on_passing_thread(lambda: {}["missing"])
