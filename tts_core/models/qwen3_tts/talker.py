"""The talker: a Qwen3 decoder over summed text/codec embeddings, predicting codec group 0.

Attribute names mirror the checkpoint (`talker.model.layers.N...`, `talker.codec_head`, ...).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..layers import DecoderStack, Embedding, KVCache, RotaryTable, Span
from .code_predictor import CodePredictor
from .config import TalkerConfig

INITIAL_ROPE_POSITIONS = 1024


class TextProjection(nn.Module):
    """Linear -> SiLU -> Linear with biases (text width -> talker width)."""

    def __init__(self, text_hidden: int, hidden: int) -> None:
        super().__init__()
        self.linear_fc1 = nn.Linear(text_hidden, text_hidden, bias=True)
        self.linear_fc2 = nn.Linear(text_hidden, hidden, bias=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear_fc2(F.silu(self.linear_fc1(x)))


class TalkerBackbone(DecoderStack):
    """Decoder stack plus the text and codec embedding tables."""

    def __init__(self, cfg: TalkerConfig) -> None:
        super().__init__(cfg.stack)
        self.text_embedding = Embedding(cfg.text_vocab_size, cfg.text_hidden_size)
        self.codec_embedding = Embedding(cfg.vocab_size, cfg.stack.hidden_size)


class Talker(nn.Module):
    def __init__(self, cfg: TalkerConfig) -> None:
        super().__init__()
        self.cfg = cfg
        hidden = cfg.stack.hidden_size
        self.model = TalkerBackbone(cfg)
        self.text_projection = TextProjection(cfg.text_hidden_size, hidden)
        self.codec_head = nn.Linear(hidden, cfg.vocab_size, bias=False)
        self.code_predictor = CodePredictor(cfg.code_predictor, talker_hidden=hidden)
        self.rope = self._rope_table(INITIAL_ROPE_POSITIONS)

    @property
    def device(self) -> torch.device:
        """Where the talker's weights are: the one place device is read from (the head is
        never quantized, so its weight also gives the float dtype)."""
        return self.codec_head.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.codec_head.weight.dtype

    def _rope_table(self, positions: int) -> RotaryTable:
        stack = self.cfg.stack
        positions = min(positions, stack.max_position_embeddings)
        return RotaryTable(stack.head_dim, stack.rope_theta, positions)

    def init_rope(self) -> None:
        """(Re)build the float32 RoPE tables on the weights' device (after meta construction)."""
        self.rope = self._rope_table(INITIAL_ROPE_POSITIONS).to(self.device)
        self.code_predictor.init_rope()

    def ensure_rope(self, max_len: int) -> None:
        """Grow the RoPE table to cover positions [0, max_len)."""
        limit = self.cfg.stack.max_position_embeddings
        if max_len > limit:
            raise ValueError(f"sequence of {max_len} positions exceeds the talker's {limit}")
        if self.rope.cos.shape[0] < max_len:
            size = max(max_len, 2 * self.rope.cos.shape[0])
            self.rope = self._rope_table(size).to(self.device)

    def text_embed(self, ids: torch.Tensor) -> torch.Tensor:
        """T(ids): ids (..., T) -> (..., T, H)."""
        return self.text_projection(self.model.text_embedding(ids))

    def codec_embed(self, ids: torch.Tensor) -> torch.Tensor:
        """C(ids): ids (..., T) -> (..., T, H)."""
        return self.model.codec_embedding(ids)

    def frame_embed(self, codes: torch.Tensor) -> torch.Tensor:
        """F(frame): codes (..., G) -> (..., H), the sum of all G group embeddings.

        Stacked then summed over the group axis, the same reduction as the official.
        """
        tables = [self.model.codec_embedding, *self.code_predictor.model.codec_embedding]
        groups = codes.unbind(-1)
        parts = [table(ids) for table, ids in zip(tables[: len(groups)], groups, strict=True)]
        return torch.stack(parts, dim=-2).sum(-2)

    def new_caches(self, batch: int, max_len: int) -> list[KVCache]:
        self.ensure_rope(max_len)
        return self.model.new_caches(batch, max_len, self.dtype, self.device)

    def forward(
        self, embeds: torch.Tensor, caches: list[KVCache], start: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """embeds (B, T, H) at positions [start, start+T) -> (logits (B, V) float32 of the last
        position, final-norm hidden (B, H) of the last position)."""
        hidden = self.model(embeds, Span(caches, start), self.rope)[:, -1]
        return self.codec_head(hidden).float(), hidden
