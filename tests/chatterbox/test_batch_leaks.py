"""The three padded-batch leaks an R port of Chatterbox found, each as a test that a row's S3Gen
output is the same alone and in one padded batch with a longer and a shorter neighbour
(models/chatterbox/padded_s3gen.py: `padded_cfm`, `padded_hift_decode`, `padded_s3gen_push`):

1. prompt_token_len shaped (1, 1) (as the official keeps it) added to (B,) token lengths
   broadcasts to (1, B), and make_pad_mask then reads ONE row: the batch's masks collapse.
2. The CFM estimator's transformer blocks run unmasked: attention is bidirectional, so a
   shorter row's valid frames attend to its padded tail.
3. The batched output is trimmed per row: every row's mel and waveform has exactly its alone
   length, and its last frames/samples (next to the padding) are its own (HiFT's convs read
   neighbours: the padded tail is re-zeroed after every conv).

Bounds (tests/qwen3/conftest.py's float error model): the padded call and the row's call alone
are two float32 evaluations of the same function (bits differ here: the kernels block a longer
T differently), so |padded - alone| <= 2 FP32_SPREAD E, with E = max |alone_fp32 - alone_fp64|
measured now on the row alone in float64 (same inputs), floored at 4 roundings of its largest
value. Each leak, put back, moves the row far outside that bound (asserted: the tests see it).
"""

from __future__ import annotations

import copy
from functools import cache

import numpy as np
import pytest
import torch
from qwen3.conftest import FP32_SPREAD, U32

from tts_core.models.chatterbox.flow import TOKEN_MEL_RATIO
from tts_core.models.chatterbox.hift import SAMPLES_PER_FRAME
from tts_core.models.chatterbox.padded_s3gen import (
    cfm_row,
    make_pad_mask,
    padded_cfm,
    padded_hift_decode,
    padded_s3gen_push,
    row_lengths,
)
from tts_core.models.chatterbox.streaming import (
    FlowChunker,
    HiftStream,
    S3GenStream,
    StreamChunking,
    StreamNoise,
)
from tts_core.models.chatterbox.voice import ChatterboxVoice

from .conftest import shared_model

TOKENS = (23, 9, 15)  # generated tokens per row: row 0 longest, row 1 shortest


@pytest.fixture(autouse=True)
def _inference_mode():
    with torch.inference_mode():
        yield


def official_make_pad_mask(lengths: torch.Tensor, max_len: int = 0) -> torch.Tensor:
    """The official's (cosyvoice/utils/mask.py) make_pad_mask, as it is."""
    batch_size = lengths.size(0)
    max_len = max_len if max_len > 0 else lengths.max().item()
    seq_range = torch.arange(0, max_len, dtype=torch.int64, device=lengths.device)
    seq_range_expand = seq_range.unsqueeze(0).expand(batch_size, max_len)
    seq_length_expand = lengths.unsqueeze(-1)
    return seq_range_expand >= seq_length_expand


def bound_of(alone32: torch.Tensor, alone64: torch.Tensor) -> float:
    e = float((alone32.double() - alone64).abs().max())
    return 2 * FP32_SPREAD * max(e, 4 * U32 * float(alone64.abs().max()))


@cache
def _f64(folder):
    model = shared_model(folder)
    flow64, hift64 = copy.deepcopy(model.flow).double(), copy.deepcopy(model.hift).double()
    window = hift64._window
    hift64._window = lambda device: window(device).double()  # the STFT window in float64 too
    return flow64, hift64


def _voices(model) -> list[ChatterboxVoice]:
    """Three voices with other prompt lengths: the built-in one, its prompt cut to 150 tokens
    (an even mel), and cut to 131 tokens with an odd mel length (the prompt's last token leads
    by one frame)."""
    v = model.builtin_voice

    def cut(tokens: int, mels: int) -> ChatterboxVoice:
        return ChatterboxVoice(
            v.speaker_emb,
            v.t3_prompt_tokens,
            v.prompt_token[:, :tokens],
            v.prompt_feat[:, :mels],
            v.embedding.flip(1),
        )

    return [v, cut(150, 300), cut(131, 261)]


