"""tts_core.audio.analysis (numpy YIN, frame RMS, spectral-flux onsets, mel filters,
resampling, silence trimming, STFT magnitudes) against librosa.

The offline voice used librosa.yin / feature.rms / onset.onset_detect, the Qwen3 front end
librosa.filters.mel and librosa.resample, Chatterbox's voice encoder librosa.effects.trim and
librosa.stft; ours replace them so that no numba code is compiled on the start path (or on the
first clone) and the image carries no librosa (numba, llvmlite, scipy, scikit-learn). They
follow librosa's definitions, so they must agree with it on the signals the voice analyses:
synthetic harmonic tones and vowels, eSpeak's own output, and the clips in assets/. librosa is
a test-only dependency (the `dev` extra) and is only imported here.

Where the tolerances come from. librosa computes in the input's dtype, float32 here (eSpeak
and decoded clips are float32); we compute in float64. So the two differ by float32 rounding:
* RMS: a mean of squares over a frame carries ~log2(frame) x 6e-8 relative error in float32
  (pairwise summation), ~1e-6 for 1024 samples: rtol 1e-5 leaves 10x margin.
* YIN: the difference function d(k) = 2 (r(0) - r(k)) - energy cancels r(0) near the dip,
  which scales float32's 6e-8 by up to r(0) / d(k) ~ 1e3 before the parabolic interpolation;
  a resulting error of ~1e-3 lag at the shortest period (38 lags at 16 kHz) is 0.05 cent.
  We allow 0.1 cent per frame (observed: <= 0.015), far below what matters downstream: one
  step of eSpeak's pitch parameter is ~14 cents (80-85 steps an octave, measured). A frame
  whose d' sits within rounding of the 0.1 threshold could pick a different trough (an
  octave-like jump); that may happen on at most 1 % of the frames the voice keeps (loud) and
  2 % of all frames (silence and noise included; observed: 0 and < 0.5 %).
* Mel filters and resampling: no tolerance. Both do librosa's float operations in librosa's
  order and dtypes (resampling is the same soxr call), so they must be equal bit for bit.
* Trim and STFT magnitudes: no tolerance. `trim` does librosa's float32 frame RMS (the same
  strided (frame, n) view, np.square to float32, np.mean over it) and its dB conversion in its
  order and dtypes, so the dB values, hence the start and end samples, are the very same;
  `stft_magnitude` frames the signal as librosa.stft does (head, middle, tail pieces), multiplies
  by the float64 periodic Hann window (scipy's formula, equal bit for bit), calls the same
  np.fft.rfft, rounds to complex64 where librosa stores into its complex64 matrix, and takes
  np.abs of an array in librosa's (Fortran) layout: equal bit for bit, in librosa's dtype.
* Onsets: the onset envelope differs by ~1e-5 dB (observed; float32 power spectra) of peaks
  of 10-25 dB, i.e. ~1e-6 after normalization, while a pick needs the local maximum and 0.07
  above the local mean: only a near-tie closer than 1e-6 could move a pick, so the picked
  onsets must be the very same frames (ENVELOPE_ATOL bounds the envelope itself, 100x over).
"""

from __future__ import annotations

import os
from pathlib import Path

import librosa  # test-only (the dev extra): the reference
import numpy as np
import pytest
import soundfile as sf

from tts_core.audio import SAMPLE_RATE, analysis, resample
from tts_core.backends import espeak_voice
from tts_core.backends.espeak_voice import ANALYSIS_RATE, F0_MAX, F0_MIN, FRAME, HOP

ROOT = Path(__file__).resolve().parents[1]
ASSET_CLIPS = sorted((ROOT / "assets").rglob("*.wav"))

YIN_FRAME_CENTS = 0.1
YIN_LOUD_DISAGREE, YIN_ALL_DISAGREE = 0.01, 0.02
RMS_RTOL, RMS_ATOL = 1e-5, 1e-9
ENVELOPE_ATOL = 1e-3  # dB (mean rise over the mel bands)


