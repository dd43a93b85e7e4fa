"""TADA's language model (hume-tada TadaForCausalLM) in our own PyTorch: the Llama 3 backbone
(layers.DecoderStack without q/k norms, Llama 3-scaled RoPE), the per-step input embedding, the
LM head and the flow head.

Each step's input is the sum, in the official order, of the token embedding, the projected
previous acoustic vector, the acoustic-mask embedding and the two duration embeddings (frames
before / after the token): `embed`. The final-norm hidden state gives the text logits
(`logits`; a tied model reads the embedding table) and conditions the flow head (through the
optional bottleneck, `condition`). State-dict keys are the released ones.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..layers import (
    DecoderStack,
    Embedding,
    RotaryTable,
    inverse_frequencies,
    llama3_inverse_frequencies,
    rope_cos_sin,
)
from .config import LMConfig
from .flow_head import FlowHead

MAX_POSITIONS = 8192  # RoPE rows precomputed (grown on demand by `rope_table`)


class Backbone(DecoderStack):
    """`model.*`: embed_tokens, layers, norm (the Llama of Llama 3.2)."""

    def __init__(self, cfg: LMConfig) -> None:
        super().__init__(cfg, qk_norm=False)
        self.embed_tokens = Embedding(cfg.vocab_size, cfg.hidden_size)


def llama3_table(cfg: LMConfig, positions: int) -> RotaryTable:
    """cos/sin of positions [0, positions): float32 position x inv_freq as transformers'
    LlamaRotaryEmbedding computes them (a product of two float32 numbers either way), with
    Llama 3's scaled frequencies when the config has rope_scaling."""
    table = RotaryTable(cfg.head_dim, cfg.rope_theta, 1)
    if cfg.rope_scaling is None:
        inv_freq = inverse_frequencies(cfg.head_dim, cfg.rope_theta)
    else:
        r = cfg.rope_scaling
        inv_freq = llama3_inverse_frequencies(
            cfg.head_dim,
            cfg.rope_theta,
            r.factor,
            r.low_freq_factor,
            r.high_freq_factor,
            r.original_max_position_embeddings,
        )
    table.cos, table.sin = rope_cos_sin(inv_freq, positions, torch.float32)
    return table


class TadaLM(nn.Module):
    def __init__(self, cfg: LMConfig) -> None:
        super().__init__()
        self.cfg = cfg
        hidden = cfg.hidden_size
        self.model = Backbone(cfg)
        if not cfg.tie_word_embeddings:
            self.lm_head = nn.Linear(hidden, cfg.vocab_size, bias=False)
        self.acoustic_proj = nn.Linear(cfg.acoustic_dim, hidden)
        self.time_start_embed = Embedding(cfg.num_time_classes, hidden)
        self.time_end_embed = Embedding(cfg.num_time_classes, hidden)
        self.acoustic_mask_emb = Embedding(2, hidden)
        if cfg.bottleneck_dim is not None:
            self.bottleneck_proj = nn.Linear(hidden, cfg.bottleneck_dim)
        self.prediction_head = FlowHead(
            cfg.head_hidden, cfg.latent_size, cfg.head_layers, cfg.head_ffn_ratio
        )
        self.rope = llama3_table(cfg, MAX_POSITIONS)

    def rope_table(self, positions: int) -> RotaryTable:
        """The RoPE table, grown (doubled) when `positions` exceed it."""
        if positions > self.rope.cos.shape[0]:
            size = max(positions, 2 * self.rope.cos.shape[0])
            self.rope = llama3_table(self.cfg, size).to(self.rope.cos.device)
        return self.rope

    def embed(
        self,
        ids: torch.Tensor,
        acoustic: torch.Tensor,
        acoustic_masks: torch.Tensor,
        before: torch.Tensor,
        after: torch.Tensor,
    ) -> torch.Tensor:
        """ids, masks, before, after (B, T) int; acoustic (B, T, A) -> (B, T, H)."""
        return (
            self.model.embed_tokens(ids)
            + self.acoustic_proj(acoustic)
            + self.acoustic_mask_emb(acoustic_masks.long())
            + self.time_start_embed(before)
            + self.time_end_embed(after)
        )

    def hidden(self, embeds: torch.Tensor, ctx) -> torch.Tensor:
        """Final-norm hidden states (B, T, H) of `embeds` under the step context `ctx`
        (layers.Span over the caches at its start, ...)."""
        positions = getattr(ctx, "start", 0) + embeds.shape[1]
        return self.model(embeds, ctx, self.rope_table(positions))

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        if self.cfg.tie_word_embeddings:
            return F.linear(hidden, self.model.embed_tokens.weight)
        return self.lm_head(hidden)

    def condition(self, hidden: torch.Tensor) -> torch.Tensor:
        """The flow head's condition: the hidden state through the bottleneck (if any)."""
        if self.cfg.bottleneck_dim is None:
            return hidden
        return self.bottleneck_proj(hidden)

    def new_caches(self, batch: int, max_len: int, dtype: torch.dtype, device):
        return self.model.new_caches(batch, max_len, dtype, device)
