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

from .config import MimiEncoderConfig
from .quantizer import EncoderRVQ
from .transformer import rope_tables, rotate


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


class MimiAttention(nn.Module):
    def __init__(self, cfg: MimiEncoderConfig) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = (
            cfg.num_attention_heads,
            cfg.num_key_value_heads,
            cfg.head_dim,
        )
        bias = cfg.attention_bias
        self.q_proj = nn.Linear(cfg.hidden_size, self.heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(cfg.hidden_size, self.kv_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(cfg.hidden_size, self.kv_heads * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(self.heads * self.head_dim, cfg.hidden_size, bias=bias)
        exponents = torch.arange(0, self.head_dim, 2, dtype=torch.int64).float() / self.head_dim
        self.inv_freq_fp32 = 1.0 / (cfg.rope_theta**exponents)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, steps, _ = x.shape  # (B, T, hidden)
        q = self.q_proj(x).view(batch, steps, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(batch, steps, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(batch, steps, self.kv_heads, self.head_dim).transpose(1, 2)
        cos, sin = rope_tables(self.inv_freq_fp32.to(x.device), steps, x.dtype)
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        if self.kv_heads != self.heads:
            k = k.repeat_interleave(self.heads // self.kv_heads, dim=1)
            v = v.repeat_interleave(self.heads // self.kv_heads, dim=1)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=steps > 1)
        return self.o_proj(out.transpose(1, 2).reshape(batch, steps, -1))


class MimiMLP(nn.Module):
    def __init__(self, cfg: MimiEncoderConfig) -> None:
        super().__init__()
        self.fc1 = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.fc2 = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x)))


class _Scale(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.full((dim,), 0.01))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.scale * x


class MimiTransformerLayer(nn.Module):
    def __init__(self, cfg: MimiEncoderConfig) -> None:
        super().__init__()
        self.input_layernorm = nn.LayerNorm(cfg.hidden_size, eps=cfg.norm_eps)
        self.self_attn = MimiAttention(cfg)
        self.self_attn_layer_scale = _Scale(cfg.hidden_size)
        self.post_attention_layernorm = nn.LayerNorm(cfg.hidden_size, eps=cfg.norm_eps)
        self.mlp = MimiMLP(cfg)
        self.mlp_layer_scale = _Scale(cfg.hidden_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attn_layer_scale(self.self_attn(self.input_layernorm(x)))
        return x + self.mlp_layer_scale(self.mlp(self.post_attention_layernorm(x)))


class MimiTransformer(nn.Module):
    def __init__(self, cfg: MimiEncoderConfig) -> None:
        super().__init__()
        self.layers = nn.ModuleList(MimiTransformerLayer(cfg) for _ in range(cfg.num_hidden_layers))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
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
