"""HiFT vocoder `mel2wav` (HiFTGenerator + ConvRNNF0Predictor; spec chatterbox.md 8.5): mel
(B, 80, T) at 50 Hz -> F0 -> neural-source-filter excitation (9 harmonics) -> iSTFTNet decoder
-> 24 kHz waveform (B, 480 T). Weight-normed convs use torch's own parametrization, so the keys
(`...parametrizations.weight.original0/1`) and the effective weight are the official ones.
Random draws (CPU generator, in this order): phases rand (B, 9, 1), noise randn (B, 9, L),
and randn (B, L, 1) that the official draws and discards."""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils import parametrize
from torch.nn.utils.parametrizations import weight_norm

from ...audio.analysis import periodic_hann
from .config import MELS, SAMPLE_RATE, HiftSizes

UPSAMPLE_RATES = (8, 5, 3)
UPSAMPLE_KERNELS = (16, 11, 7)
RESBLOCK_KERNELS = (3, 7, 11)
SOURCE_KERNELS = (7, 7, 11)
DILATIONS = (1, 3, 5)
N_FFT, HOP = 16, 4
HARMONICS = 8  # nb_harmonics: 9 sines with the fundamental
SINE_AMP, NOISE_STD, VOICED_THRESHOLD = 0.1, 0.003, 10.0
LRELU_SLOPE, AUDIO_LIMIT = 0.1, 0.99
SAMPLES_PER_FRAME = math.prod(UPSAMPLE_RATES) * HOP  # 480
TRIM_SAMPLES = SAMPLE_RATE // 50  # 20 ms silenced, then 20 ms raised-cosine fade-in


def trim_fade(device: torch.device | str = "cpu") -> torch.Tensor:
    """S3Token2Wav.trim_fade (applied to S3Gen's output, after HiFT): 480 zeros then
    (cos(linspace(pi, 0, 480)) + 1) / 2, (960,)."""
    fade = torch.zeros(2 * TRIM_SAMPLES)
    fade[TRIM_SAMPLES:] = (torch.cos(torch.linspace(torch.pi, 0, TRIM_SAMPLES)) + 1) / 2
    return fade.to(device)


class Snake(nn.Module):
    """x + 1/(alpha + 1e-9) sin^2(alpha x), alpha per channel (linear scale)."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.alpha = nn.Parameter(torch.empty(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        alpha = self.alpha.unsqueeze(0).unsqueeze(-1)
        return x + (1.0 / (alpha + 0.000000001)) * torch.pow(torch.sin(x * alpha), 2)


def _wn_conv(c_in: int, c_out: int, kernel: int, dilation: int = 1) -> nn.Module:
    return weight_norm(
        nn.Conv1d(
            c_in, c_out, kernel, 1, dilation=dilation, padding=(kernel * dilation - dilation) // 2
        )
    )


class ResBlock(nn.Module):
    def __init__(self, channels: int, kernel: int) -> None:
        super().__init__()
        self.convs1 = nn.ModuleList(_wn_conv(channels, channels, kernel, d) for d in DILATIONS)
        self.convs2 = nn.ModuleList(_wn_conv(channels, channels, kernel) for _ in DILATIONS)
        self.activations1 = nn.ModuleList(Snake(channels) for _ in DILATIONS)
        self.activations2 = nn.ModuleList(Snake(channels) for _ in DILATIONS)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for conv1, conv2, act1, act2 in zip(
            self.convs1, self.convs2, self.activations1, self.activations2, strict=True
        ):
            x = conv2(act2(conv1(act1(x)))) + x
        return x


class F0Predictor(nn.Module):
    """5 x (weight-normed conv k3 + ELU) -> |Linear(C -> 1)|: (B, 80, T) -> F0 (B, T) in Hz."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        for i in range(5):
            layers += [
                weight_norm(nn.Conv1d(MELS if i == 0 else channels, channels, 3, padding=1)),
                nn.ELU(),
            ]
        self.condnet = nn.Sequential(*layers)
        self.classifier = nn.Linear(channels, 1)

    def forward(self, mel: torch.Tensor) -> torch.Tensor:
        return torch.abs(self.classifier(self.condnet(mel).transpose(1, 2)).squeeze(-1))


