"""Qwen3-TTS below the engine (issue 39): the model's served loop is the generic EngineLoop over
`model.runner` and `model.request`, nothing Qwen3's own (tests/test_layers.py: no import circle,
in this package or anywhere in tts_core)."""

from __future__ import annotations

import pytest

from tts_core.serving import EngineLoop

from .test_batching import collect, request, served_model


def test_a_loop_over_the_models_runner_and_request_refuses_what_its_arena_cannot_hold():
    """`EngineLoop(model.runner(n), make_request=model.request)` (no cache_positions given to
    the request): the runner holds the request to its arena at admission, so a prompt it cannot
    hold fails its own stream instead of waiting for room forever, and the loop serves on."""
    name = "qwen3-tiny-a"
    model = served_model(name)
    text, voice, kwargs = request(1, name)
    prompt_len = model.plan(text, voice, **kwargs)[0].prefill.shape[1]
    loop = EngineLoop(model.runner(1, cache_positions=prompt_len), make_request=model.request)
    try:
        with pytest.raises(ValueError, match="cache holds"):
            collect(loop.submit(text, voice, **kwargs))
        assert loop.active == 0 and loop.waiting == 0
    finally:
        loop.close()
    loop = EngineLoop(model.runner(1, cache_positions=prompt_len + 3), make_request=model.request)
    try:
        codes, _, chunks = collect(loop.submit(text, voice, **{**kwargs, "greedy": True}))
        assert chunks[-1].stop_reason == "length_cap" and codes.shape[0] == 3  # 3 positions left
    finally:
        loop.close()
