"""TADA's forced alignment of a transcript's tokens to the aligner's CTC frames (hume-tada
tada/modules/aligner.py `_align_text_tokens` and `Aligner._align_text_tokens`).

Each token gets one frame, frames strictly increasing, maximising the sum of the chosen frames'
raw logits for their tokens (logits, not log-probabilities, as the official). A dynamic
programme over (frame i, token j): best[i, j] = max(skip: best[i-1, j], use: best[i-1, j-1] +
score[i, j]), ties to "use"; the first token's column is the running maximum, and token j can
first sit at frame j (the diagonal, the cumulative sum). Float32 sums in the official order.
"""

from __future__ import annotations

import math

import torch

SKIP = -1  # back-pointer of a frame not used by the token


def align_tokens(scores: torch.Tensor) -> list[int]:
    """scores (L, T) float32: the logit of token j at frame i -> the frame of each token."""
    frames, tokens = scores.shape
    best = torch.full((frames, tokens), -math.inf)
    back = torch.zeros(frames, tokens, dtype=torch.long)
    first = torch.cummax(scores[:, 0], dim=0)
    best[:, 0], back[:, 0] = first.values, first.indices
    if tokens <= frames:
        diagonal = torch.arange(tokens)
        best[diagonal, diagonal] = torch.cumsum(scores[diagonal, diagonal], dim=0)
        back[diagonal, diagonal] = diagonal
    for i in range(1, frames):
        top = min(i, tokens)
        if top <= 1:
            continue
        j = torch.arange(1, top)
        skip, use = best[i - 1, j], best[i - 1, j - 1] + scores[i, j]
        take = use >= skip
        best[i, j] = torch.where(take, use, skip)
        back[i, j] = torch.where(take, torch.tensor(i), torch.tensor(SKIP))
    return _trace(back, frames - 1, tokens - 1)


def _trace(back: torch.Tensor, i: int, j: int) -> list[int]:
    positions = [0] * (j + 1)
    while j >= 0:
        pointer = int(back[i, j])
        if j == 0:
            positions[0] = pointer
            break
        if pointer != SKIP:
            positions[j] = pointer
            j -= 1
        i -= 1
    return positions


def token_alignment(
    logits: torch.Tensor, tokens: torch.Tensor, frames: int, end_of_text: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """One clip: logits (L, V) of the CTC head, tokens (N,) of the transcript, `frames` = ceil(
    seconds x 50) -> 1-based token positions (N',) and the frame marks (frames,) in {0, 1}.

    Only the transcript's token columns and column 0 keep their logits (the rest -inf, as the
    official); end-of-text tokens are left out of the alignment."""
    kept = torch.cat([tokens.new_zeros(1), tokens])
    masked = torch.full(logits.shape, -math.inf, dtype=torch.float32)
    masked[:, kept] = logits[:, kept].float()
    tokens = tokens[tokens != end_of_text]
    positions = align_tokens(masked[:, tokens])
    marks = torch.zeros(frames, dtype=torch.long)
    marks[positions] = 1
    return torch.tensor(positions, dtype=torch.long) + 1, marks
