"""TADA's codec networks (hume-tada tada/modules/{encoder,decoder}.py) in our own PyTorch.

* `LocalAttentionStack`: post-norm transformer layers (fused qkv with bias, RoPE on q/k, SDPA
  under a block mask, out_proj, LayerNorm(x + attn); LayerNorm(x + FFN(GELU))), final LayerNorm.
  The official RoPE rotates interleaved pairs (2i, 2i+1); `interleave_to_half` permutes the q/k
  rows of each head's qkv weight once at load so that layers.apply_rope's rotate-half pairs
  (i, i + D/2) are those pairs: the same rotation on the same numbers, and q.k unchanged by the
  common permutation (only the dot product's summation order changes).
* `encoder_segment_mask`, `decoder_segment_mask`: the two (different) "v2" block masks.
* `DACDecoder`: DAC-style CNN (conv k7, blocks of Snake + transposed conv + 3 residual units,
  Snake, conv k7, tanh); weight-normed convs (the checkpoint's keys), folded at load.

State-dict keys are the released ones, less the attention's derived buffers (checkpoint.py).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils import parametrize
from torch.nn.utils.parametrizations import weight_norm

from ..layers import Snake1d, apply_rope, inverse_frequencies, rope_cos_sin, scaled_dot_product

ROPE_THETA = 10000.0  # LocalSelfAttention._compute_rope_freqs


# ---------------------------------------------------------------------------- block attention
def encoder_segment_mask(token_masks: torch.Tensor) -> torch.Tensor:
    """The encoder's "v2" mask (encoder.py) as SDPA wants it: True = may attend. token_masks
    (B, T) in {0, 1} (1 at a token's frame) -> (B, 1, T, T).

    A marked frame starts a block (block id = cumsum of the marks). Unmarked frames attend the
    unmarked frames of their own block; marked frames attend their own block (marks included)
    and the unmarked frames of the previous block."""
    block = torch.cumsum(token_masks, dim=1)  # (B, T)
    marked = token_masks.bool()
    same = block[:, :, None] == block[:, None, :]  # (B, i, j)
    previous = block[:, None, :] == block[:, :, None] - 1
    unmarked_j = ~marked[:, None, :]
    marked_i = marked[:, :, None]
    allowed = (same & (unmarked_j | marked_i)) | (marked_i & previous & unmarked_j)
    return allowed[:, None]


def decoder_segment_mask(token_masks: torch.Tensor) -> torch.Tensor:
    """The decoder's "v2" mask (decoder.py, another rule under the same name): a marked frame
    ENDS its block (block id = cumsum - mark), and every frame attends its own block and the
    previous one. token_masks (B, T) -> (B, 1, T, T), True = may attend.

    So frame i sees at most back to the start of the previous block and forward to its own
    block's token frame: the decoder's transformer is local, which streaming relies on."""
    block = torch.cumsum(token_masks, dim=1) - token_masks  # (B, T)
    delta = block[:, :, None] - block[:, None, :]  # (B, i, j): 0 same block, 1 previous
    return ((delta == 0) | (delta == 1))[:, None]


def interleave_to_half(head_dim: int) -> torch.Tensor:
    """Row order of one head that turns interleaved RoPE pairs into rotate-half pairs:
    [0, 2, 4, ..., D-2, 1, 3, ..., D-1]."""
    return torch.cat((torch.arange(0, head_dim, 2), torch.arange(1, head_dim, 2)))


class LocalSelfAttention(nn.Module):
    """Fused qkv -> RoPE -> masked SDPA -> out_proj; returns LayerNorm(x + out)."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out_proj = nn.Linear(dim, dim)
        self.layer_norm = nn.LayerNorm(dim)

    @torch.no_grad()
    def rotate_half_layout(self) -> None:
        """Permute q and k rows per head (interleave_to_half); call once after loading."""
        dim, order = self.heads * self.head_dim, interleave_to_half(self.head_dim)
        rows = torch.cat([h * self.head_dim + order for h in range(self.heads)])
        for part in (0, 1):  # q, k (v keeps its layout)
            span = slice(part * dim, (part + 1) * dim)
            self.qkv.weight[span] = self.qkv.weight[span][rows]
            self.qkv.bias[span] = self.qkv.bias[span][rows]

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, ...], mask, cache=None):
        """x (B, T, C), rope cos/sin (T, D), mask (B, 1, T, T) bool or None -> (B, T, C).
        `cache` (streaming.py): the previous block's keys and values, attended before x's own,
        then replaced by them."""
        batch, steps, dim = x.shape
        qkv = self.qkv(x).reshape(batch, steps, 3, self.heads, self.head_dim)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)  # each (B, H, T, D)
        cos, sin = rope
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if cache is not None:
            keys = k if cache.k is None else torch.cat([cache.k, k], dim=2)
            values = v if cache.v is None else torch.cat([cache.v, v], dim=2)
            cache.k, cache.v = k, v
            k, v = keys, values
        out = scaled_dot_product(q, k, v, mask)
        out = self.out_proj(out.transpose(1, 2).reshape(batch, steps, dim))
        return self.layer_norm(x + out)


