"""ECAPA-TDNN speaker encoder of the Base models: 24 kHz audio -> one talker-space vector.

blocks.0 TDNN -> SE-Res2Net blocks -> MFA (1x1 TDNN on the concatenated block outputs) ->
attentive statistics pooling -> fc (1x1 conv). Every conv is `padding="same"` with reflect
padding. Weights are the `speaker_encoder.*` tensors of model.safetensors, prefix stripped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from ..config_json import Fields
from ..state_check import mismatches, shapes_of
from .mel import MelConfig, log_mel_spectrogram


@dataclass(frozen=True)
class SpeakerEncoderConfig:
    """`speaker_encoder_config`; keys the JSON omits take the official class defaults, which the
    released 76-tensor layout confirms. enc_dim has no safe default (1024 / 2048): required."""

    enc_dim: int
    mel_dim: int = 128
    enc_channels: tuple[int, ...] = (512, 512, 512, 512, 1536)
    enc_kernel_sizes: tuple[int, ...] = (5, 3, 3, 3, 1)
    enc_dilations: tuple[int, ...] = (1, 2, 3, 4, 1)
    enc_attention_channels: int = 128
    enc_res2net_scale: int = 8
    enc_se_channels: int = 128
    sample_rate: int = 24000

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> SpeakerEncoderConfig:
        config = Fields(raw, "speaker_encoder_config").dataclass(cls)
        config.validate()
        return config

    def validate(self) -> None:
        sizes = (self.enc_dim, self.mel_dim, self.enc_attention_channels, self.enc_res2net_scale)
        sizes += (self.enc_se_channels, self.sample_rate, *self.enc_channels)
        sizes += (*self.enc_kernel_sizes, *self.enc_dilations)
        if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in sizes):
            raise ValueError(f"speaker_encoder_config: every size must be a positive int: {self}")
        n = len(self.enc_channels)
        if n < 3 or len(self.enc_kernel_sizes) != n or len(self.enc_dilations) != n:
            raise ValueError(
                "enc_channels, enc_kernel_sizes and enc_dilations need one entry per layer"
            )
        if any(c % self.enc_res2net_scale for c in self.enc_channels[1:-1]):
            raise ValueError("SE-Res2Net widths must be divisible by enc_res2net_scale")


def _tdnn_conv(in_ch: int, out_ch: int, kernel: int, dilation: int = 1) -> nn.Conv1d:
    return nn.Conv1d(
        in_ch, out_ch, kernel, dilation=dilation, padding="same", padding_mode="reflect"
    )


class TDNNBlock(nn.Module):
    def __init__(self, in_ch: int, out_ch: int, kernel: int, dilation: int) -> None:
        super().__init__()
        self.conv = _tdnn_conv(in_ch, out_ch, kernel, dilation)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.conv(x))


class Res2NetBlock(nn.Module):
    """Split channels into `scale` groups; group 0 passes, group i gets TDNN(x_i + y_{i-1})."""

    def __init__(self, channels: int, scale: int, kernel: int, dilation: int) -> None:
        super().__init__()
        width = channels // scale
        self.scale = scale
        self.blocks = nn.ModuleList(
            TDNNBlock(width, width, kernel, dilation) for _ in range(scale - 1)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        parts = torch.chunk(x, self.scale, dim=1)
        outputs = [parts[0]]
        for index in range(1, self.scale):
            part = parts[index] if index == 1 else parts[index] + outputs[-1]
            outputs.append(self.blocks[index - 1](part))
        return torch.cat(outputs, dim=1)


class SqueezeExcitation(nn.Module):
    def __init__(self, channels: int, se_channels: int) -> None:
        super().__init__()
        self.conv1 = _tdnn_conv(channels, se_channels, 1)
        self.conv2 = _tdnn_conv(se_channels, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate = torch.sigmoid(self.conv2(torch.relu(self.conv1(x.mean(dim=2, keepdim=True)))))
        return x * gate


class SERes2NetBlock(nn.Module):
    def __init__(self, cfg: SpeakerEncoderConfig, index: int) -> None:
        super().__init__()
        in_ch, out_ch = cfg.enc_channels[index - 1], cfg.enc_channels[index]
        kernel, dilation = cfg.enc_kernel_sizes[index], cfg.enc_dilations[index]
        self.tdnn1 = TDNNBlock(in_ch, out_ch, 1, 1)
        self.res2net_block = Res2NetBlock(out_ch, cfg.enc_res2net_scale, kernel, dilation)
        self.tdnn2 = TDNNBlock(out_ch, out_ch, 1, 1)
        self.se_block = SqueezeExcitation(out_ch, cfg.enc_se_channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.se_block(self.tdnn2(self.res2net_block(self.tdnn1(x))))
        return y + x


def _weighted_stats(x: torch.Tensor, weights: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and std over time of (B, C, T) with weights summing to 1 over T; std clamped 1e-12."""
    mean = (weights * x).sum(2)
    var = (weights * (x - mean.unsqueeze(2)).pow(2)).sum(2)
    return mean, torch.sqrt(var.clamp(1e-12))


