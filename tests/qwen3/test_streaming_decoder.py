"""The exact streaming decoder equals one full pass; window mode has the right length and seams.

Exactness is checked two ways (error model: tests/qwen3/conftest.py):
* on the tiny checkpoints' real weights in float64 (these random decoders amplify rounding
  ~700x, so float64 is what shows the state handling is exact: diffs ~1e-13), against the
  float64 bound of the checkpoint's decoder golden, 8 E x 2^-29 (~6e-13);
* in float32 on a well-conditioned random decoder with the same geometry and a short sliding
  window (diffs ~1e-7), against (1 + 4) x its own float32 error E_w = max |full pass in float32 -
  full pass in float64|, measured here at test time (the stream and the full pass are two float32
  evaluations of one function; E_w ~1e-7, bound ~1e-6).
Long streams are 310 frames: past the 72-frame window and the official 300-frame chunk; tiny-b
(window 8) covers each chunk size alone on short streams.

bfloat16 (`CodecDecoder.set_dtype`), on the well-conditioned decoder only (the tiny checkpoints'
~700x amplification would turn bf16 rounding into errors of order 1). Its amplification
A = E_w / u32 (E_w as above, floored at 4 roundings of the peak) predicts one run's error as
A x u_bf16, u_bf16 = 2^-8 (half of bf16's eps 2^-7; bf16 weights, activations and outputs are each
rounded once, with float32 accumulation). With FP32_SPREAD as the margin for unlike kernels: one
bf16 stream is within 4 A u_bf16 of the float64 full pass, and a bf16 stream and a bf16 full pass,
two bf16 evaluations, within 2 x 4 A u_bf16 of each other (A ~0.4: bounds ~6e-3 and ~1.2e-2, against
a signal peak ~0.07; measured on an AMD EPYC: ~1.2e-3 to float64, 0 between stream and full pass).
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import sys
from functools import cache
from pathlib import Path

import pytest
import torch

from tts_core.models.qwen3_tts.codec import (
    CodecDecoder,
    SpeechTokenizer,
    load_speech_tokenizer_config,
)

from .conftest import (
    FP32_SPREAD,
    bf16_bound,
    check_fp32,
    fp64_bound,
    load_goldens,
    run_error,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from window_decoder import WindowDecoder  # noqa: E402

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
FRAMES = 310


def _fp64_tolerance(name: str) -> float:
    return fp64_bound(load_goldens(name), "decoder_wav")


@cache
def _float32_error() -> float:
    """E_w: the well-conditioned decoder's float32 error on a 40-frame pass, floored."""
    decoder = _well_conditioned_decoder()
    exact = _well_conditioned_decoder(torch.float64)
    codes = _codes(40, decoder.config.codebook_size, seed=12)
    return run_error(decoder(codes), exact(codes))


def _float32_tolerance() -> float:
    """(1 + FP32_SPREAD) x E_w."""
    return (1 + FP32_SPREAD) * _float32_error()


def _bf16_bound() -> float:
    """One bf16 run against the exact value: FP32_SPREAD x A x u_bf16, A = E_w / u32."""
    return bf16_bound(_float32_error())


@cache
def _decoder(name: str, dtype: torch.dtype = torch.float64) -> CodecDecoder:
    return SpeechTokenizer.from_folder(FIXTURES / name / "speech_tokenizer", dtype=dtype).decoder


@cache
def _well_conditioned_decoder(dtype: torch.dtype = torch.float32) -> CodecDecoder:
    """The float32 random weights, converted to `dtype` (set_dtype: one rounding each)."""
    if dtype != torch.float32:
        return copy.deepcopy(_well_conditioned_decoder()).set_dtype(dtype)
    cfg = load_speech_tokenizer_config(FIXTURES / "qwen3-tiny-a" / "speech_tokenizer").decoder
    return CodecDecoder.from_config(dataclasses.replace(cfg, sliding_window=8), seed=7)


@cache
def _codes(frames: int, size: int, seed: int, batch: int = 1) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, size, (batch, 16, frames), generator=generator)


@cache
def _full(decoder: CodecDecoder, codes: torch.Tensor) -> torch.Tensor:
    return decoder(codes)[:, 0]


def _stream(decoder: CodecDecoder, codes: torch.Tensor, schedule, state=None) -> torch.Tensor:
    state = decoder.init_state(codes.shape[0]) if state is None else state
    pieces, start = [], 0
    for size in itertools.cycle(schedule):
        if start >= codes.shape[-1]:
            break
        piece = decoder.decode_step(codes[..., start : start + size], state)
        assert piece.shape == (codes.shape[0], codes[..., start : start + size].shape[-1] * 1920)
        pieces.append(piece)
        start += size
    return torch.cat(pieces, dim=-1)


def _max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    assert a.shape == b.shape
    return float((a - b).abs().max())


