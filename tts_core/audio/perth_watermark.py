"""Perth's implicit audio watermark (Resemble AI's `resemble-perth`, PerthNet "implicit"), ours.

resemble-perth's own `PerthImplicitWatermarker` imports torchaudio (its STFT modules) and librosa
(resampling); torchaudio has no build for every torch (none for 2.13: perth then sets
`PerthImplicitWatermarker = None`). This is the same computation on torch and soxr alone, with
the weights and hyperparameters read from the installed resemble-perth distribution's files
(`perth_net/pretrained/implicit/`: hparams.yaml, perth_net_<step>.pth.tar), found without
importing perth (that import needs pkg_resources and torchaudio). Without the package:
PerthUnavailable, which says `pip install 'tts-core[chatterbox-watermark]'`.

The official steps (perth_net/perth_net_implicit/), each matched here:
* apply: the signal -> 32 kHz (librosa.resample's default soxr_hq: `analysis.resample`, bit for
  bit) -> STFT (torchaudio Spectrogram(power=None) = torch.stft, n_fft 2048, hop 320, periodic
  Hann 2048, centred, reflect padding) -> magnitude in normalised dB ((20 log10 max(|X|, 1e-9) +
  180) / 195) and phase -> the encoder adds a residual to the lowest 128 bins (0-2 kHz) of the
  frames louder than 5 % of the loudest (magmask) -> magnitude back from dB with the old phase ->
  iSTFT (torchaudio InverseSpectrogram = torch.istft, centred, no length: hop x (n // hop)
  samples) -> back to the input rate (soxr_hq, length ceil(n x ratio)).
* detect: the signal -> 32 kHz with librosa's res_type="polyphase" (scipy.signal.resample_poly:
  Kaiser(5.0) FIR of 20 x max(up, down) + 1 taps; `resample_poly` here, computed in float64 and
  rounded once, where scipy rounds every product in the input's float32: they differ by float32
  rounding) -> the same magnitude -> the decoder's three branches (time scales 1.25, 1, 0.75) ->
  one confidence, clipped to [0, 1] (rounded by `detect`, raw by `score`).

`apply(audio, sr, keep_length=True)` (a streamed chunk) returns exactly len(audio) samples: the
iSTFT is asked for the whole 32 kHz length instead of a multiple of the hop.
"""

from __future__ import annotations

import importlib.util
import logging
import math
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .analysis import resample

log = logging.getLogger(__name__)

PRETRAINED = Path("perth_net") / "pretrained" / "implicit"
INSTALL_HINT = "pip install 'tts-core[chatterbox-watermark]'"
HEADROOM_DB = 15.0  # utils.normalize's headroom_db
MASK_FRACTION = 0.05  # model.magmask's p
STRETCH_SCALES = (1.25, 1.0, 0.75)  # the decoder's slow, normal and fast branches
_BLOCK_OUTPUTS = 1 << 20  # resample_poly: gathered products per block (8 MB)
# StreamWatermarker's settings for 24 kHz streams (benchmarks/perth_stream_bench.py,
# BENCHMARKS.md): 0.25 s of plain context before each chunk, one 40 ms token held back and
# crossfaded into the next pass
STREAM_CONTEXT, STREAM_HOLDBACK = 6000, 960
# checkpoint entries of torchaudio modules (the STFT windows; TimeStretch, unused at inference)
AUDIO_PROCESSOR_KEYS = (
    "ap.spectrogram.window",
    "ap.inv_spectrogram.window",
    "ap.stretch.phase_advance",
)


class PerthUnavailable(RuntimeError):
    """resemble-perth (the weights' package) is not installed, or its files are not there."""


@dataclass(frozen=True)
class PerthHparams:
    """The fields of hparams.yaml that inference reads (config.PerthConfig)."""

    sample_rate: int
    n_fft: int
    hop_size: int
    window_size: int
    window_fn: str
    stft_magnitude_min: float
    max_wmark_freq: float
    hidden_size: int

    @property
    def subband(self) -> int:
        """Bins the watermark lives in (model.compute_subband_freq): 128 at 32 kHz, 2 kHz."""
        nfreq = self.n_fft // 2 + 1
        return int(round(nfreq * self.max_wmark_freq / (self.sample_rate / 2)))

    @property
    def min_level_db(self) -> float:
        return float(20 * np.log10(self.stft_magnitude_min))


