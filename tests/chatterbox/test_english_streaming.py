"""English-model streaming (`ChatterboxEnglishModel.stream`, Turbo's streaming.py generalised:
the flow re-run per chunk with the regular CFM) on both tiny English checkpoints: T3's draws are
generate's (and so the official's), the chunks cover the whole clip, and the streamed audio
approximates the whole-utterance pass over the same tokens with the same pre-drawn noise
(`generate(stream_noise=True)`) within a measured SNR.

SNR threshold: streaming S3Gen is an approximation (bidirectional attention over tokens not yet
drawn), so its error is measured, not derived: chunks of 10/25/50 tokens, seeds 1, 3, 14,
measured 58.6-105 dB on tiny-a and 42.5-61 dB on tiny-b (a single final pass: bit-equal). The
threshold is Turbo's (tests/chatterbox/test_streaming.py), well under those and far above what a
fault gives (audio a frame late: ~13 dB there).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tts_core.models.chatterbox.chunking import StreamChunking

from .english_common import TEXTS, case, each_checkpoint, english_model, seeds

STREAM_SNR_DB = 30.0


def snr_db(reference: np.ndarray, other: np.ndarray) -> float:
    error = float(np.sum((reference.astype(np.float64) - other) ** 2))
    return 10 * np.log10(float(np.sum(reference.astype(np.float64) ** 2)) / max(error, 1e-30))


@pytest.mark.parametrize("tokens", [10, 25])
@each_checkpoint
def test_stream_tokens_length_and_snr(name, tokens: int) -> None:
    english_folder, english_goldens = case(name)
    model = english_model(english_folder)
    seed = seeds(english_goldens)["gen"]
    chunking = StreamChunking(first_tokens=tokens, chunk_tokens=tokens)
    chunks = list(model.stream(TEXTS[0], seed=seed, chunking=chunking))
    exact = model.generate(TEXTS[0], seed=seed)
    reference = model.generate(TEXTS[0], seed=seed, stream_noise=True)
    streamed = torch.cat([c.tokens for c in chunks]).tolist()
    assert streamed == english_goldens["gen_draws"][:-1].tolist()  # the STOP draw left out
    assert exact.draws.tolist() == english_goldens["gen_draws"].tolist()
    assert reference.tokens.tolist() == exact.tokens.tolist()
    audio = np.concatenate([c.audio for c in chunks])
    assert audio.shape == exact.audio.shape == reference.audio.shape
    assert len(chunks) > 1 and [c.final for c in chunks] == [False] * (len(chunks) - 1) + [True]
    assert chunks[-1].stop_reason == "eos" and chunks[-1].t3_draws == len(exact.draws)
    assert snr_db(reference.audio, audio) >= STREAM_SNR_DB


@each_checkpoint
def test_one_final_pass_is_the_stream_noise_whole_pass(name) -> None:
    """With the first chunk past the last token and the flow's window unbounded, the stream
    makes one final pass: the very computation of generate(stream_noise=True)."""
    english_folder, english_goldens = case(name)
    model = english_model(english_folder)
    seed = seeds(english_goldens)["gen"]
    unbounded = StreamChunking(first_tokens=1000, flow_prompt=None, flow_context=None)
    chunks = list(model.stream(TEXTS[0], seed=seed, chunking=unbounded))
    reference = model.generate(TEXTS[0], seed=seed, stream_noise=True)
    assert len(chunks) == 1 and np.array_equal(chunks[0].audio, reference.audio)


@each_checkpoint
def test_max_new_tokens_in_stream(name) -> None:
    english_folder, english_goldens = case(name)
    model = english_model(english_folder)
    seed = seeds(english_goldens)["gen"]
    chunking = StreamChunking(first_tokens=4, chunk_tokens=4)
    chunks = list(model.stream(TEXTS[0], seed=seed, max_new_tokens=12, chunking=chunking))
    exact = model.generate(TEXTS[0], seed=seed, max_new_tokens=12)
    assert torch.cat([c.tokens for c in chunks]).tolist() == exact.draws.tolist()
    assert chunks[-1].stop_reason == exact.stop_reason == "max_tokens"
    assert sum(c.audio.size for c in chunks) == exact.audio.size
