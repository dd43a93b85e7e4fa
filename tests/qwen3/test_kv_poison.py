"""Attention never reads a KV slot that was not written: NaN there changes no output bit.

Every slot of the talker's and the code predictor's static caches (`KVCache`, zero filled) and
of the batching arena (serving/kv_arena.py, `torch.empty`: whatever the memory held) is set to
NaN when it is allocated. One such slot inside an attention call would make its output NaN (a
softmax weight of 0 times NaN is NaN), so equal codes and bit-equal finite audio show that the
engine's rows read only the positions [0, position] they wrote.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator

import numpy as np
import pytest
import torch

from tts_core.backends.qwen3 import served_loop
from tts_core.models.layers import DecoderStack, KVCache
from tts_core.models.qwen3_tts.serving.kv_arena import KVArena

from .conftest import check_audio, golden_voice, load_goldens, shared_model
from .test_batching import collect, request, served_model


def _fill_nan(caches: list[KVCache], poisoned: list[str], kind: str) -> None:
    for cache in caches:
        cache.k.fill_(math.nan)
        cache.v.fill_(math.nan)
    poisoned.append(kind)


@contextlib.contextmanager
def nan_caches() -> Iterator[list[str]]:
    """While active, every new static cache and KV arena is NaN-filled; yields the kinds made."""
    poisoned: list[str] = []
    new_caches, arena_init = DecoderStack.new_caches, KVArena.__init__

    def poisoned_caches(self, *args, **kwargs):
        caches = new_caches(self, *args, **kwargs)
        _fill_nan(caches, poisoned, type(self).__name__)
        return caches

    def poisoned_arena(self, *args, **kwargs):
        arena_init(self, *args, **kwargs)
        _fill_nan(self.layers, poisoned, "KVArena")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(DecoderStack, "new_caches", poisoned_caches)
        patch.setattr(KVArena, "__init__", poisoned_arena)
        yield poisoned


def _stream(model, text: str, voice, **kwargs) -> tuple[torch.Tensor, np.ndarray]:
    codes, audio, _ = collect(model.stream(text, voice, **kwargs))
    return codes, audio


@pytest.mark.parametrize("mode", ["icl", "xvec"])
@pytest.mark.parametrize("sampling", [{"greedy": True}, {"seed": 7}], ids=["greedy", "sampled"])
def test_static_caches_are_read_only_where_written(tiny_checkpoint, mode, sampling) -> None:
    model = shared_model(tiny_checkpoint)
    voice = golden_voice(load_goldens(tiny_checkpoint.name), mode)
    args = ("Hello there, a poisoned cache.", voice)
    kwargs = {"max_new_tokens": 10, "chunk_frames": 3, **sampling}
    clean = _stream(model, *args, **kwargs)
    with nan_caches() as poisoned:
        dirty = _stream(model, *args, **kwargs)
    assert poisoned == ["TalkerBackbone", "CodePredictorBackbone"]
    assert torch.equal(dirty[0], clean[0])
    assert np.array_equal(dirty[1], clean[1])
    check_audio(dirty[1])


def test_batching_arena_is_read_only_where_written() -> None:
    """4 requests batched over a NaN arena (chunked prefill, rows at different positions) give
    bit for bit what `model.stream` gives over zero-filled caches, on the weights this CPU
    serves (int8, or float without an int8 matmul: see test_batching)."""
    name = "qwen3-tiny-a"
    model = served_model(name)
    requests = [request(i, name) for i in range(4)]
    clean = [_stream(model, text, voice, **kwargs) for text, voice, kwargs in requests]
    with nan_caches() as poisoned:
        scheduler = served_loop(model, max_batch=4, prefill_chunk=5)
        try:
            handles = [scheduler.submit(text, voice, **kwargs) for text, voice, kwargs in requests]
            dirty = [collect(handle) for handle in handles]
        finally:
            scheduler.close()
    assert poisoned == ["KVArena", "CodePredictorBackbone"]
    assert max(c.batch_size for _, _, chunks in dirty for c in chunks) > 1  # ran together
    for i, ((codes, audio, _), reference) in enumerate(zip(dirty, clean, strict=True)):
        assert torch.equal(codes, reference[0]), f"request {i}: codes differ"
        assert np.array_equal(audio, reference[1]), f"request {i}: audio differs"
        check_audio(audio)
