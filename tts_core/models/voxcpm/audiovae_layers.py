"""Building blocks of AudioVAE V2 (official `modules/audiovae/audio_vae_v2.py`).

Module and parameter names follow `audiovae.pth` (`weight_g`, `weight_v`, `bias`, `alpha`, ...),
so the checkpoint's keys are exactly this tree's state dict. Weight norm (dim 0) is applied once
at load (`refresh_weight`, with the same `torch._weight_norm` the official forward pre-hook
calls on every forward) and kept as a non-persistent buffer.

A conv that keeps history takes `state=None` for a full pass (zero left padding, as the official
code) or the stream's `VAEDecoderState` for a streaming step (its history slot instead of zeros).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ..layers import Snake1d
from .vae_streaming import VAEDecoderState


class _WeightNormed(nn.Module):
    """weight = g * v / ||v||, the norm over every dim but 0 (g: (dim0, 1, 1))."""

    def _init_weight_norm(self, weight_shape: tuple[int, int, int], bias: bool) -> None:
        self.weight_g = nn.Parameter(torch.ones(weight_shape[0], 1, 1))
        self.weight_v = nn.Parameter(torch.zeros(weight_shape))
        self.bias = nn.Parameter(torch.zeros(self.out_channels)) if bias else None
        self.register_buffer("weight", torch.zeros(weight_shape), persistent=False)

    @torch.no_grad()
    def refresh_weight(self) -> None:
        self.weight = torch._weight_norm(self.weight_v, self.weight_g, 0)


class WNCausalConv1d(_WeightNormed):
    """Official WNCausalConv1d: left-pad `2 * padding - output_padding` zeros, then conv."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int,
        *,
        stride: int = 1,
        dilation: int = 1,
        groups: int = 1,
        padding: int = 0,
        output_padding: int = 0,
        bias: bool = True,
    ) -> None:
        super().__init__()
        self.out_channels = out_channels
        self.in_channels = in_channels
        self.stride, self.dilation, self.groups = stride, dilation, groups
        self.history = 2 * padding - output_padding  # left padding: frames a stream keeps
        self.slot = -1  # index into VAEDecoderState.histories (streaming convs only)
        self._init_weight_norm((out_channels, in_channels // groups, kernel_size), bias)

    def forward(self, x: torch.Tensor, state: VAEDecoderState | None = None) -> torch.Tensor:
        if state is not None and self.history > 0:
            if self.stride != 1:
                raise RuntimeError("streaming is only defined for stride-1 convs")
            x = state.histories[self.slot].push(x)
        elif self.history > 0:
            x = F.pad(x, (self.history, 0))
        return F.conv1d(x, self.weight, self.bias, self.stride, 0, self.dilation, self.groups)


class WNCausalTransposeConv1d(_WeightNormed):
    """Official WNCausalTransposeConv1d (kernel 2s, stride s): transposed conv, then drop the
    last `2 * ceil(s/2) - s % 2` (= s) samples, so t frames give exactly t * s samples.

    Output block n depends on inputs n and n - 1 (`history` = (k - 1) // s = 1 frame), so a
    streaming step prepends the saved frame and keeps only the blocks of the new frames.
    """

    def __init__(self, in_channels: int, out_channels: int, stride: int) -> None:
        super().__init__()
        self.out_channels = out_channels
        self.in_channels = in_channels
        self.stride = stride
        self.kernel_size = 2 * stride
        self.trim = 2 * math.ceil(stride / 2) - stride % 2
        self.history = (self.kernel_size - 1) // stride
        self.slot = -1
        # ConvTranspose1d weight is (C_in, C_out, k): the norm runs per *input* channel.
        self._init_weight_norm((in_channels, out_channels, self.kernel_size), bias=True)

    def forward(self, x: torch.Tensor, state: VAEDecoderState | None = None) -> torch.Tensor:
        if state is None:
            y = F.conv_transpose1d(x, self.weight, self.bias, self.stride)
            return y[..., : -self.trim] if self.trim else y
        new_frames = x.shape[-1]
        y = F.conv_transpose1d(
            state.histories[self.slot].push(x), self.weight, self.bias, self.stride
        )
        start = self.history * self.stride
        return y[..., start : start + new_frames * self.stride]


class CausalResidualUnit(nn.Module):
    """Snake -> causal k7 conv (dilation d, pad 6d, grouped) -> Snake -> 1x1 conv; + input."""

    def __init__(self, dim: int, dilation: int, groups: int) -> None:
        super().__init__()
        self.block = nn.ModuleList(
            [
                Snake1d(dim),
                WNCausalConv1d(
                    dim, dim, 7, dilation=dilation, groups=groups, padding=(6 * dilation) // 2
                ),
                Snake1d(dim),
                WNCausalConv1d(dim, dim, 1),
            ]
        )

    def forward(self, x: torch.Tensor, state: VAEDecoderState | None = None) -> torch.Tensor:
        y = self.block[1](self.block[0](x), state)
        y = self.block[3](self.block[2](y), state)
        return x + y


class CausalEncoderBlock(nn.Module):
    """3 residual units on C (dilations 1, 3, 9) -> Snake -> conv C -> 2C, kernel 2s, stride s."""

    def __init__(self, output_dim: int, stride: int, groups: int) -> None:
        super().__init__()
        input_dim = output_dim // 2
        self.block = nn.Sequential(
            *(CausalResidualUnit(input_dim, d, groups) for d in (1, 3, 9)),
            Snake1d(input_dim),
            WNCausalConv1d(
                input_dim,
                output_dim,
                2 * stride,
                stride=stride,
                padding=math.ceil(stride / 2),
                output_padding=stride % 2,
            ),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.block(x)


class CausalDecoderBlock(nn.Module):
    """Snake(C_in) -> transposed conv C_in -> C_out (x stride) -> 3 residual units on C_out."""

    def __init__(self, input_dim: int, output_dim: int, stride: int, groups: int) -> None:
        super().__init__()
        self.input_channels = input_dim
        self.block = nn.ModuleList(
            [
                Snake1d(input_dim),
                WNCausalTransposeConv1d(input_dim, output_dim, stride),
                *(CausalResidualUnit(output_dim, d, groups) for d in (1, 3, 9)),
            ]
        )

    def forward(self, x: torch.Tensor, state: VAEDecoderState | None = None) -> torch.Tensor:
        x = self.block[1](self.block[0](x), state)
        for unit in self.block[2:]:
            x = unit(x, state)
        return x


class SampleRateCondition(nn.Module):
    """`scale_bias` conditioning: x * scale_embed[bucket] + bias_embed[bucket], per channel."""

    def __init__(self, channels: int, buckets: int) -> None:
        super().__init__()
        self.scale_embed = nn.Embedding(buckets, channels)
        self.bias_embed = nn.Embedding(buckets, channels)

    def forward(self, x: torch.Tensor, bucket: int) -> torch.Tensor:
        scale = self.scale_embed.weight[bucket][None, :, None]
        bias = self.bias_embed.weight[bucket][None, :, None]
        return x * scale + bias