class AttentiveStatisticsPooling(nn.Module):
    """(B, C, T) -> (B, 2C, 1): attention-weighted mean and std, attention fed global stats."""

    def __init__(self, channels: int, attention_channels: int) -> None:
        super().__init__()
        self.tdnn = TDNNBlock(channels * 3, attention_channels, 1, 1)
        self.conv = _tdnn_conv(attention_channels, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        steps = x.shape[-1]
        uniform = torch.ones(x.shape[0], 1, steps, dtype=x.dtype, device=x.device) / steps
        mean, std = _weighted_stats(x, uniform)
        context = torch.cat(
            [x, mean.unsqueeze(2).expand(-1, -1, steps), std.unsqueeze(2).expand(-1, -1, steps)],
            dim=1,
        )
        attention = torch.softmax(self.conv(torch.tanh(self.tdnn(context))), dim=2)
        mean, std = _weighted_stats(x, attention)
        return torch.cat([mean, std], dim=1).unsqueeze(2)


class SpeakerEncoder(nn.Module):
    def __init__(self, cfg: SpeakerEncoderConfig, mel: MelConfig | None = None) -> None:
        super().__init__()
        self.config = cfg
        self.mel_config = mel or MelConfig(sample_rate=cfg.sample_rate, n_mels=cfg.mel_dim)
        channels = cfg.enc_channels
        blocks: list[nn.Module] = [
            TDNNBlock(cfg.mel_dim, channels[0], cfg.enc_kernel_sizes[0], cfg.enc_dilations[0])
        ]
        blocks += [SERes2NetBlock(cfg, i) for i in range(1, len(channels) - 1)]
        self.blocks = nn.ModuleList(blocks)
        self.mfa = TDNNBlock(
            channels[-1], channels[-1], cfg.enc_kernel_sizes[-1], cfg.enc_dilations[-1]
        )
        self.asp = AttentiveStatisticsPooling(channels[-1], cfg.enc_attention_channels)
        self.fc = _tdnn_conv(channels[-1] * 2, cfg.enc_dim, 1)

    @classmethod
    def from_state_dict(
        cls,
        cfg: SpeakerEncoderConfig,
        state_dict: dict[str, torch.Tensor],
        device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.float32,
    ) -> SpeakerEncoder:
        """Build and load strictly; a `speaker_encoder.` prefix on the keys is stripped."""
        prefix = "speaker_encoder."
        weights = {k.removeprefix(prefix): v for k, v in state_dict.items()}
        model = cls(cfg)
        expected = model.state_dict()
        problems = mismatches(shapes_of(expected), shapes_of(weights))
        if problems:
            raise ValueError(
                "speaker encoder weights do not match the config: " + "; ".join(problems)
            )
        model.load_state_dict(weights)
        return model.to(device=device, dtype=dtype).eval()

    def forward(self, mels: torch.Tensor) -> torch.Tensor:
        """(B, mel_dim, frames) log-mels -> (B, enc_dim)."""
        x = mels
        outputs = []
        for block in self.blocks:
            x = block(x)
            outputs.append(x)
        x = self.mfa(torch.cat(outputs[1:], dim=1))
        return self.fc(self.asp(x)).squeeze(-1)

    @torch.inference_mode()
    def embed(self, audio_24k: np.ndarray) -> torch.Tensor:
        """Mono float audio at cfg.sample_rate -> speaker embedding (enc_dim,) in the model dtype."""
        audio = np.asarray(audio_24k)
        if audio.ndim != 1 or audio.size == 0:
            raise ValueError(f"expected non-empty mono audio (n,), got shape {audio.shape}")
        weight = self.fc.weight
        samples = torch.from_numpy(audio.astype(np.float32)).to(weight.device)
        mels = log_mel_spectrogram(samples, self.mel_config)  # (1, mel_dim, frames), float32
        return self(mels.to(weight.dtype))[0]
