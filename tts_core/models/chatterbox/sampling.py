"""Turbo T3 sampling: the HF logits processors `T3.inference_turbo` builds, in its order
(temperature, top-k, top-p, then the repetition penalty), and one `torch.multinomial` draw per
token from the caller's generator (spec chatterbox.md 9.3, 9.4). Same ops as transformers
5.2's processors, so the probabilities, and with them the draws, are bit-identical."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class TurboSampling:
    temperature: float = 0.8
    top_k: int = 1000
    top_p: float = 0.95
    repetition_penalty: float = 1.2

    def process(self, history: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
        """history (B, N) int64 ids the penalty sees, logits (B, V) -> processed (B, V)."""
        scores = logits
        if self.temperature > 0 and self.temperature != 1.0:
            scores = scores / self.temperature
        if self.top_k > 0:
            k = min(self.top_k, scores.shape[-1])
            scores = scores.masked_fill(
                scores < torch.topk(scores, k)[0][..., -1, None], -torch.inf
            )
        if self.top_p < 1.0:
            sorted_scores, order = torch.sort(scores, descending=False)
            cumulative = sorted_scores.softmax(dim=-1).cumsum(dim=-1)
            drop = cumulative <= (1 - self.top_p)
            drop[..., -1:] = False  # min_tokens_to_keep = 1
            scores = scores.masked_fill(drop.scatter(1, order, drop), -torch.inf)
        if self.repetition_penalty != 1.0:
            seen = torch.gather(scores, 1, history)
            penalty = self.repetition_penalty
            seen = torch.where(seen < 0, seen * penalty, seen / penalty)
            scores = scores.scatter(1, history, seen)
        return scores

    def draw(self, processed: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
        """One multinomial draw per row: (B, V) -> (B, 1) int64, on the generator's device (a
        CPU generator on a GPU model: the probabilities go to the CPU, so the draws are the
        official CPU stream's)."""
        probs = F.softmax(processed, dim=-1)
        if generator is not None and generator.device != probs.device:
            return torch.multinomial(probs.to(generator.device), 1, generator=generator).to(
                probs.device
            )
        return torch.multinomial(probs, 1, generator=generator)