def perth_folder() -> Path:
    """resemble-perth's pretrained "implicit" run folder, found without importing perth."""
    try:
        spec = importlib.util.find_spec("perth")
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        raise PerthUnavailable(
            "The Perth watermark needs the optional package resemble-perth "
            f"(its weights): {INSTALL_HINT}"
        )
    folder = Path(next(iter(spec.submodule_search_locations))) / PRETRAINED
    if not (folder / "hparams.yaml").is_file():
        raise PerthUnavailable(
            f"resemble-perth is installed but {folder} has no hparams.yaml; "
            f"reinstall it: {INSTALL_HINT}"
        )
    return folder


def read_hparams(path: Path) -> PerthHparams:
    """hparams.yaml: flat `key: value` lines (yaml.dump of PerthConfig), the inference fields."""
    values: dict[str, str] = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, sep, value = line.partition(":")
            if not sep:
                raise ValueError(f"{path}: not a `key: value` line: {line!r}")
            values[key.strip()] = value.strip()
    cast = {"int": int, "float": float, "str": str}  # the fields' annotations
    try:
        return PerthHparams(**{f.name: cast[f.type](values[f.name]) for f in fields(PerthHparams)})
    except (KeyError, ValueError) as exc:
        raise ValueError(f"{path}: missing or malformed hyperparameter ({exc})") from exc


def latest_checkpoint(folder: Path) -> Path:
    """The highest-step perth_net_<step>.pth.tar (checkpoint_manager.load_latest)."""
    found = [
        (int(m.group(1)), p)
        for p in folder.iterdir()
        if (m := re.fullmatch(r".*_(\d+)\.pth\.tar", p.name))
    ]
    if not found:
        raise PerthUnavailable(
            f"{folder} holds no perth_net_<step>.pth.tar; reinstall resemble-perth: {INSTALL_HINT}"
        )
    return max(found)[1]


