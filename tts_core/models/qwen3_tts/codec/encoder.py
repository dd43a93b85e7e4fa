"""Mimi encoder: 24 kHz mono audio -> 12.5 Hz RVQ codes (`encoder.*` keys, HF Mimi names).

SEANet (causal convs, ELU, residual blocks, strided downsampling to 25 Hz) -> causal transformer
(LayerNorm, GELU MLP, layer scale, RoPE) -> stride-2 conv to 12.5 Hz -> split RVQ encode.
The transformer is plain causal: HF Mimi builds its mask with `create_causal_mask`, which ignores
the config's `sliding_window` (250), so every frame sees all earlier frames.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ...layers import Attention, LayerScale, Span, inverse_frequencies, rope_cos_sin
from .config import MimiEncoderConfig
from .quantizer import EncoderRVQ


class MimiConv1d(nn.Module):
    """Causal conv: (k_eff - stride) left padding plus the right padding that makes the last
    window fit, both in `pad_mode` (zeros for "constant")."""

    def __init__(
        self,
        in_ch: int,
        out_ch: int,
        kernel: int,
        pad_mode: str,
        stride: int = 1,
        dilation: int = 1,
        bias: bool = True,
    ) -> None:
        super().__init__()
        self.conv = nn.Conv1d(in_ch, out_ch, kernel, stride, dilation=dilation, bias=bias)
        self.stride = stride
        self.kernel = (kernel - 1) * dilation + 1
        self.padding_total = self.kernel - stride
        self.pad_mode = pad_mode

    def extra_padding(self, length: int) -> int:
        frames = -(-(length - self.kernel + self.padding_total) // self.stride)  # ceil
        ideal = frames * self.stride + self.kernel - self.padding_total
        return ideal - length

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, C, T)
        pads = (self.padding_total, self.extra_padding(x.shape[-1]))
        return self.conv(F.pad(x, pads, mode=self.pad_mode))


class MimiResnetBlock(nn.Module):
    def __init__(self, cfg: MimiEncoderConfig, dim: int, dilation: int) -> None:
        super().__init__()
        hidden = dim // cfg.compress
        self.block = nn.ModuleList(
            [
                nn.ELU(),
                MimiConv1d(dim, hidden, cfg.residual_kernel_size, cfg.pad_mode, dilation=dilation),
                nn.ELU(),
                MimiConv1d(hidden, dim, 1, cfg.pad_mode),
            ]
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        residual = x
        for layer in self.block:
            x = layer(x)
        return residual + x


class SEANetEncoder(nn.Module):
    """(B, 1, N) -> (B, hidden, ceil(N / prod(ratios)))."""

    def __init__(self, cfg: MimiEncoderConfig) -> None:
        super().__init__()
        layers: list[nn.Module] = [MimiConv1d(1, cfg.num_filters, cfg.kernel_size, cfg.pad_mode)]
        width = cfg.num_filters
        for ratio in reversed(cfg.upsampling_ratios):
            for j in range(cfg.num_residual_layers):
                layers.append(MimiResnetBlock(cfg, width, cfg.dilation_growth_rate**j))
            layers += [
                nn.ELU(),
                MimiConv1d(width, width * 2, ratio * 2, cfg.pad_mode, stride=ratio),
            ]
            width *= 2
        layers += [nn.ELU(), MimiConv1d(width, cfg.hidden_size, cfg.last_kernel_size, cfg.pad_mode)]
        self.layers = nn.ModuleList(layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


class MimiMLP(nn.Module):
    """fc2(gelu(fc1(x))), no biases (not gated: Mimi's own MLP)."""

    def __init__(self, cfg: MimiEncoderConfig) -> None:
        super().__init__()
        self.fc1 = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.fc2 = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x)))


