"""TADA's aligner network: a wav2vec2 CTC model over the Llama 3 vocabulary (hume-tada
tada/modules/aligner.py builds transformers' Wav2Vec2ForCTC from facebook/wav2vec2-large's config
with vocab_size = the tokenizer's length; the weights are the codec's `aligner/` folder), in our
own PyTorch, eval mode, one clip at a time.

24 kHz audio -> 16 kHz (torchaudio's sinc resampling) -> conv feature extractor (7 convs, the
first with a per-channel GroupNorm, GELU) -> LayerNorm + projection -> + grouped positional conv
(weight-normed, "same" padding, GELU) -> LayerNorm -> post-norm transformer layers (attention,
LayerNorm(x + attn), x + FFN, LayerNorm) -> CTC head logits (frames, vocab). The official passes
an attention mask that covers the whole clip (the mask is built from the 24 kHz length against
the 16 kHz samples), so one clip attends everywhere, as here.

The wav2vec2 config: the tiny checkpoints carry it as `aligner/encoder_config.json`; the release
fetches facebook/wav2vec2-large's from the Hub. Only "group" feature norm with post-norm layers
(`do_stable_layer_norm` false) is built; another config raises.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.parametrizations import weight_norm

from ...audio.sinc import resample
from ..layers import scaled_dot_product
from .codec import fold_weight_norm

ALIGNER_RATE = 16000
WAV2VEC2_CONFIG = "encoder_config.json"


class AlignerConfigError(ValueError):
    pass


@dataclass(frozen=True)
class Wav2Vec2Config:
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    intermediate_size: int
    conv_dim: tuple[int, ...]
    conv_kernel: tuple[int, ...]
    conv_stride: tuple[int, ...]
    conv_bias: bool
    num_conv_pos_embeddings: int
    num_conv_pos_embedding_groups: int
    layer_norm_eps: float

    @classmethod
    def from_file(cls, path: Path) -> Wav2Vec2Config:
        raw = json.loads(Path(path).read_text())
        if raw.get("feat_extract_norm") != "group" or raw.get("do_stable_layer_norm", False):
            raise AlignerConfigError(
                f"{path}: only feat_extract_norm 'group' with post-norm "
                "layers (wav2vec2-large's) is built"
            )
        if (
            raw.get("hidden_act", "gelu") != "gelu"
            or raw.get("feat_extract_activation", "gelu") != "gelu"
        ):
            raise AlignerConfigError(f"{path}: only GELU activations are built")
        return cls(
            raw["hidden_size"],
            raw["num_hidden_layers"],
            raw["num_attention_heads"],
            raw["intermediate_size"],
            tuple(raw["conv_dim"]),
            tuple(raw["conv_kernel"]),
            tuple(raw["conv_stride"]),
            bool(raw.get("conv_bias", False)),
            raw["num_conv_pos_embeddings"],
            raw["num_conv_pos_embedding_groups"],
            float(raw.get("layer_norm_eps", 1e-5)),
        )


class ConvLayer(nn.Module):
    def __init__(
        self, cin: int, cout: int, kernel: int, stride: int, bias: bool, group_norm: bool
    ) -> None:
        super().__init__()
        self.conv = nn.Conv1d(cin, cout, kernel, stride=stride, bias=bias)
        if group_norm:
            self.layer_norm = nn.GroupNorm(cout, cout, affine=True)
        self.group_norm = group_norm

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv(x)
        if self.group_norm:
            x = self.layer_norm(x)
        return F.gelu(x)


class FeatureExtractor(nn.Module):
    def __init__(self, cfg: Wav2Vec2Config) -> None:
        super().__init__()
        dims = (1, *cfg.conv_dim)
        self.conv_layers = nn.ModuleList(
            ConvLayer(
                dims[i], dims[i + 1], cfg.conv_kernel[i], cfg.conv_stride[i], cfg.conv_bias, i == 0
            )
            for i in range(len(cfg.conv_dim))
        )

    def forward(self, audio: torch.Tensor) -> torch.Tensor:
        x = audio[:, None]
        for layer in self.conv_layers:
            x = layer(x)
        return x  # (B, C, frames)


class FeatureProjection(nn.Module):
    def __init__(self, cfg: Wav2Vec2Config) -> None:
        super().__init__()
        self.layer_norm = nn.LayerNorm(cfg.conv_dim[-1], eps=cfg.layer_norm_eps)
        self.projection = nn.Linear(cfg.conv_dim[-1], cfg.hidden_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.projection(self.layer_norm(x))


class PositionalConv(nn.Module):
    def __init__(self, cfg: Wav2Vec2Config) -> None:
        super().__init__()
        k = cfg.num_conv_pos_embeddings
        conv = nn.Conv1d(
            cfg.hidden_size,
            cfg.hidden_size,
            k,
            padding=k // 2,
            groups=cfg.num_conv_pos_embedding_groups,
        )
        self.conv = weight_norm(conv, name="weight", dim=2)
        self.trim = 1 if k % 2 == 0 else 0  # SamePad

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x.transpose(1, 2))
        if self.trim:
            y = y[:, :, : -self.trim]
        return F.gelu(y).transpose(1, 2)


class SelfAttention(nn.Module):
    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.q_proj, self.k_proj = nn.Linear(hidden, hidden), nn.Linear(hidden, hidden)
        self.v_proj, self.out_proj = nn.Linear(hidden, hidden), nn.Linear(hidden, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, steps, hidden = x.shape

        def heads(t: torch.Tensor) -> torch.Tensor:
            return t.reshape(batch, steps, self.heads, -1).transpose(1, 2)

        out = scaled_dot_product(
            heads(self.q_proj(x)), heads(self.k_proj(x)), heads(self.v_proj(x))
        )
        return self.out_proj(out.transpose(1, 2).reshape(batch, steps, hidden))


class FeedForward(nn.Module):
    def __init__(self, hidden: int, intermediate: int) -> None:
        super().__init__()
        self.intermediate_dense = nn.Linear(hidden, intermediate)
        self.output_dense = nn.Linear(intermediate, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.output_dense(F.gelu(self.intermediate_dense(x)))


class EncoderLayer(nn.Module):
    def __init__(self, cfg: Wav2Vec2Config) -> None:
        super().__init__()
        self.attention = SelfAttention(cfg.hidden_size, cfg.num_attention_heads)
        self.layer_norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.feed_forward = FeedForward(cfg.hidden_size, cfg.intermediate_size)
        self.final_layer_norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layer_norm(x + self.attention(x))
        return self.final_layer_norm(x + self.feed_forward(x))


class Encoder(nn.Module):
    def __init__(self, cfg: Wav2Vec2Config) -> None:
        super().__init__()
        self.pos_conv_embed = PositionalConv(cfg)
        self.layer_norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.layers = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.num_hidden_layers))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layer_norm(x + self.pos_conv_embed(x))
        for layer in self.layers:
            x = layer(x)
        return x


class Wav2Vec2(nn.Module):
    def __init__(self, cfg: Wav2Vec2Config) -> None:
        super().__init__()
        self.feature_extractor = FeatureExtractor(cfg)
        self.feature_projection = FeatureProjection(cfg)
        self.encoder = Encoder(cfg)
        self.masked_spec_embed = nn.Parameter(torch.zeros(cfg.hidden_size))  # training only

    def forward(self, audio: torch.Tensor) -> torch.Tensor:
        features = self.feature_extractor(audio).transpose(1, 2)
        return self.encoder(self.feature_projection(features))


class CTCModel(nn.Module):
    def __init__(self, cfg: Wav2Vec2Config, vocab: int) -> None:
        super().__init__()
        self.wav2vec2 = Wav2Vec2(cfg)
        self.lm_head = nn.Linear(cfg.hidden_size, vocab)

    def forward(self, audio: torch.Tensor) -> torch.Tensor:
        return self.lm_head(self.wav2vec2(audio))


class TadaAligner(nn.Module):
    """`logits(audio_24k)`: (B, S) at 24 kHz -> CTC logits (B, frames, vocab) at 50 frames/s.
    `layerdrop_draws`: the torch.rand([]) transformers' encoder draws per layer on every
    forward (its LayerDrop test, even in eval): a seeded caller draws as many to stay in step
    with the official random stream."""

    def __init__(self, cfg: Wav2Vec2Config, vocab: int) -> None:
        super().__init__()
        self.encoder = CTCModel(cfg, vocab)
        self.layerdrop_draws = cfg.num_hidden_layers

    def after_load(self) -> TadaAligner:
        fold_weight_norm(self)
        return self

    def logits(self, audio: torch.Tensor, sample_rate: int = 24000) -> torch.Tensor:
        return self.encoder(resample(audio, sample_rate, ALIGNER_RATE))
