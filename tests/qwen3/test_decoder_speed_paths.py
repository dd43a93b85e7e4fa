"""Decoder speed paths: a decoder dtype of its own (`set_decoder_dtype`) and `warm_up`.

* Converting the decoder leaves the encoder, and so the reference codes, as they were; the derived
  tensors are rounded once from the float32 weights; states follow the decoder's dtype; the audio
  is float32 whatever the decoder's dtype.
* The float32 path is unchanged: loading is bit for bit what it was before the decoder had a
  dtype of its own, `set_decoder_dtype(torch.float32)` is a no-op, and the official parity holds.
* `warm_up` writes nothing a later request sees: parameters, buffers, live states and later
  results are bit for bit the same.
(bfloat16 accuracy: tests/qwen3/test_streaming_decoder.py.)
"""

from __future__ import annotations

import itertools
from functools import cache
from pathlib import Path

import pytest
import torch

from tts_core.models.qwen3_tts.codec import CodecDecoder, SpeechTokenizer
from tts_core.models.qwen3_tts.codec.layers import SnakeBeta
from tts_core.models.qwen3_tts.codec.quantizer import effective_codebook

from .conftest import check_fp32


def _load(checkpoint: Path) -> SpeechTokenizer:
    return SpeechTokenizer.from_folder(checkpoint / "speech_tokenizer")


@cache
def _shared(checkpoint: Path) -> SpeechTokenizer:
    """float32, read-only."""
    return _load(checkpoint)


def _codes(frames: int, size: int, seed: int) -> torch.Tensor:
    return torch.randint(0, size, (1, 16, frames), generator=torch.Generator().manual_seed(seed))


def _stream(decoder: CodecDecoder, codes: torch.Tensor, schedule, state=None) -> torch.Tensor:
    state = decoder.init_state(1) if state is None else state
    pieces, start = [], 0
    for size in itertools.cycle(schedule):
        if start >= codes.shape[-1]:
            break
        pieces.append(decoder.decode_step(codes[..., start : start + size], state))
        start += size
    return torch.cat(pieces, dim=-1)


