"""Audio analysis in numpy: frame RMS, YIN pitch, spectral-flux onsets, mel filters, resampling,
silence trimming and STFT magnitudes.

Light to import (numpy and soxr, no JIT): librosa's numba code cost minutes of compilation on a
fresh machine's start path and its on-disk cache crashed under several processes, so librosa
(~370 MB with its dependencies) is no runtime dependency. Each function follows the librosa 0.11
function of the same name (centred frames, zero padding, the same defaults), so results agree
with it up to float rounding (`mel_filters`, `resample`, `trim` and `stft_magnitude`: bit for
bit); tests/test_audio_analysis.py holds them side by side.

Long inputs are processed a block of frames at a time, so memory stays bounded by
`_BLOCK_VALUES`, never by the clip's length.
"""

from __future__ import annotations

import math

import numpy as np
import soxr

_BLOCK_VALUES = 1 << 20  # framed samples handled at once: 8 MB (the FFTs take a few times that)


def frame(y: np.ndarray, frame_length: int, hop_length: int, center: bool = True) -> np.ndarray:
    """(n_frames, frame_length) read-only view of `y`; centred: frame i is centred on sample
    i * hop_length (`frame_length // 2` zeros added at both ends)."""
    if frame_length < 1 or hop_length < 1:
        raise ValueError(
            f"frame_length ({frame_length}) and hop_length ({hop_length}) must be >= 1"
        )
    y = np.asarray(y)
    if y.ndim != 1:
        raise ValueError(f"expected a mono signal, got shape {y.shape}")
    if center:
        y = np.pad(y, frame_length // 2)
    if y.size < frame_length:
        return np.zeros((0, frame_length), y.dtype)
    return np.lib.stride_tricks.sliding_window_view(y, frame_length)[::hop_length]


def _blocks(frames: np.ndarray):  # noqa: ANN202 - iterator of (slice, block)
    step = max(1, _BLOCK_VALUES // max(1, frames.shape[1]))
    for start in range(0, frames.shape[0], step):
        part = slice(start, start + step)
        yield part, frames[part]


def rms(
    y: np.ndarray, frame_length: int = 2048, hop_length: int = 512, center: bool = True
) -> np.ndarray:
    """Root mean square of each frame, float64 (n_frames,) (librosa.feature.rms(y=...)[0])."""
    frames = frame(np.asarray(y, np.float64), frame_length, hop_length, center)
    out = np.empty(frames.shape[0])
    for part, block in _blocks(frames):
        out[part] = np.sqrt(np.einsum("ij,ij->i", block, block) / frame_length)
    return out


def trim(
    y: np.ndarray, top_db: float = 60.0, frame_length: int = 2048, hop_length: int = 512
) -> tuple[np.ndarray, tuple[int, int]]:
    """(y[start:end], (start, end)) without the leading and trailing frames whose RMS is more
    than `top_db` below the loudest frame's (librosa.effects.trim with ref=np.max).

    Done as librosa does it, so that the decisions and samples are the same bit for bit: frame
    RMS in float32 over centred, zero padded frames (librosa.feature.rms), to dB against the
    loudest (amplitude_to_db: squared, floored at 1e-10, 10 log10), a frame is kept when above
    -top_db; start is the first kept frame's index times hop_length, end one hop past the last
    kept frame's (at most len(y)); (0, 0) when no frame is kept. All-zero audio keeps every
    frame (its frames are all at the 0 dB reference), as with librosa."""
    y = np.asarray(y)
    frames = frame(y, frame_length, hop_length, center=True)
    power = np.empty((1, frames.shape[0]), np.float32)
    for part, block in _blocks(frames):  # block.T: librosa's (frame_length, n) strided view
        power[:, part] = np.mean(np.square(block.T, dtype=np.float32), axis=-2, keepdims=True)
    magnitude = np.abs(np.sqrt(power)[0])
    ref = np.max(magnitude)
    amin = 1e-5**2  # librosa's amplitude_to_db(amin=1e-5), squared as it squares it
    db = 10.0 * np.log10(np.maximum(amin, np.square(magnitude)))
    db -= 10.0 * np.log10(np.maximum(amin, ref**2))
    kept = np.flatnonzero(db > -top_db)
    if kept.size == 0:
        return y[0:0], (0, 0)
    start = int(kept[0] * hop_length)
    end = min(y.shape[-1], int((kept[-1] + 1) * hop_length))
    return y[start:end], (start, end)


def periodic_hann(length: int) -> np.ndarray:
    """scipy.signal.get_window("hann", length, fftbins=True) (librosa's STFT window), float64,
    bit for bit: scipy's general cosine window 0.5 + 0.5 cos over linspace(-pi, pi, length + 1),
    the last point dropped (ones for length <= 1)."""
    if length <= 1:
        return np.ones(length)
    w = np.zeros(length + 1)
    w += 0.5  # scipy adds a[0] cos(0 x) = 0.5, then a[1] cos(x)
    w += 0.5 * np.cos(np.linspace(-np.pi, np.pi, length + 1))
    return w[:-1]


def stft_magnitude(
    y: np.ndarray,
    n_fft: int = 2048,
    hop_length: int | None = None,
    win_length: int | None = None,
    center: bool = True,
    pad_mode: str = "constant",
) -> np.ndarray:
    """|STFT| (1 + n_fft // 2, n_frames) with a periodic Hann window of `win_length` (default
    n_fft) centred in n_fft, in the input's precision: float32 for float32 input (the spectrum
    is complex64), float64 for float64 (np.abs(librosa.stft(y, ...)), the same defaults).

    Done as librosa does it, so equal to it bit for bit: frame i starts at sample
    i * hop_length of `y` padded with n_fft // 2 samples (`pad_mode`) at both ends when
    centred, each frame times the float64 window, np.fft.rfft in float64, the spectrum rounded
    to complex64 for float32 input, then its magnitude. As librosa, the frames that reach into
    the padding are cut from separately padded head and tail pieces of `y`."""
    y = _mono_float(y)
    win_length = n_fft if win_length is None else win_length
    hop_length = win_length // 4 if hop_length is None else hop_length
    if not 0 < win_length <= n_fft or hop_length < 1:
        raise ValueError(f"need 0 < win_length ({win_length}) <= n_fft ({n_fft}), hop_length >= 1")
    window = periodic_hann(win_length)
    lpad = (n_fft - win_length) // 2  # librosa.util.pad_center
    window = np.pad(window, (lpad, n_fft - win_length - lpad))[:, None]
    if center:
        pieces = _centred_frames(y, n_fft, hop_length, pad_mode)
    elif y.shape[0] < n_fft:
        raise ValueError(f"n_fft={n_fft} is too large for uncentred analysis of {y.shape[0]}")
    else:
        pieces = [frame(y, n_fft, hop_length, center=False)]
    complex_dtype = np.complex64 if y.dtype == np.float32 else np.complex128  # dtype_r2c
    real_dtype = np.float32 if complex_dtype == np.complex64 else np.float64
    n_frames = sum(p.shape[0] for p in pieces)
    out = np.empty((1 + n_fft // 2, n_frames), real_dtype, order="F")  # librosa's layout
    done = 0
    for frames in pieces:
        for part, block in _blocks(frames):
            spectrum = np.fft.rfft(window * block.T, axis=-2).astype(complex_dtype)
            out[:, done + part.start : done + part.start + block.shape[0]] = np.abs(spectrum)
        done += frames.shape[0]
    return out


def _mono_float(y: np.ndarray) -> np.ndarray:
    """`y` as an array: a finite mono float signal, else ValueError (as librosa)."""
    y = np.asarray(y)
    if y.ndim != 1 or not np.issubdtype(y.dtype, np.floating):
        raise ValueError(f"expected a mono float signal, got {y.dtype} shape {y.shape}")
    if not np.isfinite(y).all():
        raise ValueError("audio contains NaN or infinite samples")
    return y


def _centred_frames(y: np.ndarray, n_fft: int, hop: int, pad_mode: str) -> list[np.ndarray]:
    """librosa.stft's centred framing: (n_frames, n_fft) views of the head frames (cut from the
    padded start of `y`), the middle ones (of `y` itself) and the tail ones (padded end), or of
    all of `y` padded when head and tail overlap."""
    half = n_fft // 2
    start_k = int(np.ceil(half / hop))  # the frames that reach into the left padding
    tail_k = (y.shape[0] + half - n_fft) // hop + 1  # the first frame into the right padding
    if tail_k <= start_k:
        return [frame(np.pad(y, half, mode=pad_mode), n_fft, hop, center=False)]
    head = np.pad(y[: (start_k - 1) * hop - half + n_fft + 1], (half, 0), mode=pad_mode)
    pieces = [
        frame(head, n_fft, hop, center=False)[:start_k],
        frame(y[start_k * hop - half :], n_fft, hop, center=False),
    ]
    if tail_k * hop - half + n_fft <= y.shape[0] + half:
        tail = np.pad(y[tail_k * hop - half :], (0, half), mode=pad_mode)
        pieces.append(frame(tail, n_fft, hop, center=False))
    return pieces


def yin(
    y: np.ndarray,
    *,
    fmin: float,
    fmax: float,
    sr: float,
    frame_length: int = 2048,
    hop_length: int | None = None,
    trough_threshold: float = 0.1,
    center: bool = True,
) -> np.ndarray:
    """F0 in Hz of each frame by YIN (de Cheveigné and Kawahara 2002), float64 (n_frames,).

    Per frame x (N samples): the difference function d(k) = sum_j (x[j] - x[j+k])^2 with x
    taken as zero past the frame's end (so every lag sums over N terms), computed from the
    autocorrelation r (one FFT): d(k) = 2 (r(0) - r(k)) - sum_{j<k} x[j]^2; the cumulative
    mean normalized difference d'(k) = d(k) / mean(d(1..k)); the smallest lag in
    [sr/fmax, sr/fmin] that is a local minimum of d' below `trough_threshold` (else the global
    minimum); parabolic interpolation of d' around it. As librosa.yin, every frame gets a
    value: silence and unvoiced frames get arbitrary ones, so callers gate frames by energy.
    """
    if not 0 < fmin < fmax <= sr / 2:
        raise ValueError(f"need 0 < fmin ({fmin}) < fmax ({fmax}) <= sr / 2 ({sr / 2})")
    min_period = int(np.floor(sr / fmax))
    max_period = min(int(np.ceil(sr / fmin)), frame_length - 1)
    if max_period - min_period < 2:
        raise ValueError(f"frame_length {frame_length} is too short for fmin {fmin} at {sr} Hz")
    frames = frame(np.asarray(y, np.float64), frame_length, hop_length or frame_length // 4, center)
    periods = np.empty(frames.shape[0])
    for part, block in _blocks(frames):
        periods[part] = _yin_periods(block, min_period, max_period, trough_threshold)
    return sr / periods


def _yin_periods(x: np.ndarray, min_period: int, max_period: int, threshold: float) -> np.ndarray:
    n_fft = 1 << (2 * x.shape[1] - 2).bit_length()  # >= 2N - 1: a linear, not circular, ACF
    spectrum = np.fft.rfft(x, n_fft, axis=1)
    acf = np.fft.irfft(spectrum.real**2 + spectrum.imag**2, n_fft, axis=1)[:, : max_period + 1]
    head_energy = np.cumsum(np.square(x[:, :max_period]), axis=1)  # [k-1] = sum_{j<k} x[j]^2
    diff = 2.0 * (acf[:, :1] - acf[:, 1:]) - head_energy  # d(k), k = 1..max_period
    lags = np.arange(1, max_period + 1)
    mean_so_far = np.cumsum(diff, axis=1) / lags
    cmnd = diff[:, min_period - 1 :] / (
        mean_so_far[:, min_period - 1 :] + np.finfo(np.float64).tiny
    )
    # cmnd[:, i] is d' at lag min_period + i
    trough = np.empty(cmnd.shape, bool)
    trough[:, 1:-1] = (cmnd[:, 1:-1] < cmnd[:, :-2]) & (cmnd[:, 1:-1] <= cmnd[:, 2:])
    trough[:, 0] = cmnd[:, 0] < cmnd[:, 1]
    trough[:, -1] = cmnd[:, -1] < cmnd[:, -2]
    deep = trough & (cmnd < threshold)
    rows = np.arange(cmnd.shape[0])
    best = np.where(deep.any(axis=1), np.argmax(deep, axis=1), np.argmin(cmnd, axis=1))
    inner = (best > 0) & (best < cmnd.shape[1] - 1)  # the ends get no interpolation
    left = cmnd[rows, np.maximum(best - 1, 0)]
    mid = cmnd[rows, best]
    right = cmnd[rows, np.minimum(best + 1, cmnd.shape[1] - 1)]
    curvature, slope = right + left - 2.0 * mid, (right - left) / 2.0
    # a vertex more than one lag away means the parabola does not describe this minimum
    fits = inner & (np.abs(slope) < np.abs(curvature))
    shift = np.where(fits, -slope / np.where(fits, curvature, 1.0), 0.0)
    return min_period + best + shift


def onset_strength(
    y: np.ndarray, sr: float, n_fft: int = 2048, hop_length: int = 512, n_bands: int = 128
) -> np.ndarray:
    """Spectral flux (n_frames,): the mean over `n_bands` mel bands of the rise in log power
    (dB, 80 dB below the loudest value floored) from one STFT frame to the next, shifted so a
    value sits at the frame where the rise's sound starts (librosa.onset.onset_strength)."""
    frames = frame(np.asarray(y, np.float64), n_fft, hop_length, center=True)
    window = 0.5 - 0.5 * np.cos(2.0 * np.pi * np.arange(n_fft) / n_fft)  # periodic Hann
    bands = mel_filters(sr, n_fft, n_bands)
    power = np.empty((frames.shape[0], n_bands))
    for part, block in _blocks(frames):
        spectrum = np.fft.rfft(block * window, axis=1)
        power[part] = (spectrum.real**2 + spectrum.imag**2) @ bands.T
    db = 10.0 * np.log10(np.maximum(power, 1e-10))
    db = np.maximum(db, db.max(initial=-100.0) - 80.0)
    flux = np.maximum(0.0, db[1:] - db[:-1]).mean(axis=1)
    lead = 1 + n_fft // (2 * hop_length)  # the lag, and the centring of the frames
    return np.concatenate([np.zeros(lead), flux])[: frames.shape[0]]


def mel_filters(
    sr: float,
    n_fft: int,
    n_bands: int,
    fmin: float = 0.0,
    fmax: float | None = None,
    dtype: type = np.float32,
) -> np.ndarray:
    """(n_bands, n_fft // 2 + 1) triangular filters on the Slaney mel scale from `fmin` to
    `fmax` (default sr/2), each scaled to unit area (librosa.filters.mel's defaults). Rounded as
    librosa rounds: the triangles are stored in `dtype`, then scaled in place, so a float32 result
    equals librosa's bit for bit."""
    fmax = sr / 2.0 if fmax is None else fmax
    bins_hz = np.fft.rfftfreq(n_fft, 1.0 / sr)
    edges_hz = _mel_to_hz(np.linspace(_hz_to_mel(fmin), _hz_to_mel(fmax), n_bands + 2))
    widths = np.diff(edges_hz)
    slopes = edges_hz[:, None] - bins_hz[None, :]
    rising = -slopes[:-2] / widths[:-1, None]
    falling = slopes[2:] / widths[1:, None]
    weights = np.maximum(0.0, np.minimum(rising, falling)).astype(dtype)
    weights *= (2.0 / (edges_hz[2:] - edges_hz[:-2]))[:, None]
    return weights


_MEL_LINEAR_HZ, _MEL_STEP_HZ = 1000.0, 200.0 / 3  # Slaney: linear below 1 kHz, log above
_MEL_LOG_STEP = np.log(6.4) / 27.0


def _hz_to_mel(hz: float | np.ndarray) -> np.ndarray:
    hz = np.asarray(hz, np.float64)
    linear = hz / _MEL_STEP_HZ
    above = (
        _MEL_LINEAR_HZ / _MEL_STEP_HZ
        + np.log(np.maximum(hz, 1e-10) / _MEL_LINEAR_HZ) / _MEL_LOG_STEP
    )
    return np.where(hz >= _MEL_LINEAR_HZ, above, linear)


def _mel_to_hz(mel: np.ndarray) -> np.ndarray:
    mel = np.asarray(mel, np.float64)
    corner = _MEL_LINEAR_HZ / _MEL_STEP_HZ
    above = _MEL_LINEAR_HZ * np.exp(_MEL_LOG_STEP * (mel - corner))
    return np.where(mel >= corner, above, mel * _MEL_STEP_HZ)


def peak_pick(
    x: np.ndarray, pre_max: int, post_max: int, pre_avg: int, post_avg: int, delta: float, wait: int
) -> np.ndarray:
    """Indices n, picked greedily left to right, where x[n] is the maximum of
    x[n - pre_max : n + post_max], at least `delta` above the mean of x[n - pre_avg :
    n + post_avg], and more than `wait` samples after the previous pick (librosa.util.peak_pick,
    after Böck, Krebs and Schedl 2012)."""
    x = np.asarray(x, np.float64)
    picks: list[int] = []
    n = 0
    while n < x.size:
        window = x[max(0, n - pre_max) : n + post_max]
        if x[n] >= window.max() and x[n] >= x[max(0, n - pre_avg) : n + post_avg].mean() + delta:
            picks.append(n)
            n += wait + 1
        else:
            n += 1
    return np.asarray(picks, dtype=np.int64)


def onset_times(y: np.ndarray, sr: float, hop_length: int = 512) -> np.ndarray:
    """Onset times in seconds: peaks of the normalized `onset_strength` picked with
    librosa.onset.onset_detect's settings (30 ms max window, 100 ms mean window, delta 0.07)."""
    envelope = onset_strength(y, sr, hop_length=hop_length)
    if envelope.size == 0 or not np.all(np.isfinite(envelope)):
        return np.zeros(0)
    envelope = envelope - envelope.min()
    if not envelope.any():
        return np.zeros(0)
    envelope /= envelope.max() + np.finfo(np.float64).tiny

    def frames_in(seconds: float) -> int:
        return int(seconds * sr // hop_length)

    picks = peak_pick(
        envelope,
        pre_max=frames_in(0.03),
        post_max=1,
        pre_avg=frames_in(0.10),
        post_avg=frames_in(0.10) + 1,
        delta=0.07,
        wait=frames_in(0.03),
    )
    return picks * hop_length / sr


def resample(y: np.ndarray, orig_sr: int, target_sr: int) -> np.ndarray:
    """`y` (n,) from `orig_sr` to `target_sr` Hz as librosa.resample's defaults do it (the
    official Qwen3-TTS and VoxCPM2 front ends): soxr at "soxr_hq", then cut or zero padded to
    ceil(n * (target_sr / orig_sr)) samples, in `y`'s dtype; `y` itself when the rates agree.
    Rejects what librosa rejects: non-float or non-finite samples."""
    if orig_sr <= 0 or target_sr <= 0:
        raise ValueError(f"sample rates must be positive, got {orig_sr} and {target_sr}")
    y = _mono_float(y)
    if orig_sr == target_sr:
        return y
    size = math.ceil(y.shape[0] * (float(target_sr) / orig_sr))  # librosa's float ratio
    out = soxr.resample(y, orig_sr, target_sr, quality="soxr_hq")
    out = out[:size] if out.shape[0] >= size else np.pad(out, (0, size - out.shape[0]))
    return np.asarray(out, dtype=y.dtype)