def test_long_stream_with_every_chunk_size_on_checkpoint_weights() -> None:
    decoder = _decoder("qwen3-tiny-a")  # sliding window 72
    codes = _codes(FRAMES, decoder.config.codebook_size, seed=1)
    streamed = _stream(decoder, codes, [1, 2, 5, 12])
    assert _max_diff(streamed, _full(decoder, codes)) <= _fp64_tolerance("qwen3-tiny-a")


@pytest.mark.parametrize("chunk", [1, 2, 5, 12])
def test_each_chunk_size_past_the_window_on_checkpoint_weights(chunk: int) -> None:
    decoder = _decoder("qwen3-tiny-b")  # sliding window 8
    codes = _codes(30, decoder.config.codebook_size, seed=2)
    error = _max_diff(_stream(decoder, codes, [chunk]), _full(decoder, codes))
    assert error <= _fp64_tolerance("qwen3-tiny-b")


def test_long_stream_float32() -> None:
    decoder = _well_conditioned_decoder()
    codes = _codes(FRAMES, decoder.config.codebook_size, seed=3)
    full = _full(decoder, codes)
    assert float(full.std()) > 1e-3  # a real signal, not silence
    assert _max_diff(_stream(decoder, codes, [1, 2, 5, 12]), full) <= _float32_tolerance()


@pytest.mark.parametrize("chunk", [1, 2, 5, 12])
def test_each_chunk_size_float32(chunk: int) -> None:
    decoder = _well_conditioned_decoder()
    codes = _codes(30, decoder.config.codebook_size, seed=4)
    error = _max_diff(_stream(decoder, codes, [chunk]), _full(decoder, codes))
    assert error <= _float32_tolerance()


def _check_bf16_stream(codes: torch.Tensor, schedule) -> None:
    decoder = _well_conditioned_decoder(torch.bfloat16)
    state = decoder.init_state(codes.shape[0])
    assert state.dtype == torch.bfloat16  # the state follows the decoder
    streamed = _stream(decoder, codes, schedule, state)
    full = _full(decoder, codes)
    assert streamed.dtype == full.dtype == torch.float32  # audio comes back float32
    exact = _full(_well_conditioned_decoder(torch.float64), codes)
    bound = _bf16_bound()
    assert bound < 0.2 * float(exact.abs().max())  # a bound that can fail on a real error
    assert _max_diff(streamed.double(), exact) <= bound
    assert _max_diff(full.double(), exact) <= bound
    assert _max_diff(streamed, full) <= 2 * bound  # two bf16 evaluations


def test_long_stream_bfloat16() -> None:
    codes = _codes(FRAMES, _well_conditioned_decoder().config.codebook_size, seed=3)
    _check_bf16_stream(codes, [1, 2, 5, 12])


@pytest.mark.parametrize("chunk", [1, 2, 6])
def test_each_chunk_size_bfloat16(chunk: int) -> None:
    _check_bf16_stream(
        _codes(30, _well_conditioned_decoder().config.codebook_size, seed=4), [chunk]
    )


def test_warm_prefix_then_generated_frames(goldens) -> None:
    """ICL: reference frames warm the state (audio dropped), generated frames stream after."""
    ref, generated = goldens["ref_codes"].T[None], goldens["icl_codes"].T[None]
    cut = ref.shape[-1] * 1920
    for dtype, tolerance in ((torch.float64, _fp64_tolerance(goldens.name)), (torch.float32, None)):
        decoder = _decoder(goldens.name, dtype)
        state = decoder.init_state(1)
        decoder.decode_step(ref, state)
        streamed = _stream(decoder, generated, [2, 1, 5], state)[0]
        assert state.frames_seen == ref.shape[-1] + generated.shape[-1]
        if tolerance is not None:
            full = decoder(torch.cat([ref, generated], dim=-1))[0, 0, cut:]
            assert _max_diff(streamed, full) <= tolerance
        else:  # float32 against the official clone output (and its float64 value)
            check_fp32(streamed, goldens, "icl_audio")


def test_reset_then_reuse_matches_a_fresh_state() -> None:
    decoder = _decoder("qwen3-tiny-a", torch.float32)
    first = _codes(80, decoder.config.codebook_size, seed=4)
    second = _codes(20, decoder.config.codebook_size, seed=5)
    state = decoder.init_state(1)
    buffers = [h.buffer.data_ptr() for h in state.convs] + [
        w.keys.data_ptr() for w in state.attention
    ]
    _stream(decoder, first, [3], state)
    assert state.attention[0].length == decoder.config.sliding_window - 1
    state.reset()
    assert state.frames_seen == 0 and state.attention[0].length == 0
    reused = _stream(decoder, second, [4], state)
    assert torch.equal(reused, _stream(decoder, second, [4]))
    # the state is written in place: same storage after 100 frames
    assert buffers == [h.buffer.data_ptr() for h in state.convs] + [
        w.keys.data_ptr() for w in state.attention
    ]


