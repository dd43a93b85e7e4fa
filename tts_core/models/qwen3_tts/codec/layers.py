"""Building blocks of the codec decoder, each usable in a full pass or one streaming step.

Module and parameter names follow the released checkpoint (`decoder.*` keys), so a plain
`load_state_dict` fills them. A module that keeps history takes `history=None` for a full pass
(zero left padding, as the official code) or its `ConvWindow` slot for a streaming step.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ....quant.linear import Int8Linear
from ... import laid_out
from . import kernels
from .streaming import ConvWindow


class SnakeBeta(nn.Module):
    """y = x + sin^2(x * e^alpha) / (e^beta + 1e-9), alpha and beta stored as logs per channel."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.alpha = nn.Parameter(torch.zeros(channels))
        self.beta = nn.Parameter(torch.zeros(channels))
        # (1, C, 1) derived at load time by `refresh_derived` (exp of the log parameters).
        self.register_buffer("alpha_exp", torch.ones(1, channels, 1), persistent=False)
        self.register_buffer("inv_beta", torch.ones(1, channels, 1), persistent=False)
        self.refresh_derived()

    @torch.no_grad()
    def refresh_derived(self) -> None:
        alpha = torch.exp(self.alpha.detach())[None, :, None]
        beta = torch.exp(self.beta.detach())[None, :, None]
        self.alpha_exp = alpha.to(self.alpha_exp.device)
        self.inv_beta = (1.0 / (beta + 1e-9)).to(self.inv_beta.device)

    def forward(self, x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """x (B, C, T) -> y, written into `out` (B, C, T) if given (it may be x, or the window
        a conv reads). One temporary instead of one per operation; each operation rounds as the
        plain expression's (t * t is pow(t, 2); mul then add, not addcmul, which rounds once:
        the same bits in float32 and bfloat16)."""
        fused = kernels.snake_beta(x, self.alpha_exp, self.inv_beta, out)
        if fused is not None:  # one pass over memory (native/snake_beta.c), the same bits
            return fused
        t = torch.mul(x, self.alpha_exp)
        t.sin_()  # a fresh contiguous tensor of x's shape: sin's vector/scalar split as before
        t.mul_(t)
        t.mul_(self.inv_beta)
        return torch.add(x, t, out=out) if out is not None else x + t


class CausalConv1d(nn.Module):
    """Stride-1 conv with (k - 1) * dilation zeros of left padding (`*.conv` keys)."""

    def __init__(
        self, in_ch: int, out_ch: int, kernel: int, dilation: int = 1, groups: int = 1
    ) -> None:
        super().__init__()
        self.conv = nn.Conv1d(in_ch, out_ch, kernel, dilation=dilation, groups=groups)
        self.history_size = (kernel - 1) * dilation
        self.in_channels = in_ch
        self.slot = -1  # index into DecoderState.convs, assigned by the decoder

    def forward(
        self, x: torch.Tensor, history: ConvWindow | None = None, act: SnakeBeta | None = None
    ) -> torch.Tensor:
        """conv(history ++ act(x)); act(x) is written straight into the conv's window."""
        return laid_out.conv1d(self.conv, window(x, self.history_size, history, act))


class CausalTransConv1d(nn.Module):
    """ConvTranspose1d(k, s) with its last k - s output samples cut; t inputs -> t * s outputs.

    Output block n depends on inputs n, n-1, ..., n - (ceil(k/s) - 1), so streaming keeps that
    many previous inputs and drops the output samples that belong to them.
    """

    def __init__(self, in_ch: int, out_ch: int, kernel: int, stride: int) -> None:
        super().__init__()
        self.conv = nn.ConvTranspose1d(in_ch, out_ch, kernel, stride=stride)
        self.stride = stride
        self.history_size = math.ceil(kernel / stride) - 1
        self.in_channels = in_ch
        self.slot = -1

    def forward(
        self, x: torch.Tensor, history: ConvWindow | None = None, act: SnakeBeta | None = None
    ) -> torch.Tensor:
        """act(x) written after the history (none in a full pass: zero inputs are left out)."""
        new_frames = x.shape[-1]
        size = 0 if history is None else self.history_size
        return self._overlap_add(window(x, size, history, act), new_frames)

    def _overlap_add(self, x: torch.Tensor, new_frames: int) -> torch.Tensor:
        """The transposed conv as one matmul and a sum of shifted blocks: input n adds
        W[:, :, j] x_n at output n*s + j, so output block n (s samples) is sum_i P[n - i, i] over
        the m = ceil(k/s) kernel blocks. Same math as ConvTranspose1d; on a CPU oneDNN's
        transposed conv re-lays out this weight on every call (~45-95 ms a call for the codec's
        1536 -> 768, k=16 layer), this takes ~3-8 ms. x (B, C_in, T) -> (B, C_out, new * s)."""
        batch, _, steps = x.shape
        blocks, stride = self.history_size + 1, self.stride
        products = self._products(x.transpose(1, 2))  # (B, T, m * C_out * s)
        products = products.view(batch, steps, blocks, -1, stride)  # (B, T, m, C_out, s)
        start = steps - new_frames
        out = products[:, start:, 0]  # (B, new, C_out, s)
        for i in range(1, blocks):
            shifted = products[:, max(start - i, 0) : steps - i, i]
            missing = new_frames - shifted.shape[1]  # inputs before the first one are zeros
            out = out + (F.pad(shifted, (0, 0, 0, 0, missing, 0)) if missing else shifted)
        out = out.permute(0, 2, 1, 3).reshape(batch, -1, new_frames * stride)  # (B, C_out, T')
        if self.conv.bias is not None:
            # after the re-layout: broadcast along contiguous time, vectorized; on (B, new,
            # C_out, s) the inner run is s samples and the same add took ~25x longer
            out = out + self.conv.bias[:, None]
        return out

    def _products(self, x: torch.Tensor) -> torch.Tensor:
        """x (B, T, C_in) -> (B, T, m * C_out * s): through the int8 layer once quantized."""
        int8 = getattr(self, "int8", None)
        if int8 is not None:
            return int8(x)
        return laid_out.matmul(self, x, self.conv.weight, self._weight_matrix)

    def quantize(self) -> None:
        """The matmul of _overlap_add over int8 weights (quant.Int8Linear: per output column
        of the weight matrix, activations per input step), in place of the float one."""
        self.int8 = Int8Linear(self._weight_matrix().t())
        self.__dict__.pop("_matrix", None)  # the float copy is no longer read

    def _weight_matrix(self, keep: bool = True) -> torch.Tensor:
        """(C_in, m * C_out * s) weight laid out for _overlap_add, cached per weight version
        if `keep` (oneDNN's own layout of it, models/laid_out.py, needs no second copy)."""
        weight = self.conv.weight  # (C_in, C_out, k)
        key = (weight.data_ptr(), weight.dtype, weight.device, weight._version)
        cached = getattr(self, "_matrix", None)
        if cached is None or cached[0] != key:
            blocks = self.history_size + 1
            padded = F.pad(weight, (0, blocks * self.stride - weight.shape[-1]))
            c_in, c_out = weight.shape[:2]
            matrix = padded.view(c_in, c_out, blocks, self.stride).permute(0, 2, 1, 3)
            cached = (key, matrix.reshape(c_in, -1).detach().contiguous())
            if not keep:
                return cached[1]
            self._matrix = cached
        return cached[1]


class ConvNeXtBlock(nn.Module):
    """Causal depthwise conv k7 -> LayerNorm -> Linear x4 -> GELU -> Linear -> gamma, residual."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dwconv = CausalConv1d(dim, dim, 7, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.pwconv1 = nn.Linear(dim, 4 * dim)
        self.act = nn.GELU()
        self.pwconv2 = nn.Linear(4 * dim, dim)
        self.gamma = nn.Parameter(torch.full((dim,), 1e-6))

    def forward(self, x: torch.Tensor, state: list[ConvWindow] | None = None) -> torch.Tensor:
        residual = x  # (B, C, T)
        x = self.dwconv(x, _slot(state, self.dwconv))
        x = x.permute(0, 2, 1)
        x = self.pwconv2(self.act(self.pwconv1(self.norm(x))))
        x = (self.gamma * x).permute(0, 2, 1)
        return residual + x


class ResidualUnit(nn.Module):
    """SnakeBeta -> causal conv k7 (dilated) -> SnakeBeta -> conv k1, plus the input."""

    def __init__(self, dim: int, dilation: int) -> None:
        super().__init__()
        self.act1 = SnakeBeta(dim)
        self.conv1 = CausalConv1d(dim, dim, 7, dilation=dilation)
        self.act2 = SnakeBeta(dim)
        self.conv2 = CausalConv1d(dim, dim, 1)

    def forward(self, x: torch.Tensor, state: list[ConvWindow] | None = None) -> torch.Tensor:
        y = self.conv1(x, _slot(state, self.conv1), act=self.act1)
        y = self.conv2(y, _slot(state, self.conv2), act=self.act2)  # k1: act2 in place on y
        return y.add_(x)


class DecoderBlock(nn.Module):
    """SnakeBeta -> causal ConvTranspose(k=2r, s=r) -> residual units with dilations 1, 3, 9."""

    def __init__(self, in_dim: int, out_dim: int, rate: int) -> None:
        super().__init__()
        units: list[nn.Module] = [
            SnakeBeta(in_dim),
            CausalTransConv1d(in_dim, out_dim, 2 * rate, rate),
        ]
        units += [ResidualUnit(out_dim, dilation) for dilation in (1, 3, 9)]
        self.block = nn.ModuleList(units)

    def forward(self, x: torch.Tensor, state: list[ConvWindow] | None = None) -> torch.Tensor:
        x = self.block[1](x, _slot(state, self.block[1]), act=self.block[0])
        for unit in self.block[2:]:
            x = unit(x, state)
        return x


def _slot(state: list[ConvWindow] | None, conv: nn.Module) -> ConvWindow | None:
    return None if state is None else state[conv.slot]


def window(
    x: torch.Tensor, size: int, history: ConvWindow | None, act: SnakeBeta | None
) -> torch.Tensor:
    """history ++ act(x): (B, C, size + t) for x (B, C, t); zeros for a full pass's history.

    act(x) (or x) is written once, into the window a conv reads: no padded or joined copy of
    the step's signal. Without history (k = 1) act runs in place on x, which the caller owns.
    """
    if size == 0:
        return x if act is None else act(x, out=x)
    if history is None:
        joined = x.new_empty(*x.shape[:2], size + x.shape[-1])
        joined[..., :size].zero_()
        fresh = joined[..., size:]
    else:
        fresh = history.open(x.shape[-1])
    if act is None:
        fresh.copy_(x)
    else:
        act(x, out=fresh)
    return joined if history is None else history.close()
