"""The streamed decoder against our full decode of the same generation (the official's, within
5 E: test_generate.py).

* transformer, KV-cached block by block: within 2 x FP32_SPREAD E of the full pass (two float32
  evaluations of one network; E = the golden decoder transformer's `decoder_hidden` error),
* waveform, windowed CNN: the same length as the full decode; its error (what the windows cut
  from the CNN's context, not float rounding) measured over window settings, the default
  bounded by SNR."""

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
            cache[folder] = generate(lm, tokenizer, prompt_of(goldens), normalize_text(TEXT),
                                     options, torch.Generator().manual_seed(15))  # fmt: skip
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
