"""Our Perth implicit watermark (tts_core/audio/perth_watermark.py) against the official
resemble-perth 1.0.1 `PerthImplicitWatermarker` (tests/fixtures/perth-watermark.golden.npz, by
tools/oracle/chatterbox/make_watermark_goldens.py: 2.5 s of the reference clip at 24 kHz), its
streamed form (StreamWatermarker) and the Chatterbox model's whole-clip watermark.

Error model (tests/qwen3/conftest.py, "Float error model"): the oracle records per key
E = max |golden_fp32 - the official modules rerun in float64| on the same input, floored here at
4 roundings of the golden's largest value (a scalar's one error is a poor estimate of another
run's). Ours is another float32 evaluation of the same operations (soxr's resampler, the STFT,
the convolutions, the iSTFT) whose kernels (AVX2, AVX-512, NEON; 1 or N threads) order the
roundings differently but do not change their size, so |ours - exact| <= FP32_SPREAD E and
|ours - golden| <= (1 + FP32_SPREAD) E = 5 E. soxr's soxr_hq computes in single precision even
on float64 input, so E holds none of its rounding; another CPU's soxr (SSE / AVX / NEON kernels)
rounds its output differently by a few float32 ulps, and such a perturbation moves the result
by less than 1 E (measured: 1 and 4 ulp random perturbations of the 32 kHz signal moved the
24 kHz result by 0.63 E and 0.75 E). Measured here (Xeon with AVX-512): ours bit-identical to
the golden with one thread, within 0.6 E with two; the oracle's two-thread rerun within 0.6 E
of its one-thread golden. The detector's polyphase resampler is computed in float64 (scipy's
rounds in float32); the raw scores are within 0.62 E (E over 13 scores, 2.7e-7) with torch's
AVX-512, AVX2 (ATEN_CPU_CAPABILITY=avx2, ONEDNN_MAX_CPU_ISA=AVX2) and default kernels, and the
watermarked audio within 0.8 E. ARM (NEON) was not run: its kernels differ from these in the
same way (order of float32 roundings), which the 5 E bound is for.
"""

from __future__ import annotations

import math
from functools import cache
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch
from qwen3.conftest import FP32_SPREAD, U32

