"""The code predictor ("sub-talker"): 15 sequential passes per frame give codes 1..15.

Pass 1 sees [past_hidden, C(c0)] at positions 0, 1; pass j (2..15) sees the embedding of
c_{j-1} at position j. `lm_head[j-1]` predicts group j; `codec_embedding[i]` embeds group i+1.
Its small static KV cache is reused every frame: positions restart at 0 and only the filled
prefix is ever read, so no reset copy is needed.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from ...quant.linear import rowwise
from ..layers import DecoderStack, Embedding, KVCache, RotaryTable, Span
from .config import CodePredictorConfig

# logits (B, V) float32 -> chosen ids (B,)
CodeChooser = Callable[[torch.Tensor], torch.Tensor]


class CodePredictorBackbone(DecoderStack):
    def __init__(self, cfg: CodePredictorConfig, talker_hidden: int) -> None:
        super().__init__(cfg.stack)
        # Input embeddings have the talker width (projected afterwards when widths differ).
        self.codec_embedding = nn.ModuleList(
            Embedding(cfg.vocab_size, talker_hidden) for _ in range(cfg.num_code_groups - 1)
        )


class CodePredictor(nn.Module):
    def __init__(self, cfg: CodePredictorConfig, talker_hidden: int) -> None:
        super().__init__()
        self.cfg = cfg
        hidden = cfg.stack.hidden_size
        self.model = CodePredictorBackbone(cfg, talker_hidden)
        self.lm_head = nn.ModuleList(
            nn.Linear(hidden, cfg.vocab_size, bias=False) for _ in range(cfg.num_code_groups - 1)
        )
        if talker_hidden != hidden:
            self.small_to_mtp_projection = nn.Linear(talker_hidden, hidden, bias=True)
        else:
            self.small_to_mtp_projection = nn.Identity()
        self.rope = RotaryTable(cfg.stack.head_dim, cfg.stack.rope_theta, cfg.num_code_groups)

    @property
    def device(self) -> torch.device:
        return self.model.norm.weight.device

    @property
    def dtype(self) -> torch.dtype:
        """The stack's float dtype (its projections and heads may be int8)."""
        return self.model.norm.weight.dtype

    def init_rope(self) -> None:
        cfg = self.cfg
        table = RotaryTable(cfg.stack.head_dim, cfg.stack.rope_theta, cfg.num_code_groups)
        self.rope = table.to(self.device)

    def new_caches(self, batch: int) -> list[KVCache]:
        return self.model.new_caches(batch, self.cfg.num_code_groups, self.dtype, self.device)

    def _pass(
        self, embeds: torch.Tensor, caches: list[KVCache], start: int, head: nn.Module, by_row: bool
    ) -> torch.Tensor:
        """embeds (B, T, talker_H) -> float32 logits (B, V) of `head` from the last position;
        by_row: the float projection and head, and attention, one row at a time (see rowwise
        and Attention.attend), so that no row depends on the batch."""
        x = rowwise(self.small_to_mtp_projection, embeds, by_row)
        hidden = self.model(x, Span(caches, start, rows_apart=by_row), self.rope)[:, -1]
        logits = rowwise(head, hidden, by_row)
        return logits if logits.dtype == torch.float32 else logits.float()

    def predict(
        self,
        past_hidden: torch.Tensor,
        c0_embed: torch.Tensor,
        caches: list[KVCache],
        choose: CodeChooser,
        by_row: bool = False,
    ) -> torch.Tensor:
        """past_hidden, c0_embed (B, talker_H) -> codes of groups 1..G-1, (B, G-1) int64.
        by_row: keep each row's result independent of the batch (the batch scheduler's rows)."""
        heads, embeddings = list(self.lm_head), list(self.model.codec_embedding)
        first = torch.stack((past_hidden, c0_embed), dim=1)  # (B, 2, talker_H)
        codes = [choose(self._pass(first, caches, 0, heads[0], by_row))]  # each (B,)
        for group in range(2, len(heads) + 1):
            embed = embeddings[group - 2](codes[-1][:, None])  # (B, 1, talker_H)
            codes.append(choose(self._pass(embed, caches, group, heads[group - 1], by_row)))
        return torch.stack(codes, dim=1)