def _rows(folder, seed: int = 0):
    model = shared_model(folder)
    generator = torch.Generator().manual_seed(seed)
    rows = []
    for voice, n in zip(_voices(model), TOKENS, strict=True):
        noise = StreamNoise(seed, 64, TOKEN_MEL_RATIO * voice.prompt_token.shape[1])
        chunker = FlowChunker(model.flow, voice, noise)
        tokens = torch.randint(0, 6561, (1, n), generator=generator)
        rows.append((cfm_row(model.flow, chunker, tokens), chunker, tokens))
    return rows


def _alone(flow, row, dtype=torch.float32) -> torch.Tensor:
    mask = torch.ones(1, 1, row.mu.shape[2], dtype=dtype)
    parts = (row.z.to(dtype), row.mu.to(dtype), row.spks.to(dtype), row.cond.to(dtype))
    with torch.inference_mode():
        return flow._euler(parts[0], parts[1], mask, parts[2], parts[3])[..., row.prompt_mels :]


def test_cfm_row_is_flow_inference(tiny_folder) -> None:
    """The padded path's per-row inputs are Flow.inference's (bit for bit, alone)."""
    model = shared_model(tiny_folder)
    for row, chunker, tokens in _rows(tiny_folder):
        voice, n = chunker.voice, tokens.shape[1]
        with torch.inference_mode():
            mel = model.flow.inference(
                tokens,
                voice.prompt_token,
                voice.prompt_feat,
                voice.embedding,
                None,
                noise=chunker.noise.mel[..., : 2 * n],
                prompt_noise=chunker.noise.prompt,
            )
        assert torch.equal(_alone(model.flow, row), mel)
        assert torch.equal(padded_cfm(model.flow, [row])[0], mel)  # one row: no padding


# ------------------------------------------------------------------ leak 1: (1, 1) lengths
def test_leak1_a_1x1_prompt_token_len_cannot_collapse_the_batch() -> None:
    prompt_token_len = torch.tensor([[162]])  # the official's shape
    token_len = torch.tensor(list(TOKENS))
    naive = prompt_token_len + token_len  # (1, 3): the broadcast
    assert naive.shape == (1, 3)
    collapsed = official_make_pad_mask(naive)
    assert collapsed.shape[0] == 1  # one "row" holding the three lengths: the batch collapsed
    with pytest.raises(ValueError, match=r"\(B,\)"):
        make_pad_mask(naive)
    lengths = row_lengths([prompt_token_len, torch.tensor([150]), torch.tensor(131)], TOKENS)
    assert lengths.tolist() == [162 + 23, 150 + 9, 131 + 15]
    mask = ~make_pad_mask(lengths)
    assert mask.shape == (3, 185) and mask.sum(1).tolist() == lengths.tolist()
    assert torch.equal(make_pad_mask(lengths), official_make_pad_mask(lengths))  # (B,): same


def test_leak1_rows_with_other_prompt_lengths_in_one_padded_solve(tiny_folder) -> None:
    model = shared_model(tiny_folder)
    flow64, _ = _f64(tiny_folder)
    rows = [row for row, _, _ in _rows(tiny_folder)]
    assert len({row.prompt_mels for row in rows}) == 3 and len({r.mu.shape[2] for r in rows}) == 3
    with torch.inference_mode():
        together = padded_cfm(model.flow, rows)
    for row, mel in zip(rows, together, strict=True):
        alone = _alone(model.flow, row)
        assert mel.shape == alone.shape  # trimmed to its own prompt and length (leak 3 too)
        error = float((mel - alone).abs().max())
        assert error <= bound_of(alone, _alone(flow64, row, torch.float64)), error


# ------------------------------------------------------------------ leak 2: unmasked blocks
def test_leak2_unmasked_transformer_blocks_bleed_the_padding_in(tiny_folder) -> None:
    model = shared_model(tiny_folder)
    flow64, _ = _f64(tiny_folder)
    rows = [row for row, _, _ in _rows(tiny_folder, seed=1)]
    with torch.inference_mode():
        masked = padded_cfm(model.flow, rows)
        unmasked = padded_cfm(model.flow, rows, mask_attention=False)
    for index, row in enumerate(rows):
        alone = _alone(model.flow, row)
        bound = bound_of(alone, _alone(flow64, row, torch.float64))
        assert float((masked[index] - alone).abs().max()) <= bound
        leak = float((unmasked[index] - alone).abs().max())
        if index == 0:  # the longest row has no padding to attend to
            assert leak <= bound
        else:  # the shorter rows' valid frames attended to their padded tails
            assert leak > 1000 * bound, (index, leak, bound)