from tts_core.audio import perth_watermark
from tts_core.audio.analysis import resample
from tts_core.audio.perth_watermark import (
    AUDIO_PROCESSOR_KEYS,
    PerthHparams,
    PerthNet,
    PerthUnavailable,
    PerthWatermarker,
    StreamWatermarker,
    _kaiser_lowpass,
    perth_folder,
    read_hparams,
    resample_poly,
    stream_watermarker,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
SR = 24_000


@cache
def goldens() -> dict[str, np.ndarray]:
    with np.load(FIXTURES / "perth-watermark.golden.npz") as data:
        return {key: data[key] for key in data.files}


@cache
def marker() -> PerthWatermarker:
    return perth_watermark.shared_watermarker()


def bound(key: str) -> float:
    """(1 + FP32_SPREAD) E; a score's E is the largest error over 13 scores (one scalar's own
    error varies 50x between inputs: 4e-9 to 3e-7)."""
    g = goldens()
    error = max(float(g[f"fp32_error_{key}"]), 4 * U32 * float(np.abs(g[key]).max()))
    if key.startswith("score_"):
        error = max(error, float(g["fp32_error_scores"]))
    return (1 + FP32_SPREAD) * error


def check(ours: np.ndarray | float, key: str) -> None:
    golden = goldens()[key].astype(np.float64)
    ours = np.asarray(ours, dtype=np.float64)
    assert ours.shape == golden.shape, (ours.shape, golden.shape)
    error = float(np.abs(ours - golden).max())
    assert error <= bound(key), f"{key}: max |ours - official| {error:.3g} > {bound(key):.3g}"


def hp_spike(y: np.ndarray, ref: np.ndarray, half: int = SR // 1000) -> float:
    """Largest ratio (dB) of y's high-pass energy (2nd difference squared) over ref's in any
    +-1 ms window: a click in y that ref lacks is a spike (benchmarks/perth_stream_bench.py)."""
    window = np.ones(2 * half)
    ey = np.convolve(np.diff(y.astype(np.float64), 2) ** 2, window, "valid")
    er = np.convolve(np.diff(ref.astype(np.float64), 2) ** 2, window, "valid")
    return float(10 * np.log10(np.max((ey + 1e-12) / (er + 1e-12))))


# ------------------------------------------------------------------------ against the official
def test_hparams_and_weights_come_from_the_installed_package():
    folder = perth_folder()
    assert folder.parts[-3:] == ("perth_net", "pretrained", "implicit")
    hp = read_hparams(folder / "hparams.yaml")
    assert (hp.sample_rate, hp.n_fft, hp.hop_size, hp.subband) == (32000, 2048, 320, 128)
    assert marker().step == 250_000


def test_apply_equals_the_official_step_by_step():
    g = goldens()
    net, sub = marker().net, marker().hp.subband
    audio_32k = resample(g["audio_24k"], SR, 32000)
    check(audio_32k, "audio_32k")  # librosa's soxr_hq: the same call, bit for bit
    with torch.inference_mode():
        mag, phase = net.magphase(torch.from_numpy(audio_32k))
        enc = net.encoder(mag[None])[0]
        wm_32k = net.signal(enc, phase, None).numpy()
    check(mag[:sub].numpy(), "mag_sub")
    check(enc[:sub].numpy(), "enc_sub")
    check(wm_32k, "wm_32k")  # hop x (n // hop) samples: 80000 of 80014
    ours = marker().apply(g["audio_24k"], SR)
    assert ours.dtype == np.float32 and ours.shape == (60_000,)  # the official's length: shorter
    check(ours, "wm_24k")


def test_detector_raw_output_equals_the_officials():
    g = goldens()
    check(marker().score(g["audio_24k"], SR), "score_plain")
    check(marker().score(g["wm_24k"], SR), "score_wm")
    check(marker().score(g["wm_24k"][:7200], SR), "score_wm_head")  # 0.3 s


def test_detector_finds_our_watermark_and_not_on_plain_audio():
    g = goldens()
    ours = marker().apply(g["audio_24k"], SR)
    assert marker().detect(ours, SR) == 1.0
    assert marker().detect(g["audio_24k"], SR) == 0.0
    kept = marker().apply(g["audio_24k"], SR, keep_length=True)
    assert kept.shape == g["audio_24k"].shape and marker().detect(kept, SR) == 1.0
    # at the model's own rate no resampling happens; other rates go through it
    assert marker().detect(marker().apply(resample(g["audio_24k"], SR, 32000), 32000), 32000) == 1
    at_44k = marker().apply(resample(g["audio_24k"], SR, 44100), 44100)
    assert marker().detect(at_44k, 44100) == 1.0


@pytest.mark.parametrize(
    ("up", "down", "n"), [(4, 3, 60_010), (4, 3, 7), (320, 441, 20_001), (2, 1, 999), (5, 5, 10)]
)
def test_resample_poly_equals_scipys(up, down, n):
    """scipy (float32: every product and sum rounded) vs ours (float64, one rounding): each
    output sums at most L = ceil(taps / up) + 1 products, so scipy errs by at most
    L u32 sum|h_phase| max|x| (Higham's gamma_L) plus the final rounding of both."""
    from scipy.signal import resample_poly as scipy_resample_poly

    x = np.random.default_rng(n).standard_normal(n).astype(np.float32) * 0.3
    ours, theirs = resample_poly(x, up, down), scipy_resample_poly(x, up, down)
    assert ours.dtype == theirs.dtype == np.float32 and ours.shape == theirs.shape
    g = math.gcd(up, down)
    up, down = up // g, down // g
    h = _kaiser_lowpass(20 * max(up, down) + 1, 1 / max(up, down)) * up if up != down else [1]
    gain = max(float(np.abs(h[p::up]).sum()) for p in range(up))  # largest sum|h| of a phase
    limit = ((math.ceil(len(h) / up) + 1) * gain + 2) * U32 * float(np.abs(x).max())
    assert float(np.abs(ours.astype(np.float64) - theirs).max()) <= limit


# ------------------------------------------------------------------------ loading
def _tiny_net_checkpoint(path: Path, extra: dict | None = None, drop: str = "") -> Path:
    hp = PerthHparams(32000, 2048, 320, 2048, "hann", 1e-9, 2000, 8)
    state = dict(PerthNet(hp).state_dict())
    window = torch.hann_window(2048)
    state.update(
        {
            AUDIO_PROCESSOR_KEYS[0]: window,
            AUDIO_PROCESSOR_KEYS[1]: window,
            AUDIO_PROCESSOR_KEYS[2]: torch.zeros(1025, 1),
        }
    )
    state.update(extra or {})
    state.pop(drop, None)
    torch.save({"model": state, "step": 7}, path)
    return path


def test_checkpoint_keys_are_strict(tmp_path):
    hp = PerthHparams(32000, 2048, 320, 2048, "hann", 1e-9, 2000, 8)
    assert PerthNet(hp).load_checkpoint(_tiny_net_checkpoint(tmp_path / "ok.pth.tar")) == 7
    cases = {
        "extra": ({"decoder.more": torch.zeros(1)}, ""),
        "missing": (None, "encoder.layers.0.conv.bias"),
        "no window": (None, AUDIO_PROCESSOR_KEYS[1]),
        "other window": ({AUDIO_PROCESSOR_KEYS[0]: torch.hann_window(2048, periodic=False)}, ""),
    }
    for name, (extra, drop) in cases.items():
        path = _tiny_net_checkpoint(tmp_path / f"{name}.pth.tar", extra, drop)
        with pytest.raises((RuntimeError, ValueError)):
            PerthNet(hp).load_checkpoint(path)


def test_without_resemble_perth_the_error_says_how_to_install(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "perth" else real(name, *a)
    )
    monkeypatch.setattr(perth_watermark, "_shared", None)
    with pytest.raises(PerthUnavailable, match=r"tts-core\[chatterbox-watermark\]"):
        stream_watermarker()
    assert not perth_watermark.perth_available()


def test_too_short_is_refused_as_the_official_would_fail():
    with pytest.raises(ValueError, match="too short"):
        marker().apply(np.zeros(700, np.float32), SR)  # 934 samples at 32 kHz < 1025


# ------------------------------------------------------------------------ streams
def _stream(audio: np.ndarray, sizes: list[int], marked: StreamWatermarker) -> list[np.ndarray]:
    cuts = np.cumsum(sizes)[:-1]
    pieces = np.split(audio, cuts)
    return [marked.push(p, final=i == len(pieces) - 1) for i, p in enumerate(pieces)]


@cache
def speech_clip() -> np.ndarray:
    """The 7 s reference clip at 24 kHz (benchmarks/perth_stream_bench.py's)."""
    clip, rate = sf.read(FIXTURES / "chatterbox-ref-44k.wav", dtype="float32")
    return resample(clip, rate, SR)


@pytest.mark.parametrize(("first", "later"), [(0.32, 1.0), (0.4, 0.4)])
def test_streamed_watermark_is_found_without_clicks_at_the_joins(first, later):
    """Chunks of `first` s, then `later` s (0.32 / 1: the backends' default): the joined stream
    has every sample, carries the watermark, and no +-1 ms window has more high-pass energy than
    the whole-clip watermark's (a click); each chunk marked alone and concatenated has 12-13 dB
    more at some join (BENCHMARKS.md), so the measure can fail."""
    audio = speech_clip()
    sizes = [int(first * SR)]
    while sum(sizes) < audio.size:
        sizes.append(min(int(later * SR), audio.size - sum(sizes)))
    out = _stream(audio, sizes, stream_watermarker())
    joined = np.concatenate(out)
    assert joined.shape == audio.shape and joined.dtype == np.float32
    assert marker().detect(joined, SR) == 1.0
    whole = marker().apply(audio, SR, keep_length=True)
    assert hp_spike(joined, whole) < 0.5
    naive = np.concatenate(
        [marker().apply(p, SR, keep_length=True) for p in np.split(audio, np.cumsum(sizes)[:-1])]
    )
    assert hp_spike(naive, whole) > 6.0


def test_stream_holds_back_one_token_and_releases_it_at_the_end():
    audio = goldens()["audio_24k"][: 4 * 960 + 100]
    marked = stream_watermarker()
    first = marked.push(audio[:1920])
    assert first.size == 960 and marked.held == 960
    assert marked.push(audio[1920:1950]).size == 30  # a short chunk: passes with its context
    rest = marked.push(audio[1950:], final=True)
    assert marked.held == 0 and first.size + 30 + rest.size == audio.size
    tiny = stream_watermarker().push(audio[:300], final=True)  # too short to mark: unchanged
    np.testing.assert_array_equal(tiny, audio[:300])


# ------------------------------------------------------------------------ the model
def test_the_models_whole_clip_watermark_is_the_officials():
    """model.apply_watermark on the official's pre-watermark generation (chatterbox-turbo-tiny-a
    goldens) against its watermarked one; bound: 5 E with E scaled from the speech golden's
    wm_24k by the clips' peaks (the error is relative to the signal's scale)."""
    from tts_core.models.chatterbox.model import apply_watermark

    with np.load(FIXTURES / "chatterbox-turbo-tiny-a.golden.npz") as data:
        raw, official = data["gen_wav_raw"], data["gen_wav"]
    ours = apply_watermark(raw)
    assert ours.shape == official.shape
    g = goldens()
    relative = bound("wm_24k") / float(np.abs(g["wm_24k"]).max())
    assert float(np.abs(ours - official).max()) <= relative * float(np.abs(official).max())
    assert marker().detect(ours, SR) == 1.0 and marker().detect(raw, SR) == 0.0


def test_the_backends_stream_is_watermarked_per_chunk_by_default():
    """The Turbo backend (the English one inherits its stream) with its default knobs: the
    model's own chunks through StreamWatermarker, bit for bit, detected; watermark=0: the
    model's chunks untouched, not detected."""
    import threading

    from tts_core.backends.chatterbox import ChatterboxBackend
    from tts_core.engine import SynthesisParams
    from tts_core.models.chatterbox.chunking import StreamChunking

    from .conftest import shared_model

    folder = FIXTURES / "chatterbox-turbo-tiny-a"
    model = shared_model(folder)
    backend = ChatterboxBackend(model, folder.name, "cpu")
    text = "how are you today?"
    try:
        voice = backend.create_voice(None, None)
        runs = [
            list(
                backend.stream(
                    text,
                    voice,
                    SynthesisParams(seed=3, first_chunk_tokens=6, chunk_tokens=10, **knob),
                    threading.Event(),
                )
            )
            for knob in ({}, {"watermark": 0})
        ]
    finally:
        backend.close()
    chunks = list(model.stream(text, None, seed=3, chunking=StreamChunking(6, 10)))
    marking = stream_watermarker()
    expected = [marking.push(c.audio, c.final) for c in chunks]
    marked, plain = ([c.audio for c in run] for run in runs)
    assert len(marked) == len(chunks) > 2
    for ours, theirs in zip(marked, expected, strict=True):
        np.testing.assert_array_equal(ours, theirs)
    assert [c.frames for c in runs[0]] == [a.size // 960 for a in expected]
    for ours, chunk in zip(plain, chunks, strict=True):
        np.testing.assert_array_equal(ours, chunk.audio)
    assert marker().detect(np.concatenate(marked), SR) == 1.0
    assert marker().detect(np.concatenate(plain), SR) == 0.0
