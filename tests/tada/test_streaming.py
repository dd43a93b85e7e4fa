"""The streamed decoder against our full decode of the same generation (the official's, within
5 E: test_generate.py).

* transformer, KV-cached block by block: within 2 x FP32_SPREAD E of the full pass (two float32
  evaluations of one network; E = the golden decoder transformer's `decoder_hidden` error),
* waveform, windowed CNN: the same length as the full decode; its error (what the windows cut
  from the CNN's context, not float rounding) measured over window settings: the SNR grows
  with the window, the default (20, 15) above 60 dB, (40, 30) above 100 dB, and the engine's
  chunk cadences (model.stream) keep those floors."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from qwen3.conftest import FP32_SPREAD

from tts_core.models.tada.checkpoint import load_decoder, load_lm
from tts_core.models.tada.flow_head import FlowOptions
from tts_core.models.tada.generate import GenerateOptions, expand_for_decoder, generate
from tts_core.models.tada.streaming import StreamingDecoder
from tts_core.models.tada.text import normalize_text
from tts_core.models.tada.tokenizer import TadaTokenizer

from .conftest import fp32_error
from .test_generate import TEXT, prompt_of


@pytest.fixture(scope="module")
def generated():
    return {}


def generation(folder, goldens, cache):
    if folder not in cache:
        lm = load_lm(folder / "model")
        tokenizer = TadaTokenizer.from_folder(folder / "model")
        options = GenerateOptions(flow=FlowOptions(noise_temperature=0.5))
        with torch.no_grad():
            cache[folder] = generate(
                lm,
                tokenizer,
                prompt_of(goldens),
                normalize_text(TEXT),
                options,
                torch.Generator().manual_seed(15),
            )
    return cache[folder]


def stream(decoder, out, left, lookahead, every: int = 1):
    streamer = StreamingDecoder(decoder, left, lookahead)
    state = streamer.start()
    pieces, before = [], out.time_before[0]
    for i in range(out.encoded.shape[0]):
        streamer.push_token(state, out.encoded[i], int(before[i]))
        if (i + 1) % every == 0:
            pieces.append(streamer.emit(state))
    pieces.append(streamer.finish(state, int(before[out.encoded.shape[0]])))
    return torch.cat(pieces), state


def test_cached_transformer_equals_full_pass(tiny_folder, goldens, generated):
    out = generation(tiny_folder, goldens, generated)
    decoder = load_decoder(tiny_folder / "codec")
    expanded, masks = expand_for_decoder(out.encoded, out.time_before[0])
    with torch.no_grad():
        full = decoder.hidden(expanded, masks)[0]
    _, state = stream(decoder, out, 20, 15)
    cached = torch.cat(state.hidden)
    error = float((cached - full).abs().max())
    bound = 2 * FP32_SPREAD * fp32_error(goldens, "decoder_hidden")
    print(f"cached vs full transformer: {error:.3g} (bound {bound:.3g})")
    assert cached.shape == full.shape and error <= bound


def snr_db(streamed: torch.Tensor, full: torch.Tensor) -> tuple[float, float]:
    ref = full.numpy().astype(np.float64)
    diff = streamed.numpy().astype(np.float64) - ref
    return float(np.abs(diff).max()), 10 * np.log10(np.sum(ref**2) / max(np.sum(diff**2), 1e-30))


def test_windowed_waveform_close_to_full(tiny_folder, goldens, generated):
    """Window settings swept (context, lookahead in frames of 20 ms); the default (20, 15) must
    keep the streamed waveform within 60 dB SNR of the full decode (measured on the tiny
    decoders: 90.8 dB, max error 7e-4). The CNN's receptive field is about +-10 frames at its
    first upsampling stage (kernel 7, dilations 1 3 9 at 4x), so short lookaheads fail."""
    out = generation(tiny_folder, goldens, generated)
    decoder = load_decoder(tiny_folder / "codec")
    expanded, masks = expand_for_decoder(out.encoded, out.time_before[0])
    with torch.no_grad():
        full = decoder.decode(expanded, masks)[0, 0]
    results = {}
    for left, lookahead in [(8, 4), (10, 10), (20, 15), (40, 30)]:
        streamed, _ = stream(decoder, out, left, lookahead)
        assert streamed.shape == full.shape
        results[left, lookahead] = snr_db(streamed, full)
        print(
            f"context {left} lookahead {lookahead}: max |streamed - full| "
            f"{results[left, lookahead][0]:.3g}, SNR {results[left, lookahead][1]:.1f} dB"
        )
    assert results[20, 15][1] > 60
    snrs = [results[setting][1] for setting in [(8, 4), (10, 10), (20, 15), (40, 30)]]
    assert snrs == sorted(snrs)  # more context never costs accuracy
    assert results[40, 30][1] > 100  # measured 121 / 126 dB: near float32 rounding


@pytest.mark.parametrize(
    ("window", "floor_db"),
    [((20, 15), 60), ((40, 30), 100)],  # measured (cadences below): 90.7-103.8 / 121-126 dB
)
def test_engine_chunking_keeps_the_window_bound(tiny_folder, goldens, window, floor_db):
    """model.stream (the engine, chunks of `first` then `every` tokens) against generate():
    the same length at every cadence, and the SNR floor of the window whatever the cadence (a
    chunk's samples are decoded with at least `context` frames before them and `lookahead`
    after, so longer chunks only add context). Printed: the tokens generated before the first
    non-empty chunk (what the lookahead costs in first audio, at 1-token chunks)."""
    from tts_core.models.tada.model import TadaModel

    from .test_generate import prompt_of

    model = TadaModel.from_folders(tiny_folder / "model", tiny_folder / "codec")
    options = GenerateOptions(flow=FlowOptions(noise_temperature=0.5))
    full = torch.from_numpy(model.generate(prompt_of(goldens), TEXT, options, seed=15))
    for first, every in [(1, 1), (2, 4), (3, 8)]:
        chunks = model.stream(
            prompt_of(goldens),
            TEXT,
            options,
            seed=15,
            context=window[0],
            lookahead=window[1],
            chunk_tokens=every,
            first_chunk_tokens=first,
        )
        chunks = list(chunks)
        streamed = torch.from_numpy(np.concatenate([chunk.audio for chunk in chunks]))
        if every == 1:
            sizes = [chunk.audio.size for chunk in chunks]
            waited = sum(c.tokens for c in chunks[: next(i for i, n in enumerate(sizes) if n)])
            print(f"window {window}: first audio after {waited + 1} tokens")
        assert streamed.shape == full.shape
        error, snr = snr_db(streamed, full)
        print(f"window {window} chunks {first}/{every}: max error {error:.3g}, SNR {snr:.1f} dB")
        assert snr > floor_db
