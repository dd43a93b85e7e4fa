"""`stream()` yields chunks whose concatenation equals `generate()` in every mode, at several
chunk sizes: the per-stream VAE decoder state (warmed on the context patches once per voice and
cloned per stream in the reference + transcript mode) makes the streamed decode the full
decode. Bound: two of our float32 evaluations of the same audio, `fp32_pair_bound` (8 E)."""

from __future__ import annotations

import numpy as np
import pytest
from qwen3.conftest import fp32_pair_bound

from .conftest import golden_voice, shared_model


@pytest.mark.parametrize("kind", ["none", "ref", "ref_text"])
def test_stream_equals_generate(model_folder, model_goldens, kind) -> None:
    model = shared_model(model_folder)
    case = next(c for c in model_goldens.cases.values() if c["voice"] == kind)
    voice = golden_voice(model, model_goldens, kind)
    kwargs = dict(
        seed=case["seed"],
        cfg_value=case["cfg_value"],
        inference_timesteps=case["inference_timesteps"],
        max_len=case["max_len"],
    )
    full = model.generate(case["text"], voice, **kwargs).audio
    bound = fp32_pair_bound(model_goldens, f"mode_{case['key']}")
    for chunk_patches in (1, 2, 3):
        chunks = list(model.stream(case["text"], voice, chunk_patches=chunk_patches, **kwargs))
        assert len(chunks) >= 2 if chunk_patches > 1 else len(chunks) >= 3
        assert all(c.sample_rate == model.sample_rate for c in chunks)
        audio = np.concatenate([c.audio for c in chunks])
        assert audio.shape == full.shape
        error = float(np.abs(audio - full).max())
        print(f"{model_folder.name} {kind} chunk {chunk_patches}: {error:.3g} (bound {bound:.3g})")
        assert error <= bound


def test_voice_state_is_not_consumed_by_a_stream(model_folder, model_goldens) -> None:
    """Two streams of one voice give the same audio: each clones the warm decoder state."""
    model = shared_model(model_folder)
    voice = golden_voice(model, model_goldens, "ref_text")
    first = np.concatenate([c.audio for c in model.stream("Hello world.", voice, seed=3)])
    second = np.concatenate([c.audio for c in model.stream("Hello world.", voice, seed=3)])
    assert np.array_equal(first, second)