class MimiTransformerLayer(nn.Module):
    def __init__(self, cfg: MimiEncoderConfig) -> None:
        super().__init__()
        self.input_layernorm = nn.LayerNorm(cfg.hidden_size, eps=cfg.norm_eps)
        self.self_attn = Attention(
            cfg.hidden_size,
            cfg.num_attention_heads,
            cfg.num_key_value_heads,
            cfg.head_dim,
            bias=cfg.attention_bias,
        )
        self.self_attn_layer_scale = LayerScale(cfg.hidden_size)
        self.post_attention_layernorm = nn.LayerNorm(cfg.hidden_size, eps=cfg.norm_eps)
        self.mlp = MimiMLP(cfg)
        self.mlp_layer_scale = LayerScale(cfg.hidden_size)

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        attended = self.self_attn(self.input_layernorm(x), rope, Span(), 0)  # causal, from 0
        x = x + self.self_attn_layer_scale(attended)
        return x + self.mlp_layer_scale(self.mlp(self.post_attention_layernorm(x)))


class MimiTransformer(nn.Module):
    def __init__(self, cfg: MimiEncoderConfig) -> None:
        super().__init__()
        self.layers = nn.ModuleList(MimiTransformerLayer(cfg) for _ in range(cfg.num_hidden_layers))
        # Kept out of the buffers so a cast of the module to bf16 never degrades it.
        self.inv_freq_fp32 = inverse_frequencies(cfg.head_dim, cfg.rope_theta)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, T, hidden)
        rope = rope_cos_sin(self.inv_freq_fp32.to(x.device), x.shape[1], x.dtype)
        for layer in self.layers:
            x = layer(x, rope)
        return x


class MimiSplitQuantizer(nn.Module):
    def __init__(self, cfg: MimiEncoderConfig) -> None:
        super().__init__()
        args = (cfg.codebook_size, cfg.vector_quantization_hidden_dimension, cfg.hidden_size)
        self.num_semantic = cfg.num_semantic_quantizers
        self.semantic_residual_vector_quantizer = EncoderRVQ(self.num_semantic, *args)
        self.acoustic_residual_vector_quantizer = EncoderRVQ(
            cfg.num_quantizers - self.num_semantic, *args
        )

    def refresh_derived(self) -> None:
        self.semantic_residual_vector_quantizer.refresh_derived()
        self.acoustic_residual_vector_quantizer.refresh_derived()

    def encode(self, embeddings: torch.Tensor, count: int) -> torch.Tensor:
        """(B, hidden, T) -> codes (B, count, T); both groups read the same embeddings."""
        semantic = self.semantic_residual_vector_quantizer.encode(embeddings, self.num_semantic)
        acoustic = self.acoustic_residual_vector_quantizer.encode(
            embeddings, count - self.num_semantic
        )
        return torch.cat([semantic, acoustic], dim=0).transpose(0, 1)


class MimiEncoder(nn.Module):
    """(B, 1, N) audio -> (B, count, frames) codes at 12.5 Hz (frames before trimming)."""

    def __init__(self, cfg: MimiEncoderConfig) -> None:
        super().__init__()
        self.config = cfg
        self.encoder = SEANetEncoder(cfg)
        self.encoder_transformer = MimiTransformer(cfg)
        # HF Mimi builds the downsample conv with replicate padding, whatever pad_mode says.
        self.downsample = MimiConv1d(
            cfg.hidden_size,
            cfg.hidden_size,
            cfg.downsample_kernel,
            "replicate",
            stride=2,
            bias=False,
        )
        self.quantizer = MimiSplitQuantizer(cfg)
        self.register_load_state_dict_post_hook(lambda module, _keys: module.refresh_derived())

    def refresh_derived(self) -> None:
        self.quantizer.refresh_derived()

    @torch.inference_mode()
    def forward(self, audio: torch.Tensor, count: int) -> torch.Tensor:
        hidden = self.encoder(audio)  # (B, hidden, T25)
        hidden = self.encoder_transformer(hidden.transpose(1, 2)).transpose(1, 2)
        hidden = self.downsample(hidden)  # (B, hidden, T12)
        return self.quantizer.encode(hidden, count)