def test_cloned_warm_state_continues_like_the_original() -> None:
    """A state warmed once on a prefix (a voice's reference frames) can be cloned per stream."""
    decoder = _decoder("qwen3-tiny-a", torch.float32)
    prefix = _codes(40, decoder.config.codebook_size, seed=6)
    rest = _codes(30, decoder.config.codebook_size, seed=8)
    warm = decoder.init_state(1)
    _stream(decoder, prefix, [40], warm)
    first = _stream(decoder, rest, [2, 5], warm.clone())
    second = _stream(decoder, rest, [2, 5], warm.clone())  # the first clone left `warm` as it was
    straight = decoder.init_state(1)
    _stream(decoder, prefix, [40], straight)
    straight = _stream(decoder, rest, [2, 5], straight)
    assert torch.equal(first, straight)  # same work, same order: bit for bit
    assert torch.equal(second, straight)


def test_batched_streams_are_independent() -> None:
    decoder = _well_conditioned_decoder()
    codes = _codes(20, decoder.config.codebook_size, seed=6, batch=2)
    both = _stream(decoder, codes, [4])
    for row in range(2):
        alone = _stream(decoder, codes[row : row + 1], [4])[0]
        assert _max_diff(both[row], alone) <= _float32_tolerance()
    with pytest.raises(ValueError, match="state is for batch 1"):
        decoder.decode_step(codes, decoder.init_state(1))


def _run_window(window: WindowDecoder, codes: torch.Tensor, sizes, prefix=None) -> torch.Tensor:
    window.start(prefix)
    pieces, start = [], 0
    for size in itertools.cycle(sizes):
        if start >= codes.shape[-1]:
            break
        pieces.append(window.feed(codes[..., start : start + size]))
        start += size
    pieces.append(window.flush())
    return torch.cat(pieces)


def test_window_mode_length_with_and_without_prefix() -> None:
    decoder = _decoder("qwen3-tiny-a", torch.float32)
    codes = _codes(41, decoder.config.codebook_size, seed=8)
    window = WindowDecoder(decoder, window=12, emit_every=5, crossfade=960)
    assert _run_window(window, codes, [1, 4, 9]).shape == (41 * 1920,)
    prefix = _codes(10, decoder.config.codebook_size, seed=9)
    assert _run_window(window, codes[..., :17], [3], prefix).shape == (17 * 1920,)


def test_window_covering_everything_is_the_full_pass_between_the_fades() -> None:
    decoder = _well_conditioned_decoder()
    codes = _codes(24, decoder.config.codebook_size, seed=10)
    window = WindowDecoder(decoder, window=32, emit_every=6, crossfade=960, fade_edges=240)
    out = _run_window(window, codes, [2, 3])
    full = _full(decoder, codes)[0]
    assert _max_diff(out[240:-240], full[240:-240]) <= _float32_tolerance()
    assert float(out[0].abs()) <= 1e-12  # faded in
    assert float(out[-1].abs()) <= 1e-12  # faded out


class _PhaseShiftingDecoder:
    """Stand-in decoder: a 200 Hz tone whose phase depends on where the window starts, like a
    codec that renders the same frames a little differently with a different left context.
    codes[0, 0] carries the absolute frame index."""

    samples_per_frame = 1920

    def __call__(self, codes: torch.Tensor) -> torch.Tensor:
        start = int(codes[0, 0, 0])
        n = torch.arange(codes.shape[-1] * 1920, dtype=torch.float64) + start * 1920
        tone = 0.5 * torch.sin(2 * torch.pi * 200 * n / 24000 + 0.7 * start)
        return tone.float()[None, None]


def _seam_steps(out: torch.Tensor, emit: int, crossfade: int) -> float:
    steps = out.diff().abs()
    first = emit * 1920 - crossfade
    return max(
        float(steps[seam - 8 : seam + crossfade + 8].max())
        for seam in range(first, out.shape[0] - 1921, emit * 1920)
    )


def test_window_mode_crossfade_removes_seam_jumps() -> None:
    codes = torch.arange(60).view(1, 1, 60).expand(1, 16, 60).contiguous()
    normal = 0.5 * 2 * torch.pi * 200 / 24000  # largest step of the tone itself
    faded = WindowDecoder(_PhaseShiftingDecoder(), window=12, emit_every=4, crossfade=960)
    assert _seam_steps(_run_window(faded, codes, [4]), 4, 960) <= 1.5 * normal
    hard = WindowDecoder(_PhaseShiftingDecoder(), window=12, emit_every=4, crossfade=0)
    assert _seam_steps(_run_window(hard, codes, [4]), 4, 0) > 3 * normal  # the test can fail


def test_window_mode_seams_on_checkpoint_stay_within_the_signal_range() -> None:
    decoder = _decoder("qwen3-tiny-a", torch.float32)
    codes = _codes(60, decoder.config.codebook_size, seed=11)
    streamer = WindowDecoder(decoder, window=16, emit_every=4, crossfade=960)
    out = _run_window(streamer, codes, [4])
    normal = float(_full(decoder, codes)[0].diff().abs().max())
    assert _seam_steps(out, 4, 960) <= 1.25 * normal
