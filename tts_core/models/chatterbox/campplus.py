"""CAMPPlus x-vector (`speaker_encoder.*` of s3gen_meanflow; spec chatterbox.md 7): 16 kHz
audio -> Kaldi fbank minus its time mean -> FCM 2-D res-net head -> TDNN -> 3 densely connected
CAM blocks with transitions -> mean/std pooling -> 1x1 dense + affine-free BatchNorm. Eval-mode
BatchNorm throughout (running stats from the file); module names are the checkpoint's."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .config import CampPlusSizes
from .features import kaldi_fbank

HEAD_CHANNELS, FEAT_DIM = 32, 80
BLOCKS = ((12, 3, 1), (24, 3, 2), (16, 3, 2))  # (layers, kernel, dilation): fixed by the code


def bn_relu(channels: int, affine: bool = True) -> nn.Sequential:
    """get_nonlinear("batchnorm-relu") / ("batchnorm_"): names `batchnorm`, `relu`."""
    seq = nn.Sequential()
    seq.add_module("batchnorm", nn.BatchNorm1d(channels, affine=affine))
    if affine:
        seq.add_module("relu", nn.ReLU())
    return seq


class BasicResBlock(nn.Module):
    def __init__(self, planes: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(planes, planes, 3, stride=(stride, 1), padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.shortcut = nn.Sequential()
        if stride != 1:
            self.shortcut = nn.Sequential(
                nn.Conv2d(planes, planes, 1, stride=(stride, 1), bias=False), nn.BatchNorm2d(planes)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x)))))
        out += self.shortcut(x)
        return F.relu(out)


class FCM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        c = HEAD_CHANNELS
        self.conv1 = nn.Conv2d(1, c, 3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c)
        self.layer1 = nn.Sequential(BasicResBlock(c, 2), BasicResBlock(c, 1))
        self.layer2 = nn.Sequential(BasicResBlock(c, 2), BasicResBlock(c, 1))
        self.conv2 = nn.Conv2d(c, c, 3, stride=(2, 1), padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, 80, T) -> (B, 320, T)
        out = F.relu(self.bn1(self.conv1(x.unsqueeze(1))))
        out = F.relu(self.bn2(self.conv2(self.layer2(self.layer1(out)))))
        return out.reshape(out.shape[0], out.shape[1] * out.shape[2], out.shape[3])


class TDNNLayer(nn.Module):
    def __init__(self, c_in: int, c_out: int) -> None:
        super().__init__()
        self.linear = nn.Conv1d(c_in, c_out, 5, stride=2, padding=2, bias=False)
        self.nonlinear = bn_relu(c_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.nonlinear(self.linear(x))


class CAMLayer(nn.Module):
    """Local conv gated by sigmoid(context): context = global mean + 100-frame segment means."""

    def __init__(self, bn_ch: int, c_out: int, kernel: int, dilation: int) -> None:
        super().__init__()
        pad = (kernel - 1) // 2 * dilation
        self.linear_local = nn.Conv1d(
            bn_ch, c_out, kernel, padding=pad, dilation=dilation, bias=False
        )
        self.linear1 = nn.Conv1d(bn_ch, bn_ch // 2, 1)
        self.linear2 = nn.Conv1d(bn_ch // 2, c_out, 1)

    @staticmethod
    def seg_pooling(x: torch.Tensor, seg_len: int = 100) -> torch.Tensor:
        seg = F.avg_pool1d(x, kernel_size=seg_len, stride=seg_len, ceil_mode=True)
        shape = seg.shape
        return (
            seg.unsqueeze(-1).expand(*shape, seg_len).reshape(*shape[:-1], -1)[..., : x.shape[-1]]
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.linear_local(x)
        context = x.mean(-1, keepdim=True) + self.seg_pooling(x)
        return y * torch.sigmoid(self.linear2(F.relu(self.linear1(context))))


class CAMDenseTDNNLayer(nn.Module):
    def __init__(self, c_in: int, c_out: int, bn_ch: int, kernel: int, dilation: int) -> None:
        super().__init__()
        self.nonlinear1 = bn_relu(c_in)
        self.linear1 = nn.Conv1d(c_in, bn_ch, 1, bias=False)
        self.nonlinear2 = bn_relu(bn_ch)
        self.cam_layer = CAMLayer(bn_ch, c_out, kernel, dilation)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.cam_layer(self.nonlinear2(self.linear1(self.nonlinear1(x))))


class CAMDenseTDNNBlock(nn.ModuleList):
    def __init__(self, layers: int, c_in: int, growth: int, bn_ch: int, kernel: int, dilation: int):
        super().__init__()
        for i in range(layers):
            layer = CAMDenseTDNNLayer(c_in + i * growth, growth, bn_ch, kernel, dilation)
            self.add_module(f"tdnnd{i + 1}", layer)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self:
            x = torch.cat([x, layer(x)], dim=1)
        return x


class TransitLayer(nn.Module):
    def __init__(self, c_in: int, c_out: int) -> None:
        super().__init__()
        self.nonlinear = bn_relu(c_in)
        self.linear = nn.Conv1d(c_in, c_out, 1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(self.nonlinear(x))


class StatsPool(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, C, T) -> (B, 2C): mean, std
        return torch.cat([x.mean(dim=-1), x.std(dim=-1, unbiased=True)], dim=-1)


class DenseLayer(nn.Module):
    def __init__(self, c_in: int, c_out: int) -> None:
        super().__init__()
        self.linear = nn.Conv1d(c_in, c_out, 1, bias=False)
        self.nonlinear = bn_relu(c_out, affine=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, C) -> (B, E)
        return self.nonlinear(self.linear(x.unsqueeze(dim=-1)).squeeze(dim=-1))


class CAMPPlus(nn.Module):
    def __init__(self, sizes: CampPlusSizes) -> None:
        super().__init__()
        self.head = FCM()
        growth, bn_ch = sizes.growth_rate, sizes.bn_size * sizes.growth_rate
        self.xvector = nn.Sequential()
        self.xvector.add_module(
            "tdnn", TDNNLayer(HEAD_CHANNELS * (FEAT_DIM // 8), sizes.init_channels)
        )
        channels = sizes.init_channels
        for i, (layers, kernel, dilation) in enumerate(BLOCKS):
            block = CAMDenseTDNNBlock(layers, channels, growth, bn_ch, kernel, dilation)
            self.xvector.add_module(f"block{i + 1}", block)
            channels += layers * growth
            self.xvector.add_module(f"transit{i + 1}", TransitLayer(channels, channels // 2))
            channels //= 2
        self.xvector.add_module("out_nonlinear", bn_relu(channels))
        self.xvector.add_module("stats", StatsPool())
        self.xvector.add_module("dense", DenseLayer(channels * 2, sizes.embedding_size))

    @torch.inference_mode()
    def forward(self, wav16k: torch.Tensor) -> torch.Tensor:
        """(S,) float32 16 kHz -> (1, E) x-vector (CAMPPlus.inference of one clip)."""
        feats = kaldi_fbank(wav16k)
        feats = (feats - feats.mean(dim=0, keepdim=True))[None]  # (1, T, 80)
        device = self.head.conv1.weight.device
        return self.xvector(self.head(feats.to(device).permute(0, 2, 1)))