class LocalAttentionLayer(nn.Module):
    def __init__(self, dim: int, heads: int, feedforward: int) -> None:
        super().__init__()
        self.self_attn = LocalSelfAttention(dim, heads)
        # ffn.0 Linear, ffn.1 GELU, ffn.2 Dropout, ffn.3 Linear, ffn.4 Dropout (eval: identity)
        self.ffn = nn.Sequential(
            nn.Linear(dim, feedforward), nn.GELU(), nn.Identity(), nn.Linear(feedforward, dim)
        )
        self.norm = nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, ...], mask, cache=None):
        x = self.self_attn(x, rope, mask, cache)
        return self.norm(x + self.ffn(x))


class LocalAttentionStack(nn.Module):
    """hume-tada's LocalAttentionEncoder (no input_proj: d_input is never given), of a
    CodecStackConfig's sizes."""

    def __init__(self, config) -> None:
        super().__init__()
        dim, heads = config.hidden_dim, config.num_attn_heads
        self.layers = nn.ModuleList(
            LocalAttentionLayer(dim, heads, config.attn_dim_feedforward)
            for _ in range(config.num_attn_layers)
        )
        self.final_norm = nn.LayerNorm(dim)
        self.head_dim = dim // heads

    def rotate_half_layout(self) -> None:
        for layer in self.layers:
            layer.self_attn.rotate_half_layout()

    def rope(self, steps: int, dtype: torch.dtype, device: torch.device):
        """cos, sin (steps, D) of positions 0..steps-1: float32 angles as the official table
        (float64 for a float64 run)."""
        inv_freq = inverse_frequencies(self.head_dim, ROPE_THETA).to(device)
        return rope_cos_sin(inv_freq, steps, dtype)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """x (B, T, C), mask (B, 1, T, T) bool (True: may attend) -> (B, T, C)."""
        rope = self.rope(x.shape[1], x.dtype, x.device)
        for layer in self.layers:
            x = layer(x, rope, mask)
        return self.final_norm(x)


# ------------------------------------------------------------------------------- CNN (DAC-style)
def wn_conv(*args, **kwargs) -> nn.Conv1d:
    return weight_norm(nn.Conv1d(*args, **kwargs))


def wn_conv_transpose(*args, **kwargs) -> nn.ConvTranspose1d:
    return weight_norm(nn.ConvTranspose1d(*args, **kwargs))


class Block(nn.Module):
    """Layers run in order, under `block` (the released keys' `...block.N`)."""

    def __init__(self, *layers: nn.Module) -> None:
        super().__init__()
        self.block = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.block(x)