# --------------------------------------------------------------------------------- the network
class Conv(nn.Module):
    """model.Conv: a 'same' Conv1d (odd kernel), LeakyReLU(0.01) unless last."""

    def __init__(self, i: int, o: int, k: int, act: bool = True) -> None:
        super().__init__()
        self.conv = nn.Conv1d(i, o, k, padding=(k - 1) // 2)
        self.act = nn.LeakyReLU() if act else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv(x)
        return self.act(x) if self.act is not None else x


def _layers(inputs: int, hidden: int, outputs: int) -> nn.Sequential:
    return nn.Sequential(
        Conv(inputs, hidden, 1),
        *[Conv(hidden, hidden, 7) for _ in range(5)],
        Conv(hidden, outputs, 1, act=False),
    )


def magmask(magspec: torch.Tensor) -> torch.Tensor:
    """(B, F, T) normalised dB -> (B, T) 1.0 where a frame's dB sum exceeds 5 % of the max."""
    s = magspec.sum(dim=1)
    thresh = s.max(dim=1).values * MASK_FRACTION
    return (s > thresh[:, None]).float()


class Encoder(nn.Module):
    """Adds the watermark residual to the subband of the masked frames."""

    def __init__(self, hidden: int, subband: int) -> None:
        super().__init__()
        self.subband = subband
        self.layers = _layers(subband, hidden, subband)

    def forward(self, magspec: torch.Tensor) -> torch.Tensor:
        magspec = magspec.clone()
        mask = magmask(magspec)[:, None]
        magspec[:, : self.subband] += self.layers(magspec[:, : self.subband]) * mask
        return magspec


def _masked_mean(x: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    return (x * m).sum(dim=2) / m.sum(dim=2)


class Decoder(nn.Module):
    """Three branches on the subband stretched in time; attention-weighted masked means -> (B,)."""

    def __init__(self, hidden: int, subband: int) -> None:
        super().__init__()
        self.subband = subband
        self.slow_layers = _layers(subband, hidden, 2)
        self.normal_layers = _layers(subband, hidden, 2)
        self.fast_layers = _layers(subband, hidden, 2)

    def forward(self, magspec: torch.Tensor) -> torch.Tensor:
        mask = magmask(magspec)[:, None]
        subband = magspec[:, : self.subband]
        frames = subband.shape[2]
        attns, marks = [], []
        branches = (self.slow_layers, self.normal_layers, self.fast_layers)
        for layers, scale in zip(branches, STRETCH_SCALES, strict=True):
            x = subband  # the official interpolates only the slow and fast branches
            if scale != 1.0:
                x = F.interpolate(x, size=int(frames * scale), mode="linear", align_corners=True)
            out = layers(x)
            m = F.interpolate(mask, size=out.shape[2], mode="nearest")
            attns.append(_masked_mean(out[:, :1], m))
            marks.append(_masked_mean(out[:, 1:], m))
        attn = F.softmax(torch.cat(attns, dim=1), dim=1)
        return (torch.cat(marks, dim=1) * attn).sum(dim=1)


class PerthNet(nn.Module):
    """The checkpoint's `encoder.*` and `decoder.*` and the STFT of its hyperparameters."""

    def __init__(self, hp: PerthHparams) -> None:
        super().__init__()
        if hp.window_fn != "hann" or hp.window_size != hp.n_fft:
            raise ValueError(f"unsupported Perth STFT: window {hp.window_fn} {hp.window_size}")
        self.hp = hp
        self.encoder = Encoder(hp.hidden_size, hp.subband)
        self.decoder = Decoder(hp.hidden_size, hp.subband)
        self.register_buffer("window", torch.hann_window(hp.window_size), persistent=False)

    def load_checkpoint(self, path: Path) -> int:
        """Strict: the checkpoint holds exactly our keys plus the torchaudio modules' buffers,
        whose windows must be ours. Returns the training step."""
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
        state = dict(ckpt["model"])
        audio = {key: state.pop(key, None) for key in AUDIO_PROCESSOR_KEYS}
        missing = [key for key, value in audio.items() if value is None]
        if missing:
            raise ValueError(f"{path}: no {missing}")
        for key in AUDIO_PROCESSOR_KEYS[:2]:
            if not torch.equal(audio[key], self.window):
                raise ValueError(f"{path}: {key} is not the periodic Hann window of hparams")
        self.load_state_dict(state, strict=True)
        return int(ckpt["step"])

    # audio_processor.AudioProcessor
    def magphase(self, signal: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(S,) float32 at hp.sample_rate -> normalised dB magnitude and phase, (F, T) each."""
        hp = self.hp
        spec = torch.stft(
            signal,
            n_fft=hp.n_fft,
            hop_length=hp.hop_size,
            win_length=hp.window_size,
            window=self.window,
            center=True,
            pad_mode="reflect",
            return_complex=True,
        )
        phase = torch.angle(spec)
        mag = 20 * torch.log10(spec.abs().clip(hp.stft_magnitude_min))
        mag = (mag - hp.min_level_db) / (-hp.min_level_db + HEADROOM_DB)
        return mag, phase

    def signal(self, mag: torch.Tensor, phase: torch.Tensor, length: int | None) -> torch.Tensor:
        hp = self.hp
        mag = mag * (-hp.min_level_db + HEADROOM_DB) + hp.min_level_db
        mag = 10.0 ** ((mag / 20).clip(max=10))
        spec = mag * torch.exp(1.0j * phase)
        return torch.istft(
            spec,
            n_fft=hp.n_fft,
            hop_length=hp.hop_size,
            win_length=hp.window_size,
            window=self.window,
            center=True,
            length=length,
        )


# ------------------------------------------------------------------------------ resampling
def _kaiser_lowpass(numtaps: int, cutoff: float, beta: float = 5.0) -> np.ndarray:
    """scipy.signal.firwin(numtaps, cutoff, window=("kaiser", beta)) in float64."""
    m = np.arange(numtaps) - 0.5 * (numtaps - 1)
    h = cutoff * np.sinc(cutoff * m) * np.kaiser(numtaps, beta)
    return h / h.sum()


def resample_poly(x: np.ndarray, up: int, down: int) -> np.ndarray:
    """scipy.signal.resample_poly(x, up, down) (default Kaiser 5.0 window, zero padding), in
    float64, returned in x's float dtype. Output i is scipy's upfirdn sum over the filter taps
    that meet a sample of x (one polyphase branch), a block of outputs at a time."""
    x = np.asarray(x)
    g = math.gcd(up, down)
    up, down = up // g, down // g
    if up == down == 1:
        return x.copy()
    n_in = x.shape[0]
    n_out = -(-n_in * up // down)
    half_len = 10 * max(up, down)
    h = _kaiser_lowpass(2 * half_len + 1, 1.0 / max(up, down)) * up
    n_pre_pad = down - half_len % down
    n_pre_remove = (half_len + n_pre_pad) // down
    h = np.concatenate([np.zeros(n_pre_pad), h])
    taps = -(-h.size // up)
    branches = np.zeros(up * taps)
    branches[: h.size] = h
    branches = branches.reshape(taps, up).T  # [phase, j] = h[phase + j * up]
    last_base = (n_out - 1 + n_pre_remove) * down // up
    padded = np.concatenate(
        [np.zeros(taps - 1), x.astype(np.float64), np.zeros(max(0, last_base - n_in + 1))]
    )
    out = np.empty(n_out)
    block = max(1, _BLOCK_OUTPUTS // taps)
    for start in range(0, n_out, block):
        t = (np.arange(start, min(n_out, start + block)) + n_pre_remove) * down
        phase, base = t % up, t // up  # y[i] = sum_j h[phase + j up] x[base - j]
        values = padded[base[:, None] - np.arange(taps)[None] + taps - 1]
        out[start : start + t.size] = np.einsum("ij,ij->i", values, branches[phase])
    return out.astype(x.dtype)


# -------------------------------------------------------------------------------- the marker
class PerthWatermarker:
    """apply / detect / score as perth's PerthImplicitWatermarker, on our PerthNet."""

    def __init__(self, folder: Path | None = None, device: str | torch.device = "cpu") -> None:
        folder = perth_folder() if folder is None else Path(folder)
        self.hp = read_hparams(folder / "hparams.yaml")
        self.net = PerthNet(self.hp)
        self.step = self.net.load_checkpoint(latest_checkpoint(folder))
        self.net.to(device).eval()
        self.device = torch.device(device)

    @property
    def min_samples(self) -> int:
        """Shortest input at the model's rate: the centred STFT reflects n_fft // 2 samples."""
        return self.hp.n_fft // 2 + 1

    @torch.inference_mode()
    def apply(self, audio: np.ndarray, sample_rate: int, keep_length: bool = False) -> np.ndarray:
        """`audio` (S,) float at `sample_rate`, watermarked, float32. As the official:
        hop_size x (n // hop_size) samples at 32 kHz come back, so the result can be a few
        samples shorter; keep_length: exactly S samples (the iSTFT's length is n)."""
        audio = np.asarray(audio)
        rate = self.hp.sample_rate
        signal = resample(audio, sample_rate, rate)
        self._check_length(signal.shape[0])
        x = torch.from_numpy(np.array(signal, dtype=np.float32)).to(self.device)
        mag, phase = self.net.magphase(x)
        mag = self.net.encoder(mag[None])[0]
        out = self.net.signal(mag, phase, x.shape[0] if keep_length else None)
        out = resample(out.cpu().numpy(), rate, sample_rate)  # float32, as the official's
        if keep_length:
            out = out[: audio.shape[0]]
        return out.astype(np.float32, copy=False)

    @torch.inference_mode()
    def score(self, audio: np.ndarray, sample_rate: int) -> float:
        """The decoder's raw confidence (not clipped): about 1 watermarked, about 0 not."""
        audio = np.asarray(audio)
        rate = self.hp.sample_rate
        signal = audio if sample_rate == rate else resample_poly(audio, rate, sample_rate)
        self._check_length(signal.shape[0])
        x = torch.from_numpy(np.array(signal, dtype=np.float32)).to(self.device)
        mag, _ = self.net.magphase(x)
        return float(self.net.decoder(mag[None])[0])

    def detect(self, audio: np.ndarray, sample_rate: int, round: bool = True) -> float:
        """perth's get_watermark: the confidence clipped to [0, 1], rounded (1.0: marked)."""
        value = min(max(self.score(audio, sample_rate), 0.0), 1.0)
        return float(np.round(np.float32(value))) if round else value

    def _check_length(self, samples: int) -> None:
        if samples < self.min_samples:
            raise ValueError(
                f"too short for the Perth watermark: {samples} samples at "
                f"{self.hp.sample_rate} Hz (at least {self.min_samples})"
            )


_shared: PerthWatermarker | None = None
_shared_lock = threading.Lock()


def shared_watermarker() -> PerthWatermarker:
    """One CPU PerthWatermarker per process, loaded on first use (PerthUnavailable without
    resemble-perth)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = PerthWatermarker()
        return _shared


def perth_available() -> bool:
    """Whether resemble-perth's weights are installed (nothing is loaded)."""
    try:
        latest_checkpoint(perth_folder())
    except PerthUnavailable:
        return False
    return True


class StreamWatermarker:
    """The watermark of one stream, chunk by chunk (`push`), without clicks at the joins.

    Each chunk is watermarked together with up to `context` samples of the plain audio before it
    (so its start lies inside the pass, not at an edge), and the last `holdback` samples of the
    result wait for the next pass, which crossfades (Hann) from them into its own watermarked
    version of the same samples: the edge of a pass (resampling and STFT edge effects, measured
    in BENCHMARKS.md) is never heard. The final chunk (`final=True`) releases everything; a pass
    shorter than the STFT needs (< 32 ms at 24 kHz) is released unwatermarked."""

    def __init__(
        self, marker: PerthWatermarker, sample_rate: int, context: int, holdback: int
    ) -> None:
        self.marker = marker
        self.sample_rate = int(sample_rate)
        self.holdback = int(holdback)
        self.context = max(int(context), self.holdback)  # the held samples' plain audio too
        self._plain = np.zeros(0, dtype=np.float32)  # plain samples before the next chunk
        self._held = np.zeros(0, dtype=np.float32)  # watermarked, not yet released

    @property
    def held(self) -> int:
        """Samples received but not yet released."""
        return int(self._held.size)

    def push(self, audio: np.ndarray, final: bool = False) -> np.ndarray:
        """Add the stream's next plain chunk; returns the watermarked samples now final."""
        from .pcm import hann_rise

        audio = np.asarray(audio, dtype=np.float32)
        plain = np.concatenate([self._plain, audio])
        start = plain.size - audio.size - self._held.size  # where the held samples begin
        if plain.size * self.marker.hp.sample_rate < self.marker.min_samples * self.sample_rate:
            marked = plain.copy()
        else:
            marked = self.marker.apply(plain, self.sample_rate, keep_length=True)
        new = marked[start:]
        if self._held.size:
            rise = hann_rise(self._held.size)
            new[: self._held.size] = self._held * (1 - rise) + new[: self._held.size] * rise
        keep = 0 if final else min(self.holdback, new.size)
        self._held = new[new.size - keep :].copy()
        self._plain = plain[max(0, plain.size - self.context) :].copy()
        return new[: new.size - keep]


def stream_watermarker(sample_rate: int = 24_000) -> StreamWatermarker:
    """A StreamWatermarker for one stream on the shared model (PerthUnavailable without
    resemble-perth), with the measured settings scaled to `sample_rate`."""
    scale = sample_rate / 24_000
    return StreamWatermarker(
        shared_watermarker(),
        sample_rate,
        round(STREAM_CONTEXT * scale),
        round(STREAM_HOLDBACK * scale),
    )


_warned_unavailable = False


def stream_marker(
    enabled: bool | int, sample_rate: int
) -> Callable[[np.ndarray, bool], np.ndarray]:
    """What a streaming backend calls on each outgoing chunk, `mark(audio, final)`: a new
    stream_watermarker's push when `enabled` and resemble-perth is installed, else the audio
    as it is (without the package: logged once, the stream is not watermarked)."""
    global _warned_unavailable
    if enabled:
        try:
            return stream_watermarker(sample_rate).push
        except PerthUnavailable as exc:
            if not _warned_unavailable:
                _warned_unavailable = True
                log.warning("streamed audio is not watermarked: %s", exc)
    return lambda audio, final=False: audio