class SourceModule(nn.Module):
    """`m_source`: SineGen (9 harmonics, random initial phases, noise) -> tanh(Linear(9 -> 1))."""

    def __init__(self) -> None:
        super().__init__()
        self.l_linear = nn.Linear(HARMONICS + 1, 1)

    def forward(self, f0: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
        """f0 (B, 1, L) at the output rate -> excitation (B, L, 1), drawing in the official
        order: phases, noise, then a draw the official makes and discards."""
        phase = initial_phases(f0.shape[0], generator).to(f0.device)
        noise = torch.randn((f0.shape[0], HARMONICS + 1, f0.shape[-1]), generator=generator)
        out = self.excite(f0, phase, noise.to(f0.device))
        torch.randn((f0.shape[0], f0.shape[-1], 1), generator=generator)  # unused upstream
        return out

    def excite(
        self,
        f0: torch.Tensor,
        phase: torch.Tensor,
        noise: torch.Tensor,
        start_cycles: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """SineGen + tanh(l_linear) with given draws: f0 (B, 1, L), phase (B, 9, 1), noise
        (B, 9, L) standard normal -> (B, L, 1). `start_cycles` (B, 9, 1): each harmonic's
        cycles before the first sample (a stream's window: float64, so every window agrees);
        None: the official's float32 ops from the start."""
        harmonics = torch.zeros((f0.shape[0], HARMONICS + 1, f0.shape[-1]), device=f0.device)
        for i in range(HARMONICS + 1):
            harmonics[:, i : i + 1, :] = f0 * (i + 1) / SAMPLE_RATE
        if start_cycles is None:
            theta = 2 * np.pi * (torch.cumsum(harmonics, dim=-1) % 1)
        else:  # float64: a float32 running sum drifts by ~1e-2 cycles over 10 s of a harmonic
            cycles = torch.cumsum(harmonics.double(), dim=-1) + start_cycles.double()
            theta = 2 * np.pi * (cycles % 1).float()
        sines = SINE_AMP * torch.sin(theta + phase)
        uv = (f0 > VOICED_THRESHOLD).type(torch.float32)
        noise_amp = uv * NOISE_STD + (1 - uv) * SINE_AMP / 3
        sines = (sines * uv + noise_amp * noise).transpose(1, 2)  # (B, L, 9)
        return torch.tanh(self.l_linear(sines))


def initial_phases(batch: int, generator: torch.Generator | None) -> torch.Tensor:
    """SineGen's Uniform(-pi, pi).sample((B, 9, 1)) = low + rand * (high - low) in float32
    tensors; the fundamental's phase is 0."""
    low = torch.tensor(-np.pi, dtype=torch.float32)
    high = torch.tensor(np.pi, dtype=torch.float32)
    phase = low + torch.rand((batch, HARMONICS + 1, 1), generator=generator) * (high - low)
    phase[:, 0, :] = 0
    return phase


class HiFTGenerator(nn.Module):
    def __init__(self, sizes: HiftSizes) -> None:
        super().__init__()
        base = sizes.base_channels
        self.m_source = SourceModule()
        self.conv_pre = weight_norm(nn.Conv1d(MELS, base, 7, 1, padding=3))
        self.ups = nn.ModuleList(
            weight_norm(
                nn.ConvTranspose1d(base // 2**i, base // 2 ** (i + 1), k, u, padding=(k - u) // 2)
            )
            for i, (u, k) in enumerate(zip(UPSAMPLE_RATES, UPSAMPLE_KERNELS, strict=True))
        )
        # Source path: the STFT frames (4x the last stage's rate) brought to each stage's rate.
        down_rates = np.cumprod([1, *UPSAMPLE_RATES[::-1][:-1]])[::-1]  # 15, 3, 1
        self.source_downs = nn.ModuleList()
        self.source_resblocks = nn.ModuleList()
        for i, (u, k) in enumerate(zip(down_rates, SOURCE_KERNELS, strict=True)):
            ch, u = base // 2 ** (i + 1), int(u)
            conv = (
                nn.Conv1d(N_FFT + 2, ch, 1, 1)
                if u == 1
                else nn.Conv1d(N_FFT + 2, ch, u * 2, u, padding=u // 2)
            )
            self.source_downs.append(conv)
            self.source_resblocks.append(ResBlock(ch, k))
        stages = range(len(UPSAMPLE_RATES))
        self.resblocks = nn.ModuleList(
            ResBlock(base // 2 ** (i + 1), k) for i in stages for k in RESBLOCK_KERNELS
        )
        self.conv_post = weight_norm(
            nn.Conv1d(base // 2 ** len(UPSAMPLE_RATES), N_FFT + 2, 7, 1, padding=3)
        )
        self.f0_predictor = F0Predictor(sizes.f0_channels)

    def fold_weight_norm(self) -> HiFTGenerator:
        """Each weight-normed conv's weight g v / ||v|| computed once as every forward would
        (equal bits) and kept as a plain weight: 82 norms a pass saved (~12 % of a streamed
        HiFT pass at real size). After loading (the checkpoint's keys are original0 / 1)."""
        for module in self.modules():
            if parametrize.is_parametrized(module, "weight"):
                parametrize.remove_parametrizations(module, "weight", leave_parametrized=True)
        return self

    @staticmethod
    def _window(device: torch.device) -> torch.Tensor:
        """scipy get_window("hann", 16, fftbins=True) as float32 (periodic Hann)."""
        return torch.from_numpy(periodic_hann(N_FFT)).float().to(device)

    @staticmethod
    def source_stft(source: torch.Tensor, window: torch.Tensor) -> torch.Tensor:
        """(B, 1, L) excitation -> (B, 18, L/4 + 1): real parts, then imaginary."""
        spec = torch.view_as_real(
            torch.stft(source.squeeze(1), N_FFT, HOP, N_FFT, window=window, return_complex=True)
        )
        return torch.cat([spec[..., 0], spec[..., 1]], dim=1)

    @staticmethod
    def waveform(x: torch.Tensor, window: torch.Tensor) -> torch.Tensor:
        """conv_post's (B, 18, T') -> (B, L): magnitude and phase, iSTFT, clamp."""
        magnitude = torch.clip(torch.exp(x[:, : N_FFT // 2 + 1, :]), max=1e2)
        phase = torch.sin(x[:, N_FFT // 2 + 1 :, :])
        spec = torch.complex(magnitude * torch.cos(phase), magnitude * torch.sin(phase))
        wav = torch.istft(spec, N_FFT, HOP, N_FFT, window=window)
        return torch.clamp(wav, -AUDIO_LIMIT, AUDIO_LIMIT)

    def decode(self, x: torch.Tensor, source: torch.Tensor) -> torch.Tensor:
        """mel (B, 80, T), source (B, 1, L) -> waveform (B, L)."""
        window = self._window(x.device)
        s_stft = self.source_stft(source, window)
        x = self.conv_pre(x)
        kernels = len(RESBLOCK_KERNELS)
        for i, up in enumerate(self.ups):
            x = up(F.leaky_relu(x, LRELU_SLOPE))
            if i == len(self.ups) - 1:
                x = F.pad(x, (1, 0), mode="reflect")
            x = x + self.source_resblocks[i](self.source_downs[i](s_stft))
            xs = self.resblocks[i * kernels](x)
            for j in range(1, kernels):
                xs += self.resblocks[i * kernels + j](x)
            x = xs / kernels
        return self.waveform(self.conv_post(F.leaky_relu(x)), window)

    @torch.inference_mode()
    def inference(self, mel: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
        """mel (B, 80, T) -> waveform (B, 480 T), before S3Gen's trim fade."""
        f0 = self.f0_predictor(mel)  # (B, T)
        f0 = F.interpolate(f0[:, None], scale_factor=float(SAMPLES_PER_FRAME), mode="nearest")
        source = self.m_source(f0, generator).transpose(1, 2)  # (B, 1, L)
        return self.decode(mel, source)