def harmonic_tone(seconds: float, rate: int, f0, harmonics: int = 8) -> np.ndarray:
    """Sum of harmonics 1/k of f0, which may be an array (a glide) of the signal's length."""
    t = np.arange(int(seconds * rate)) / rate
    phase = 2 * np.pi * np.cumsum(np.broadcast_to(f0, t.shape)) / rate
    f0_max = float(np.max(f0))
    signal = sum(
        np.sin(k * phase + k) / k for k in range(1, harmonics + 1) if k * f0_max < rate / 2
    )
    return (0.5 * signal / np.max(np.abs(signal))).astype(np.float32)


def vowel(seconds: float, rate: int, f0: float, formants=((700, 110), (1220, 120), (2600, 160))):
    """A steady vowel: every harmonic of f0 below 5 kHz, weighted by resonances at the formants."""
    t = np.arange(int(seconds * rate)) / rate
    signal = np.zeros_like(t)
    for k in range(1, int(5000 // f0) + 1):
        f = k * f0
        gain = sum(1.0 / np.hypot(1.0, (f - fc) / (bw / 2)) for fc, bw in formants)
        signal += gain * np.sin(2 * np.pi * f * t + 0.7 * k) / k**0.5
    return (0.5 * signal / np.max(np.abs(signal))).astype(np.float32)


def synthetic_signals() -> dict[str, tuple[np.ndarray, int]]:
    rate = SAMPLE_RATE
    seconds = 3.0
    t = np.arange(int(seconds * rate)) / rate
    glide = 110 * 2 ** (t / seconds) * (1 + 0.02 * np.sin(2 * np.pi * 5.5 * t))  # + vibrato
    syllables = 0.5 * (1 - np.cos(2 * np.pi * 4.0 * t))
    noise = np.random.default_rng(0).standard_normal(t.size) * 0.05
    with_gaps = harmonic_tone(seconds, rate, 180.0) * (np.sin(2 * np.pi * 1.5 * t) > 0)
    return {
        "glide": (harmonic_tone(seconds, rate, glide) * syllables.astype(np.float32), rate),
        "vowel-low": (vowel(seconds, rate, 85.0) * syllables.astype(np.float32), rate),
        "vowel-high": (vowel(seconds, rate, 310.0), rate),
        "tone+noise-gaps": ((with_gaps + noise * (with_gaps == 0)).astype(np.float32), rate),
    }


@pytest.fixture(scope="module")
def signals() -> dict[str, tuple[np.ndarray, int]]:
    """name -> (float32 mono audio, rate): synthetic signals, eSpeak output, the asset clips."""
    from tts_core.backends.espeak_lib import PARAM_PITCH, get_library

    found = synthetic_signals()
    lib = get_library()
    for voice, pitch in (("en-us", 0), ("en-us", 100), ("en-us+f3", 0), ("en-us+f3", 100)):
        pieces: list[np.ndarray] = []
        lib.synthesize(
            espeak_voice.CALIBRATION_TEXT,
            voice,
            {PARAM_PITCH: pitch},
            lambda a, out=pieces: out.append(a) or True,
        )
        found[f"espeak {voice} p{pitch}"] = (np.concatenate(pieces), lib.sample_rate)
    for path in ASSET_CLIPS:
        audio, rate = sf.read(path, dtype="float32")
        found[path.name] = (audio, rate)
    assert len(ASSET_CLIPS) >= 2 and len(found) >= 10
    return found


def at_analysis_rate(audio: np.ndarray, rate: int) -> np.ndarray:
    return resample(audio, rate, ANALYSIS_RATE)  # what measure_f0 analyses


def test_yin_matches_librosa(signals) -> None:
    for name, (audio, rate) in signals.items():
        audio16 = at_analysis_rate(audio, rate)
        kwargs = dict(
            fmin=F0_MIN, fmax=F0_MAX, sr=ANALYSIS_RATE, frame_length=FRAME, hop_length=HOP
        )
        ours, theirs = analysis.yin(audio16, **kwargs), librosa.yin(audio16, **kwargs)
        assert ours.shape == theirs.shape, name
        cents = 1200 * np.abs(np.log2(ours / theirs))
        loud = librosa.feature.rms(y=audio16, frame_length=FRAME, hop_length=HOP)[0]
        loud = loud > 0.1 * loud.max()
        apart = cents > YIN_FRAME_CENTS
        assert np.mean(apart[loud]) <= YIN_LOUD_DISAGREE, (
            f"{name}: {np.sum(apart[loud])} loud frames"
        )
        assert np.mean(apart) <= YIN_ALL_DISAGREE, f"{name}: {np.sum(apart)} of {apart.size} frames"


def test_rms_matches_librosa(signals) -> None:
    for name, (audio, _) in signals.items():
        for frame_length, hop in ((FRAME, HOP), (480, 240), (2048, 512)):
            ours = analysis.rms(audio, frame_length=frame_length, hop_length=hop)
            theirs = librosa.feature.rms(y=audio, frame_length=frame_length, hop_length=hop)[0]
            assert ours.shape == theirs.shape, name
            np.testing.assert_allclose(ours, theirs, rtol=RMS_RTOL, atol=RMS_ATOL, err_msg=name)


def test_onsets_match_librosa(signals) -> None:
    counted = 0
    for name, (audio, rate) in signals.items():
        audio24 = resample(audio, rate, SAMPLE_RATE)  # what syllable_rate analyses
        ours = analysis.onset_strength(audio24, SAMPLE_RATE)
        theirs = librosa.onset.onset_strength(y=audio24, sr=SAMPLE_RATE)
        np.testing.assert_allclose(ours, theirs, rtol=0, atol=ENVELOPE_ATOL, err_msg=name)
        times = analysis.onset_times(audio24, SAMPLE_RATE)
        expected = librosa.onset.onset_detect(y=audio24, sr=SAMPLE_RATE, units="time")
        np.testing.assert_allclose(times, expected, rtol=0, atol=1e-9, err_msg=name)
        counted += times.size
    assert counted > 100  # the comparison saw real onsets, not empty lists


def test_mel_filters_match_librosa() -> None:
    cases = (
        (24_000, 2048, 128, 0.0, None),
        (16_000, 1024, 40, 0.0, None),
        (24_000, 1024, 128, 0.0, 12_000.0),
        (22_050, 512, 64, 300.0, 8_000.0),
    )
    for rate, n_fft, bands, fmin, fmax in cases:
        theirs = librosa.filters.mel(sr=rate, n_fft=n_fft, n_mels=bands, fmin=fmin, fmax=fmax)
        ours = analysis.mel_filters(rate, n_fft, bands, fmin=fmin, fmax=fmax)
        assert ours.dtype == theirs.dtype == np.float32
        np.testing.assert_array_equal(ours, theirs, err_msg=f"{rate} {n_fft} {bands} {fmin}")
    # float64 on request (no float32 step): within float32 rounding of librosa's, not equal
    ours64 = analysis.mel_filters(24_000, 1024, 128, dtype=np.float64)
    theirs = librosa.filters.mel(sr=24_000, n_fft=1024, n_mels=128)
    np.testing.assert_allclose(ours64, theirs, rtol=2 * np.finfo(np.float32).eps, atol=0)
    assert not np.array_equal(ours64, theirs)


# 44.1 kHz (and 22.05 / 11.025 kHz) to 24 kHz: for lengths n that are multiples of 147,
# n * 24000 / 44100 is a whole number but n * float(24000 / 44100) lands just above it, so
# librosa keeps one sample more than the exact ceiling (44100 samples -> 24001); ours must too.
RESAMPLE_RATES = (
    (16_000, 24_000),
    (44_100, 24_000),
    (22_050, 24_000),
    (48_000, 24_000),
    (8_000, 24_000),
    (24_000, 16_000),
    (11_025, 24_000),
)


def test_resample_matches_librosa(signals) -> None:
    compared = 0
    rng = np.random.default_rng(1)
    for name, (audio, rate) in signals.items():
        mono = audio if audio.ndim == 1 else audio.mean(axis=1, dtype=np.float32)
        for orig, target in ((rate, SAMPLE_RATE), *RESAMPLE_RATES):
            for n in (mono.size, 44_100, 147 * 7, 1000 + int(rng.integers(1000))):
                y = np.resize(mono, n)  # repeated or cut to n samples
                theirs = librosa.resample(y, orig_sr=orig, target_sr=target)
                ours = analysis.resample(y, orig, target)
                assert ours.dtype == theirs.dtype, name
                np.testing.assert_array_equal(ours, theirs, err_msg=f"{name} {orig}->{target} {n}")
                compared += orig != target
    assert compared > 200
    assert analysis.resample(np.ones(44_100, np.float32), 44_100, 24_000).size == 24_001
    y64 = synthetic_signals()["glide"][0].astype(np.float64)
    ours64 = analysis.resample(y64, 24_000, 16_000)
    assert ours64.dtype == np.float64
    np.testing.assert_array_equal(ours64, librosa.resample(y64, orig_sr=24_000, target_sr=16_000))


def test_resample_rejects_what_librosa_rejects() -> None:
    same = np.zeros(10, np.float32)
    assert analysis.resample(same, 24_000, 24_000) is same
    for bad, message in (
        (np.array([0.0, np.nan], np.float32), "NaN"),
        (np.zeros(10, np.int16), "float"),
        (np.zeros((10, 2)), "mono"),
    ):
        with pytest.raises(ValueError, match=message):
            analysis.resample(bad, 16_000, 24_000)
    with pytest.raises(ValueError, match="positive"):
        analysis.resample(same, 0, 24_000)


def mono16k(audio: np.ndarray, rate: int) -> np.ndarray:
    """What Chatterbox's voice encoder trims and analyses: mono float32 at 16 kHz."""
    mono = audio if audio.ndim == 1 else audio.mean(axis=1, dtype=np.float32)
    return resample(mono, rate, 16_000)


def with_silences(y: np.ndarray) -> dict[str, np.ndarray]:
    """`y` as it is, after 0.5 s of silence, before 0.7 s of faint noise (-80 dB), and both."""
    rng = np.random.default_rng(2)
    quiet = np.zeros(8_000, np.float32)
    faint = (rng.standard_normal(11_200) * 1e-4 * np.abs(y).max()).astype(np.float32)
    return {
        "as is": y,
        "lead": np.concatenate([quiet, y]),
        "trail": np.concatenate([y, faint]),
        "both": np.concatenate([quiet, faint[:3000], y, faint, quiet]),
    }


TRIM_SETTINGS = (
    {"top_db": 20},
    {"top_db": 60},
    {"top_db": 30, "frame_length": 400, "hop_length": 160},
)


def assert_trim_equal(y: np.ndarray, label: str, **kwargs) -> tuple[int, int]:
    ours, (start, end) = analysis.trim(y, **kwargs)
    theirs, interval = librosa.effects.trim(y, **kwargs)
    assert (start, end) == tuple(interval.tolist()), f"{label} {kwargs}: {start, end} {interval}"
    assert ours.dtype == theirs.dtype and np.array_equal(ours, theirs), f"{label} {kwargs}"
    return start, end


def test_trim_matches_librosa(signals) -> None:
    trimmed = 0
    for name, (audio, rate) in signals.items():
        for variant, y in with_silences(mono16k(audio, rate)).items():
            for kwargs in TRIM_SETTINGS:
                start, end = assert_trim_equal(y, f"{name} {variant}", **kwargs)
                trimmed += start > 0 or end < y.size
    assert trimmed > 3 * len(signals)  # the added silences were found and cut


STFT_SETTINGS = (
    {"n_fft": 400, "hop_length": 160, "win_length": 400, "pad_mode": "reflect"},  # the encoder's
    {"n_fft": 400, "hop_length": 160},  # librosa's default padding: zeros
    {"n_fft": 512, "hop_length": 128, "win_length": 300, "pad_mode": "reflect"},
    {"n_fft": 1024, "hop_length": 256, "center": False},
)


def assert_stft_equal(y: np.ndarray, label: str, **kwargs) -> None:
    ours = analysis.stft_magnitude(y, **kwargs)
    theirs = np.abs(librosa.stft(y, **kwargs))
    assert ours.dtype == theirs.dtype and ours.shape == theirs.shape, f"{label} {kwargs}"
    np.testing.assert_array_equal(ours, theirs, err_msg=f"{label} {kwargs}")


def test_stft_magnitude_matches_librosa(signals) -> None:
    for name, (audio, rate) in signals.items():
        y = mono16k(audio, rate)
        for kwargs in STFT_SETTINGS:
            assert_stft_equal(y, name, **kwargs)
        assert_stft_equal(analysis.trim(y, top_db=20)[0], f"{name} trimmed", **STFT_SETTINGS[0])
    y64 = synthetic_signals()["vowel-low"][0].astype(np.float64)  # float64 in: float64 out
    assert analysis.stft_magnitude(y64, 400, 160).dtype == np.float64
    assert_stft_equal(y64, "float64", **STFT_SETTINGS[2])
    for length in (1, 2, 7, 64, 400, 401, 2048):  # scipy.signal.get_window("hann", n) bit for bit
        window = librosa.filters.get_window("hann", length, fftbins=True)
        np.testing.assert_array_equal(analysis.periodic_hann(length), window, err_msg=str(length))


def test_voice_encoder_front_end_matches_librosa(signals) -> None:
    """Chatterbox's mel frames (trim, |STFT|^2, mel) are the official's librosa ones exactly."""
    from tts_core.models.chatterbox import voice_encoder as ve

    for name, (audio, rate) in signals.items():
        for variant, y in with_silences(mono16k(audio, rate)).items():
            wav = librosa.effects.trim(y, top_db=ve.TRIM_TOP_DB)[0]
            spec = np.abs(
                librosa.stft(
                    wav,
                    n_fft=ve.N_FFT,
                    hop_length=ve.HOP,
                    win_length=ve.N_FFT,
                    center=True,
                    pad_mode="reflect",
                )
            )
            basis = librosa.filters.mel(
                sr=16_000, n_fft=ve.N_FFT, n_mels=ve.N_MELS, fmin=0, fmax=8000
            )
            expected = np.dot(basis, spec**2.0).T
            np.testing.assert_array_equal(ve.mel_frames(y), expected, err_msg=f"{name} {variant}")


@pytest.mark.filterwarnings("ignore:n_fft=.* is too large:UserWarning")  # librosa's, short y
def test_trim_and_stft_edge_cases() -> None:
    rng = np.random.default_rng(3)
    cases = {
        "silent": np.zeros(16_000, np.float32),  # every frame at the 0 dB reference: all kept
        "empty": np.zeros(0, np.float32),
        "one sample": np.full(1, 0.3, np.float32),
        "shorter than a frame": (rng.standard_normal(300) * 0.1).astype(np.float32),
        "short, silent tail": np.concatenate(
            [rng.standard_normal(1500).astype(np.float32), np.zeros(2500, np.float32)]
        ),
        "click in silence": np.pad(np.ones(5, np.float32), (20_000, 20_000)),
        "constant": np.full(5_000, 0.25, np.float32),
    }
    for name, y in cases.items():
        for kwargs in TRIM_SETTINGS:
            assert_trim_equal(y, name, **kwargs)
        for kwargs in STFT_SETTINGS[:3]:
            if y.size or kwargs.get("pad_mode") != "reflect":  # np.pad cannot reflect nothing
                assert_stft_equal(y, name, **kwargs)
    silent = cases["silent"]
    assert analysis.trim(silent, top_db=20)[1] == (0, silent.size)  # librosa keeps it all
    assert analysis.trim(cases["empty"], top_db=20)[1] == (0, 0)
    _, (start, end) = analysis.trim(cases["click in silence"], top_db=20)
    assert 0 < start <= 20_000 < 20_005 <= end < 40_005
    with pytest.raises(ValueError, match="uncentred"):
        analysis.stft_magnitude(cases["shorter than a frame"], 400, 160, center=False)
    with pytest.raises(ValueError, match="mono"):
        analysis.stft_magnitude(np.zeros((10, 2), np.float32), 400, 160)
    with pytest.raises(ValueError, match="NaN"):
        analysis.stft_magnitude(np.array([0.0, np.nan], np.float32), 400, 160)


def test_trim_and_stft_blocks_equal_librosa(monkeypatch) -> None:
    """Long inputs go through in blocks of frames: still librosa's results bit for bit."""
    y = mono16k(*synthetic_signals()["tone+noise-gaps"])
    monkeypatch.setattr(analysis, "_BLOCK_VALUES", 400 * 7)  # a few frames a block: many blocks
    for kwargs in TRIM_SETTINGS:
        assert_trim_equal(y, "blocks", **kwargs)
    for kwargs in STFT_SETTINGS:
        assert_stft_equal(y, "blocks", **kwargs)


def librosa_yin(y, **kwargs):  # noqa: ANN001, ANN201
    return librosa.yin(y, **kwargs)


def librosa_rms(y, frame_length, hop_length):  # noqa: ANN001, ANN201
    return librosa.feature.rms(y=y, frame_length=frame_length, hop_length=hop_length)[0]


def librosa_onsets(y, sr):  # noqa: ANN001, ANN201
    return librosa.onset.onset_detect(y=y, sr=sr, units="time")


# the pitch lines measured on eSpeak NG 1.52 (fixed here: eSpeak's output varies a little per call)
LINES = {
    "": espeak_voice.PitchLine(base_hz=73.7, per_octave=84.3),
    "+f3": espeak_voice.PitchLine(base_hz=139.6, per_octave=80.5),
}


def test_voice_parameters_match_librosa(signals, monkeypatch) -> None:
    """What the offline voice takes from a clip: the same as with librosa's analysis."""
    ours = {}
    clips = {name: resample(audio, rate, SAMPLE_RATE) for name, (audio, rate) in signals.items()}
    for name, audio in clips.items():
        for text in (None, "a transcript of some eleven words, as a user might give"):
            ours[name, text] = espeak_voice.settings_from_reference(audio, text, LINES)
    monkeypatch.setattr(espeak_voice, "yin", librosa_yin)
    monkeypatch.setattr(espeak_voice, "rms", librosa_rms)
    monkeypatch.setattr(espeak_voice, "onset_times", librosa_onsets)
    measured = 0
    for (name, text), got in ours.items():
        want = espeak_voice.settings_from_reference(clips[name], text, LINES)
        label = f"{name} (transcript: {text is not None})"
        assert got.variant == want.variant, label
        # integer parameters: the floats below agree to ~1e-6, so a step apart only when one
        # lands within that of a rounding boundary
        for field in ("pitch", "pitch_range", "rate_wpm"):
            assert abs(getattr(got, field) - getattr(want, field)) <= 1, f"{label}: {field}"
        # ref_f0_hz is a median of per-frame F0s: a frame whose voicing sits within rounding of
        # YIN's threshold may flip between the two analyses and move the median by a neighbour's
        # spacing (0.5 cents on the 6 s `ash` clip); 1.2e-3 (2 cents) is an eighth of a step of
        # eSpeak's pitch parameter (~15 cents), so what the voice takes is the same (asserted
        # above on the integer parameters)
        for field, tolerance in (
            ("ref_f0_hz", 1.2e-3),
            ("ref_spread_semitones", 1e-3),
            ("ref_syllables_per_s", 1e-9),
        ):
            a, b = getattr(got, field), getattr(want, field)
            assert (a is None) == (b is None), f"{label}: {field} {a} vs {b}"
            if a is not None:
                assert a == pytest.approx(b, rel=tolerance), f"{label}: {field}"
                measured += 1
    assert measured >= 3 * len(clips)  # pitch and rate were found, not skipped


# Known F0. Our YIN is librosa's: the difference function of a frame padded with zeros, whose
# extra energy term tilts d' toward short lags and reads harmonic tones up to ~2.5 cents sharp
# at 60 Hz (less higher up; a pure sine reads far sharper, but voices are not sines).
# 3 cents is a fifth of one step of eSpeak's pitch parameter. Without parabolic interpolation
# the period is whole lags: up to 21 cents off at 400 Hz (40 lags), so this test would fail.
KNOWN_F0_CENTS = 3.0
FRAME_F0_CENTS = 10.0  # single frames: the window's phase against the period moves them a bit
KNOWN_F0 = (62.0, 65.4, 82.4, 98.0, 110.0, 131.0, 147.3, 196.0, 233.0, 261.6, 311.0, 349.2, 400.0)


@pytest.mark.parametrize("kind", ["harmonic", "vowel"])
def test_known_f0_is_recovered(kind) -> None:
    for f0 in KNOWN_F0:
        make = harmonic_tone if kind == "harmonic" else vowel
        audio16 = make(1.0, ANALYSIS_RATE, f0)
        frames = analysis.yin(
            audio16, fmin=F0_MIN, fmax=F0_MAX, sr=ANALYSIS_RATE, frame_length=FRAME, hop_length=HOP
        )
        cents = 1200 * np.log2(frames[5:-5] / f0)  # not the edge frames, half zero padding
        assert abs(np.median(cents)) <= KNOWN_F0_CENTS, f"{kind} {f0} Hz: {np.median(cents):.2f}"
        assert np.max(np.abs(cents)) <= FRAME_F0_CENTS, f"{kind} {f0} Hz: {np.max(np.abs(cents))}"
        if not F0_MIN * 1.05 < f0 < F0_MAX * 0.95:
            continue  # measure_f0 drops values at the ends of the search range
        # and through the voice's own entry point, from a 24 kHz clip
        voiced = espeak_voice.measure_f0(make(1.0, SAMPLE_RATE, f0), SAMPLE_RATE)
        median = 1200 * np.log2(np.median(voiced) / f0)
        assert voiced.size >= 80 and abs(median) <= KNOWN_F0_CENTS, f"{kind} {f0} Hz: {median:.2f}"


def test_block_processing_equals_one_pass(monkeypatch) -> None:
    """Long inputs go through in blocks of frames; the blocks' results must join seamlessly."""
    audio, rate = synthetic_signals()["glide"]
    kwargs = dict(fmin=F0_MIN, fmax=F0_MAX, sr=rate, frame_length=FRAME, hop_length=HOP)
    whole = analysis.yin(audio, **kwargs), analysis.rms(audio, FRAME, HOP)
    onsets = analysis.onset_strength(audio, rate)
    monkeypatch.setattr(analysis, "_BLOCK_VALUES", FRAME * 7)  # 7 frames a block: many blocks
    np.testing.assert_array_equal(analysis.yin(audio, **kwargs), whole[0])
    np.testing.assert_array_equal(analysis.rms(audio, FRAME, HOP), whole[1])
    np.testing.assert_allclose(analysis.onset_strength(audio, rate), onsets, rtol=0, atol=1e-12)


def test_short_silent_and_bad_inputs() -> None:
    assert analysis.rms(np.zeros(0, np.float32), 480, 240).tolist() == [0.0]  # one padded frame
    assert analysis.yin(np.zeros(100), fmin=60, fmax=420, sr=16_000, frame_length=1024).size == 1
    silence = np.zeros(SAMPLE_RATE, np.float32)
    assert analysis.onset_times(silence, SAMPLE_RATE).size == 0
    assert espeak_voice.measure_f0(silence, SAMPLE_RATE).size == 0
    assert espeak_voice.measure_f0(np.zeros(10, np.float32), SAMPLE_RATE).size == 0
    assert espeak_voice.syllable_rate(silence, None) is None
    settings = espeak_voice.settings_from_reference(silence, None, LINES)
    assert settings.ref_f0_hz is None and settings.ref_syllables_per_s is None
    with pytest.raises(ValueError, match="fmax"):
        analysis.yin(silence, fmin=60, fmax=9000, sr=16_000)
    with pytest.raises(ValueError, match="too short"):
        analysis.yin(silence, fmin=60, fmax=420, sr=16_000, frame_length=32)
    with pytest.raises(ValueError, match="mono"):
        analysis.rms(np.zeros((10, 2)))


def test_this_process_compiles_librosa_into_its_own_numba_cache() -> None:
    """Two test processes writing one numba cache at once crash (tests/conftest.py): librosa's
    compiled functions must land in this process's own directory."""
    import numba
    from conftest import NUMBA_CACHE

    assert numba.config.CACHE_DIR == NUMBA_CACHE and os.path.isdir(NUMBA_CACHE)
    librosa.util.peak_pick(
        np.zeros(64), pre_max=1, post_max=1, pre_avg=1, post_avg=1, delta=0.1, wait=1
    )
    assert any(Path(NUMBA_CACHE).rglob("*.nbi")), "librosa's numba cache went elsewhere"