class ResidualUnit(Block):
    """x + (Snake, conv k7 dilation d "same", Snake, conv 1x1)(x)."""

    def __init__(self, dim: int, dilation: int) -> None:
        pad = (6 * dilation) // 2
        super().__init__(
            Snake1d(dim),
            wn_conv(dim, dim, 7, dilation=dilation, padding=pad),
            Snake1d(dim),
            wn_conv(dim, dim, 1),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.block(x)
        trim = (x.shape[-1] - y.shape[-1]) // 2
        if trim > 0:
            x = x[..., trim:-trim]
        return x + y


class DecoderBlock(Block):
    """Snake, transposed conv (k 2s, stride s, padding ceil(s/2)), residual units d = 1, 3, 9:
    T frames -> T s samples (s even) or T s - 1 (s odd)."""

    def __init__(self, in_dim: int, out_dim: int, stride: int) -> None:
        super().__init__(
            Snake1d(in_dim),
            wn_conv_transpose(
                in_dim, out_dim, 2 * stride, stride=stride, padding=math.ceil(stride / 2)
            ),
            *(ResidualUnit(out_dim, dilation) for dilation in (1, 3, 9)),
        )


class DACDecoder(nn.Module):
    """(B, C_in, T) -> (B, 1, samples) in [-1, 1]."""

    def __init__(self, in_channels: int, channels: int, strides: tuple[int, ...]) -> None:
        super().__init__()
        layers: list[nn.Module] = [wn_conv(in_channels, channels, 7, padding=3)]
        for i, stride in enumerate(strides):
            layers.append(DecoderBlock(channels // 2**i, channels // 2 ** (i + 1), stride))
        out = channels // 2 ** len(strides)
        layers += [Snake1d(out), wn_conv(out, 1, 7, padding=3), nn.Tanh()]
        self.model = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x)


def fold_weight_norm(module: nn.Module) -> None:
    """Each weight-normed conv's g v / ||v|| computed once (the op every official forward runs:
    equal bits) and kept as a plain weight. Call after loading."""
    for sub in module.modules():
        if parametrize.is_parametrized(sub, "weight"):
            parametrize.remove_parametrizations(sub, "weight", leave_parametrized=True)


# ------------------------------------------------------------------------------------- decoder
class TadaDecoder(nn.Module):
    """hume-tada's Decoder: decoder_proj -> local attention (v2 mask) -> DAC CNN.

    `decode(expanded, token_masks)`: expanded (B, T, embed_dim) acoustic vectors at their
    token's frame and zeros elsewhere (as TadaForCausalLM._decode_wav builds it), token_masks
    (B, T) -> waveform (B, 1, 480 T - 6) at 24 kHz for the released strides."""

    def __init__(self, config) -> None:  # config: CodecStackConfig
        super().__init__()
        self.config = config
        self.decoder_proj = nn.Linear(config.embed_dim, config.hidden_dim)
        self.local_attention_decoder = LocalAttentionStack(config)
        self.wav_decoder = DACDecoder(
            config.hidden_dim, config.wav_decoder_channels, config.strides
        )

    def after_load(self) -> TadaDecoder:
        fold_weight_norm(self)
        self.local_attention_decoder.rotate_half_layout()
        return self

    def hidden(self, expanded: torch.Tensor, token_masks: torch.Tensor) -> torch.Tensor:
        """The transformer's output (B, T, hidden_dim)."""
        mask = decoder_segment_mask(token_masks)
        return self.local_attention_decoder(self.decoder_proj(expanded), mask)

    def decode(self, expanded: torch.Tensor, token_masks: torch.Tensor) -> torch.Tensor:
        return self.wav_decoder(self.hidden(expanded, token_masks).transpose(1, 2))


# ------------------------------------------------------------------------------------- encoder
class EncoderBlock(Block):
    """Residual units d = 1, 3, 9 at dim/2, Snake, strided conv (k 2s, padding ceil(s/2)) to dim."""

    def __init__(self, dim: int, stride: int) -> None:
        half = dim // 2
        super().__init__(
            *(ResidualUnit(half, dilation) for dilation in (1, 3, 9)),
            Snake1d(half),
            wn_conv(half, dim, 2 * stride, stride=stride, padding=math.ceil(stride / 2)),
        )


class WavEncoder(Block):
    """(B, 1, S) -> (B, latent, frames): conv k7 to `width`, blocks doubling the width at each
    stride, Snake, conv k3 to `latent`. The release: width 64 (hard-coded officially), strides
    6 5 4 4 (480 samples a frame at 24 kHz)."""

    def __init__(self, width: int, strides: tuple[int, ...], latent: int) -> None:
        layers: list[nn.Module] = [wn_conv(1, width, 7, padding=3)]
        for stride in strides:
            width *= 2
            layers.append(EncoderBlock(width, stride))
        super().__init__(*layers, Snake1d(width), wn_conv(width, latent, 3, padding=1))


ENCODER_TAIL_PADDING = 960  # samples of zeros appended before the wav encoder (official)


class TadaEncoder(nn.Module):
    """hume-tada's Encoder without its aligner: `hidden(audio, token_masks)` is
    get_encoder_outputs (wav encoder, + pos_emb of the token marks, local attention under the
    encoder's v2 mask, hidden_linear); `token_values` the official sampling and gathering of one
    acoustic vector per token."""

    def __init__(self, config, width: int = 64) -> None:  # config: CodecStackConfig
        super().__init__()
        self.config = config
        self.wav_encoder = WavEncoder(width, config.strides, config.hidden_dim)
        self.local_attention_encoder = LocalAttentionStack(config)
        if config.hidden_dim != config.embed_dim:
            self.hidden_linear = nn.Linear(config.hidden_dim, config.embed_dim)
        self.pos_emb = nn.Embedding(2, config.hidden_dim)

    def after_load(self) -> TadaEncoder:
        fold_weight_norm(self)
        self.local_attention_encoder.rotate_half_layout()
        return self

    def hidden(self, audio: torch.Tensor, token_masks: torch.Tensor):
        """audio (B, S) at 24 kHz, token_masks (B, L) -> (B, T, embed_dim) and the masks
        padded (or cut) to the T frames."""
        x = self.wav_encoder(F.pad(audio[:, None], (0, ENCODER_TAIL_PADDING))).transpose(1, 2)
        masks = F.pad(token_masks, (0, x.shape[1] - token_masks.shape[1]))
        x = x + self.pos_emb(masks)
        x = self.local_attention_encoder(x, encoder_segment_mask(masks))
        if self.config.hidden_dim != self.config.embed_dim:
            x = self.hidden_linear(x)
        return x, masks

    def token_values(
        self,
        hidden: torch.Tensor,
        masks: torch.Tensor,
        positions: torch.Tensor,
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        """Encoder.forward's tail: the token frames (zeros elsewhere) plus N(0, std^2) noise
        (drawn over the whole (B, T, E) tensor, as randn_like), the frame before each 1-based
        position gathered, normalised with acoustic_mean/std -> (B, N, E)."""
        cfg = self.config
        marked = masks[..., None] != 0
        expanded = torch.where(marked, hidden, torch.zeros_like(hidden))
        if cfg.std > 0.0:
            noise = torch.randn(expanded.shape, generator=generator, dtype=expanded.dtype)
            expanded = torch.where(marked, expanded + noise * cfg.std, expanded)
        index = (positions - 1).clamp(min=0)[..., None].expand(-1, -1, expanded.shape[-1])
        values = torch.gather(expanded, 1, index)
        return (values - cfg.acoustic_mean) / cfg.acoustic_std