# ------------------------------------------------------------------ leak 3: per-row trimming
def _hift_inputs(folder):
    """Real HiFT windows: each row's generated mel (alone) through a fresh HiftStream, final."""
    model = shared_model(folder)
    out = []
    for row, chunker, _ in _rows(folder, seed=2):
        stream = HiftStream(model.hift, chunker.noise)
        mel, source, _, _ = stream.window(_alone(model.flow, row), final=True)
        out.append((mel, source))
    return out


def test_leak3_padded_hift_rows_are_trimmed_to_their_own_samples(tiny_folder) -> None:
    model = shared_model(tiny_folder)
    _, hift64 = _f64(tiny_folder)
    inputs = _hift_inputs(tiny_folder)
    assert len({mel.shape[2] for mel, _ in inputs}) == 3
    with torch.inference_mode():
        waves = padded_hift_decode(model.hift, *zip(*inputs, strict=True))
        # the leak: one plain decoder call over the padded batch, then cut per row
        longest = max(mel.shape[2] for mel, _ in inputs)
        mels = torch.cat([torch.nn.functional.pad(m, (0, longest - m.shape[2])) for m, _ in inputs])
        sources = torch.cat(
            [torch.nn.functional.pad(s, (0, 480 * longest - s.shape[2])) for _, s in inputs]
        )
        plain = model.hift.decode(mels, sources)
    for index, ((mel, source), wave) in enumerate(zip(inputs, waves, strict=True)):
        with torch.inference_mode():
            alone = model.hift.decode(mel, source)[0]
            alone64 = hift64.decode(mel.double(), source.double())[0]
        assert wave.shape == alone.shape == (SAMPLES_PER_FRAME * mel.shape[2],)
        bound = bound_of(alone, alone64)
        assert float((wave - alone).abs().max()) <= bound
        tail = slice(-SAMPLES_PER_FRAME, None)  # the last frame's samples, next to the padding
        assert float((wave[tail] - alone[tail]).abs().max()) <= bound
        leak = float((plain[index, : alone.shape[0]] - alone).abs().max())
        if mel.shape[2] < longest:
            assert leak > 100 * bound, (index, leak, bound)


def _streams(folder, chunking: StreamChunking) -> list[S3GenStream]:
    model = shared_model(folder)
    streams = []
    for seed, voice in enumerate(_voices(model)):
        noise = StreamNoise(seed, 80, TOKEN_MEL_RATIO * voice.prompt_token.shape[1])
        streams.append(S3GenStream(model.flow, model.hift, voice, noise, chunking))
    return streams


def test_leak3_padded_push_keeps_every_rows_samples_and_state(tiny_folder) -> None:
    """Whole pushes (a stream's S3Gen step) of three rows over three rounds, non-final then
    final, against each row's S3GenStream.push: the same sample counts every round (the
    per-row trimming and the streams' emitted-frame books), audio within the batching SNR."""
    model = shared_model(tiny_folder)
    chunking = StreamChunking(first_tokens=6, chunk_tokens=8)
    padded, alone = _streams(tiny_folder, chunking), _streams(tiny_folder, chunking)
    generator = torch.Generator().manual_seed(3)
    tokens = [torch.randint(0, 6561, (1, 40 + 7 * i), generator=generator) for i in range(3)]
    for count, final in ((10, False), (25, False), (None, True)):
        jobs = [
            (s, t if count is None else t[:, : count + 5 * i], final)
            for i, (s, t) in enumerate(zip(padded, tokens, strict=True))
        ]
        got = padded_s3gen_push(model.flow, model.hift, jobs)
        for (_, t, _), stream, wave in zip(jobs, alone, got, strict=True):
            with torch.inference_mode():
                want = stream.push(t, final)
            assert wave.shape == want.shape
            if want.numel():
                reference = want.double()
                error = float(((wave.double() - reference) ** 2).sum())
                snr = 10 * np.log10(float((reference**2).sum()) / max(error, 1e-30))
                assert snr >= 90.0, snr  # test_batching.PADDED_SNR_DB
    for a, b in zip(padded, alone, strict=True):
        assert (a.flow.emitted, a.hift.emitted) == (b.flow.emitted, b.hift.emitted)
