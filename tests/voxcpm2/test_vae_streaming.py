"""Stateful streaming decode == one full decode, whatever the split; state is per stream.

Bound: two of our own float32 evaluations of the same network differ by at most
fp32_pair_bound = 2 x FP32_SPREAD x E (E: the golden's recorded float32 error of the full
decode, tests/qwen3/conftest.py "Float error model").
"""

from __future__ import annotations

import pytest
import torch
from qwen3.conftest import fp32_pair_bound

from tts_core.models.voxcpm import AudioVAE, VAEDecoderState

IRREGULAR_SPLITS = ([5, 1, 7, 2, 11, 3, 1, 10], [1, 39], [39, 1], [13, 13, 14], [40])


def _stream(vae: AudioVAE, latents: torch.Tensor, sizes: list[int], state=None) -> torch.Tensor:
    state = vae.init_state(batch_size=latents.shape[0]) if state is None else state
    parts, start = [], 0
    for size in sizes:
        parts.append(vae.decode_step(latents[..., start : start + size], state))
        start += size
    assert start == latents.shape[-1]
    return torch.cat(parts, dim=-1)


def _regular(total: int, chunk: int) -> list[int]:
    return [min(chunk, total - i) for i in range(0, total, chunk)]


@pytest.mark.parametrize("chunk", [1, 2, 3, 4])
def test_stream_equals_full_decode(tiny_vae: AudioVAE, vae_goldens, chunk: int) -> None:
    latents = vae_goldens["decode_input"]
    full = tiny_vae.decode(latents)
    streamed = _stream(tiny_vae, latents, _regular(latents.shape[-1], chunk))
    assert streamed.shape == full.shape
    error, bound = (
        float((streamed - full).abs().max()),
        fp32_pair_bound(vae_goldens, "decode_audio"),
    )
    print(f"chunk {chunk}: max|stream - full| {error:.3g} (bound {bound:.3g})")
    assert error <= bound


@pytest.mark.parametrize("sizes", IRREGULAR_SPLITS, ids=str)
def test_irregular_splits_equal_full_decode(tiny_vae: AudioVAE, vae_goldens, sizes) -> None:
    latents = vae_goldens["decode_input"]
    error = float((_stream(tiny_vae, latents, sizes) - tiny_vae.decode(latents)).abs().max())
    assert error <= fp32_pair_bound(vae_goldens, "decode_audio"), error


def test_state_is_preallocated_and_written_in_place(tiny_vae: AudioVAE, vae_goldens) -> None:
    latents = vae_goldens["decode_input"]
    state = tiny_vae.init_state(batch_size=2)
    pointers = [h.buffer.data_ptr() for h in state.histories]
    _stream(tiny_vae, latents, _regular(latents.shape[-1], 3), state)
    assert [h.buffer.data_ptr() for h in state.histories] == pointers
    assert state.frames_seen == latents.shape[-1]
    assert any(bool(h.buffer.abs().sum() > 0) for h in state.histories)


def test_state_sizes_follow_the_layers(tiny_vae: AudioVAE) -> None:
    """First conv 6, per block: transposed conv 1 frame, residual units 6/18/54; last conv 6."""
    sizes = [h.size for h in tiny_vae.init_state().histories]
    blocks = len(tiny_vae.config.decoder_rates)
    assert sizes == [6] + [1, 6, 18, 54] * blocks + [6]


def test_reset_and_clone(tiny_vae: AudioVAE, vae_goldens) -> None:
    latents = vae_goldens["decode_input"]
    reference = _stream(tiny_vae, latents, [4] * 10)
    state = tiny_vae.init_state(batch_size=2)
    _stream(tiny_vae, latents[..., :12], [5, 7], state)
    forked = state.clone()
    tail = _stream(tiny_vae, latents[..., 12:], [4] * 7, state)
    tail_forked = _stream(tiny_vae, latents[..., 12:], [28], forked)
    bound = fp32_pair_bound(vae_goldens, "decode_audio")
    hop = tiny_vae.decode_hop_length
    assert float((tail - reference[..., 12 * hop :]).abs().max()) <= bound
    assert float((tail_forked - tail).abs().max()) <= bound
    assert forked.frames_seen == state.frames_seen == 40
    state.reset()
    assert state.frames_seen == 0 and all(bool((h.buffer == 0).all()) for h in state.histories)
    assert torch.equal(_stream(tiny_vae, latents, [4] * 10, state), reference)


def test_interleaved_streams_share_one_model(tiny_vae: AudioVAE, vae_goldens) -> None:
    """Two streams on one model, steps interleaved: each equals its own full decode (upstream
    keeps the state in the shared modules and allows one stream at a time)."""
    a, b = vae_goldens["decode_input"][:1], vae_goldens["decode_input"][1:]
    state_a, state_b = tiny_vae.init_state(), tiny_vae.init_state()
    parts_a, parts_b = [], []
    for i in range(0, 40, 5):
        parts_a.append(tiny_vae.decode_step(a[..., i : i + 5], state_a))
        parts_b.append(tiny_vae.decode_step(b[..., i : i + 5], state_b))
    bound = fp32_pair_bound(vae_goldens, "decode_audio")
    assert float((torch.cat(parts_a, -1) - tiny_vae.decode(a)).abs().max()) <= bound
    assert float((torch.cat(parts_b, -1) - tiny_vae.decode(b)).abs().max()) <= bound


def test_decode_step_rejects_bad_input(tiny_vae: AudioVAE) -> None:
    state: VAEDecoderState = tiny_vae.init_state(batch_size=1)
    with pytest.raises(ValueError, match="latents must be"):
        tiny_vae.decode_step(torch.zeros(1, tiny_vae.latent_dim + 1, 2), state)
    with pytest.raises(ValueError, match="latents must be"):
        tiny_vae.decode_step(torch.zeros(1, tiny_vae.latent_dim, 0), state)
    with pytest.raises(ValueError, match="batch"):
        tiny_vae.decode_step(torch.zeros(2, tiny_vae.latent_dim, 2), state)
    assert state.frames_seen == 0