def _tensors(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter and buffer, persistent or not."""
    return dict(itertools.chain(module.named_parameters(), module.named_buffers()))


def test_set_decoder_dtype_converts_only_the_decoder(tiny_checkpoint: Path, ref_clip) -> None:
    reference = _shared(tiny_checkpoint)
    tok = _load(tiny_checkpoint).set_decoder_dtype(torch.bfloat16)
    assert tok.decoder_dtype == tok.decoder.dtype == torch.bfloat16
    assert {t.dtype for t in _tensors(tok.decoder).values()} == {torch.bfloat16}
    assert {t.dtype for t in _tensors(tok.encoder).values() if t.is_floating_point()} == {
        torch.float32
    }
    # reference clips still give the float32 encoder's codes (the official ones, see
    # test_codec_encoder.py)
    audio, rate = ref_clip
    assert torch.equal(tok.encode(audio, rate), reference.encode(audio, rate))
    # derived tensors: computed from the float32 weights, then rounded once
    for group in ("rvq_first", "rvq_rest"):
        wide = getattr(reference.decoder.quantizer, group)
        books = torch.stack(
            [
                effective_codebook(h._codebook.embedding_sum, h._codebook.cluster_usage)
                for h in wide.vq.layers
            ]
        )
        assert torch.equal(getattr(tok.decoder.quantizer, group).codebooks, books.bfloat16())
    snakes = zip(
        (m for m in reference.decoder.modules() if isinstance(m, SnakeBeta)),
        (m for m in tok.decoder.modules() if isinstance(m, SnakeBeta)),
        strict=True,
    )
    for wide, narrow in snakes:
        assert torch.equal(narrow.alpha_exp, wide.alpha_exp.bfloat16())
        assert torch.equal(narrow.inv_beta, wide.inv_beta.bfloat16())
    # audio comes back float32 on every path
    codes = _codes(5, tok.config.decoder.codebook_size, seed=1)
    assert tok.decode(codes[0].T).dtype == torch.float32
    assert tok.decoder(codes).dtype == torch.float32
    state = tok.decoder.init_state(1)
    assert state.dtype == torch.bfloat16
    assert tok.decoder.decode_step(codes, state).dtype == torch.float32
    with pytest.raises(TypeError, match="floating"):
        tok.set_decoder_dtype(torch.int8)


def test_float32_path_is_unchanged(tiny_checkpoint: Path, goldens) -> None:
    tok = _load(tiny_checkpoint)
    # loading as before decoders had their own dtype: cast everything, then derive
    old = SpeechTokenizer(tok.config)
    old.load_state_dict(tok.state_dict())
    old.to(dtype=torch.float32)
    old.decoder.refresh_derived()
    old.encoder.refresh_derived()
    new_tensors, old_tensors = _tensors(tok), _tensors(old.eval())
    assert new_tensors.keys() == old_tensors.keys()
    for name, tensor in new_tensors.items():
        assert tensor.dtype == old_tensors[name].dtype, name
        assert torch.equal(tensor, old_tensors[name]), name
    codes = goldens["decoder_codes"]
    wav = tok.decode(codes)
    assert torch.equal(wav, old.decode(codes))
    # a float32 -> float32 conversion touches nothing
    pointers = {name: t.data_ptr() for name, t in _tensors(tok.decoder).items()}
    assert tok.set_decoder_dtype(torch.float32) is tok
    assert pointers == {name: t.data_ptr() for name, t in _tensors(tok.decoder).items()}
    assert torch.equal(tok.decode(codes), wav)
    assert wav.dtype == torch.float32
    check_fp32(wav, goldens, "decoder_wav")  # official parity, as test_codec_decoder.py
    streamed = _stream(tok.decoder, codes.T[None], [2, 6])[0]
    assert torch.equal(streamed, _stream(old.decoder, codes.T[None], [2, 6])[0])


def test_states_follow_the_decoder_dtype(tiny_checkpoint: Path) -> None:
    tok = _load(tiny_checkpoint)
    codes = _codes(9, tok.config.decoder.codebook_size, seed=2)
    early = tok.decoder.init_state(1)  # made before the conversion: float32
    tok.set_decoder_dtype(torch.bfloat16)
    assert early.dtype == torch.float32
    converted = _stream(tok.decoder, codes, [2], early)
    assert early.dtype == torch.bfloat16
    assert all(h.buffer.dtype == torch.bfloat16 for h in early.convs)
    assert all(w.values.dtype == torch.bfloat16 for w in early.attention)
    assert torch.equal(converted, _stream(tok.decoder, codes, [2]))  # zeros convert exactly
    assert early.to_(torch.float64).dtype == torch.float64  # explicit conversion


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_warm_up_changes_nothing_a_later_request_sees(tiny_checkpoint: Path, dtype) -> None:
    decoder = _load(tiny_checkpoint).set_decoder_dtype(dtype).decoder
    size = decoder.config.codebook_size
    prefix, rest = _codes(7, size, seed=3), _codes(10, size, seed=4)
    before = _stream(decoder, rest, [2, 6])
    live = decoder.init_state(1)  # a stream in flight during the warm-up (e.g. an ICL voice)
    decoder.decode_step(prefix, live)
    live_copy = live.clone()
    tensors = {name: t.clone() for name, t in _tensors(decoder).items()}

    seconds = decoder.warm_up((2, 6))

    assert sorted(seconds) == [2, 6] and all(s > 0 for s in seconds.values())
    assert all(torch.equal(t, tensors[name]) for name, t in _tensors(decoder).items())
    assert live.frames_seen == live_copy.frames_seen == 7
    for ours, copy in zip(live.convs, live_copy.convs, strict=True):
        assert torch.equal(ours.buffer, copy.buffer)
    for ours, copy in zip(live.attention, live_copy.attention, strict=True):
        assert ours.length == copy.length
        assert torch.equal(ours.keys, copy.keys) and torch.equal(ours.values, copy.values)
    assert torch.equal(_stream(decoder, rest, [2, 6]), before)
    with pytest.raises(ValueError, match=">= 1"):
        decoder.warm_up((0,))


@pytest.mark.parametrize("native", [None, "AVX512_BF16", "AMX"])
def test_the_backend_picks_the_decoder_dtype_by_cpu_flags_not_timing(
    tiny_checkpoint, monkeypatch, native
) -> None:
    """bfloat16 only with native bf16 (real timings: BENCHMARKS.md), and never by a timing: a
    timed choice made a seeded request's bytes depend on the machine's load at start."""
    from tts_core.backends import qwen3

    monkeypatch.setattr(qwen3, "_native_bf16_cpu", lambda: native)
    backend = qwen3.Qwen3Backend.load(str(tiny_checkpoint), "cpu", quantize="none")
    want = torch.float32 if native is None else torch.bfloat16
    assert backend.model.speech_tokenizer.decoder_dtype == want
