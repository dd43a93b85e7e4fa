"""T3 sampling of both Chatterbox models: the HF logits processors each official T3 inference
builds, in its order (transformers 5.2's ops: bit-identical probabilities and draws), and one
`torch.multinomial` draw per token (spec chatterbox.md 9.2-9.4). Each dataclass's fields are
its model's sampling knobs by name, declared in knobs.py (the model's `with_knobs`)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .knobs import EnglishSamplingKnobs, TurboSamplingKnobs


def penalize(scores: torch.Tensor, history: torch.Tensor, penalty: float) -> torch.Tensor:
    """RepetitionPenalty: the scores (B, V) of the ids in history (B, N) divided by `penalty`
    (multiplied where negative)."""
    seen = torch.gather(scores, 1, history)
    seen = torch.where(seen < 0, seen * penalty, seen / penalty)
    return scores.scatter(1, history, seen)


def top_p_filter(scores: torch.Tensor, top_p: float) -> torch.Tensor:
    """TopP: -inf outside the likeliest ids that together hold `top_p` (one kept at least)."""
    sorted_scores, order = torch.sort(scores, descending=False)
    cumulative = sorted_scores.softmax(dim=-1).cumsum(dim=-1)
    drop = cumulative <= (1 - top_p)
    drop[..., -1:] = False  # min_tokens_to_keep = 1
    return scores.masked_fill(drop.scatter(1, order, drop), -torch.inf)


def draw(processed: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """One multinomial draw per row: (B, V) -> (B, 1) int64, on the generator's device (a CPU
    generator on a GPU model: the official CPU stream's draws)."""
    probs = F.softmax(processed, dim=-1)
    if generator is not None and generator.device != probs.device:
        drawn = torch.multinomial(probs.to(generator.device), 1, generator=generator)
        return drawn.to(probs.device)
    return torch.multinomial(probs, 1, generator=generator)


@dataclass(frozen=True)
class TurboSampling(TurboSamplingKnobs):
    """`T3.inference_turbo`'s processors: temperature, top-k, top-p, repetition penalty."""

    def process(self, history: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
        """history (B, N) int64 ids the penalty sees, logits (B, V) -> processed (B, V)."""
        scores = logits
        if self.temperature > 0 and self.temperature != 1.0:
            scores = scores / self.temperature
        if self.top_k > 0:
            k = min(self.top_k, scores.shape[-1])
            kth = torch.topk(scores, k).values[:, -1:]  # (B, 1): the k-th largest score
            scores = scores.masked_fill(scores < kth, -torch.inf)
        if self.top_p < 1.0:
            scores = top_p_filter(scores, self.top_p)
        if self.repetition_penalty != 1.0:
            scores = penalize(scores, history, self.repetition_penalty)
        return scores


@dataclass(frozen=True)
class EnglishSampling(EnglishSamplingKnobs):
    """The English generate()'s processors; cfg_weight 0 runs one row without guidance (the
    official raises there: it builds a 2-row start embedding for a 1-row prompt)."""

    @property
    def guided(self) -> bool:
        return self.cfg_weight > 0.0

    def combine(self, logits: torch.Tensor) -> torch.Tensor:
        """(rows, V) last logits -> (1, V): cond + w (cond - uncond) with w a float32 tensor."""
        cond = logits[0:1]
        if not self.guided:
            return cond
        weight = torch.as_tensor(self.cfg_weight, device=cond.device, dtype=cond.dtype)
        return cond + weight * (cond - logits[1:2])

    def process(self, history: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
        """history (1, N): start + drawn ids; logits (1, V) -> processed (1, V):
        RepetitionPenalty, temperature, MinP, TopP, as T3.inference applies them."""
        scores = penalize(logits, history, float(self.repetition_penalty))
        if self.temperature != 1.0:
            scores = scores / self.temperature
        probs = torch.softmax(scores, dim=-1)
        remove = probs < self.min_p * probs.amax(dim=-1, keepdim=True)
        remove.scatter_(-1, torch.topk(probs, 1, dim=-1).indices, False)
        return top_p_filter(scores.masked_fill(remove, -torch.inf), self.top_p)
