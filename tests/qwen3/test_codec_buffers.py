"""The codec decoder's elementwise path writes in place and keeps the bits of the plain one.

Each conv's input goes straight into a window kept in its ConvWindow (history ++ the step's
input) instead of being joined to the history with a copy, and SnakeBeta keeps one temporary
instead of one per operation. Pure speed changes: the audio must be bit for bit the audio of
the path before (benchmarks/decoder_ab.py's `_elementwise_as_before`), in float32 and
bfloat16, streamed and whole.
"""

from __future__ import annotations

import copy
import dataclasses
import sys
from pathlib import Path

import pytest
import torch

from tts_core.models.qwen3_tts.codec import CodecDecoder, load_speech_tokenizer_config
from tts_core.models.qwen3_tts.codec.streaming import ConvWindow

from .test_codec_kernels import random_snake

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from decoder_ab import _elementwise_as_before  # noqa: E402

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def _decoder(dtype: torch.dtype) -> CodecDecoder:
    cfg = load_speech_tokenizer_config(FIXTURES / "qwen3-tiny-a" / "speech_tokenizer").decoder
    decoder = CodecDecoder.from_config(dataclasses.replace(cfg, sliding_window=8), seed=7)
    return decoder.set_dtype(dtype)


def _codes(frames: int, seed: int = 0, batch: int = 1) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, 2048, (batch, 16, frames), generator=generator)


def _stream(decoder: CodecDecoder, codes: torch.Tensor, sizes: list[int], state=None):
    state = decoder.init_state(codes.shape[0]) if state is None else state
    pieces, start, index = [], 0, 0
    while start < codes.shape[-1]:
        size = sizes[min(index, len(sizes) - 1)]
        pieces.append(decoder.decode_step(codes[..., start : start + size], state))
        start, index = start + size, index + 1
    return torch.cat(pieces, dim=-1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_audio_is_bit_for_bit_the_path_with_copies(dtype: torch.dtype) -> None:
    decoder = _decoder(dtype)
    codes = _codes(23, seed=1, batch=2)
    with _elementwise_as_before():
        streamed_before = _stream(decoder, codes, [2, 6])
        whole_before = decoder(codes)
    assert torch.equal(_stream(decoder, codes, [2, 6]), streamed_before)
    assert torch.equal(decoder(codes), whole_before)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_snake_beta_into_a_strided_window_is_the_plain_expression(dtype: torch.dtype) -> None:
    """t * t is pow(t, 2) and mul-then-add rounds as the expression does (addcmul would not)."""
    snake, generator = random_snake(24, 3, dtype)
    x = (3 * torch.randn(2, 24, 1000, generator=generator)).to(dtype)
    plain = x + snake.inv_beta * torch.pow(torch.sin(x * snake.alpha_exp), 2)
    window = torch.full((2, 24, 1007), float("nan"), dtype=dtype)
    written = snake(x, out=window[..., 7:])
    assert written.data_ptr() == window[..., 7:].data_ptr()
    assert torch.equal(window[..., 7:], plain)
    assert torch.equal(snake(x), plain)
    assert window[..., :7].isnan().all()  # nothing before the slot is touched


def test_steady_chunks_reuse_every_window_and_history() -> None:
    """Once a stream's chunk size is steady, no conv allocates its window again (the buffer is
    written in place); a new chunk size makes new windows, a steady one keeps them."""
    decoder = _decoder(torch.float32)
    state = decoder.init_state(1)
    codes = _codes(40, seed=2)
    decoder.decode_step(codes[..., :2], state)
    decoder.decode_step(codes[..., 2:8], state)
    with_history = [h for h in state.convs if h.size > 0]
    assert with_history and all(isinstance(h, ConvWindow) for h in with_history)
    windows = [h.window.data_ptr() for h in with_history]
    histories = [h.buffer.data_ptr() for h in with_history]
    for start in range(8, 38, 6):
        decoder.decode_step(codes[..., start : start + 6], state)
        assert [h.window.data_ptr() for h in with_history] == windows
        assert [h.buffer.data_ptr() for h in with_history] == histories


def test_clones_and_converted_states_do_not_share_a_window() -> None:
    decoder = _decoder(torch.float32)
    codes = _codes(12, seed=4)
    warm = decoder.init_state(1)
    decoder.decode_step(codes[..., :6], warm)
    clone = warm.clone()
    assert all(h.window is None for h in clone.convs)
    after_clone = decoder.decode_step(codes[..., 6:], clone)
    assert torch.equal(after_clone, decoder.decode_step(codes[..., 6:], copy.deepcopy(warm)))
    warm.to_(dtype=torch.bfloat16)
    assert all(h.window is None for h in warm.convs)
