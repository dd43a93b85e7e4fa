"""Turbo T3: text + voice prompt -> S3 speech tokens with a GPT-2 backbone (spec chatterbox.md
9.1, 9.3). Attribute names are the keys of `t3_turbo_v1.safetensors`; `tfmr.wte` and
`text_head` are in the file but unused at inference (the official deletes `wte` after its
strict load), so the loader drops them (checkpoint.py)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch import nn

from .config import SPEAKER_EMBED, SPEECH_VOCAB, START_SPEECH, STOP_SPEECH, T3Sizes
from .gpt2 import GPT2Stack
from .sampling import TurboSampling

MAX_NEW_TOKENS = 1000  # inference_turbo's max_gen_len: up to 1 + 1000 draws


class CondEnc(nn.Module):
    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.spkr_enc = nn.Linear(SPEAKER_EMBED, hidden)


@dataclass
class T3Output:
    tokens: torch.Tensor  # (N,) int64, EOS dropped (what inference_turbo returns)
    logits: list[torch.Tensor]  # teacher-forced runs: raw speech-head logits per step, (1, V)
    stop_reason: str = "eos"  # "eos": STOP drawn (or nothing left to draw); "max_tokens"


class T3Turbo(nn.Module):
    def __init__(self, sizes: T3Sizes) -> None:
        super().__init__()
        hidden = sizes.n_embd
        self.tfmr = GPT2Stack(hidden, sizes.n_head, sizes.n_layer, sizes.n_positions)
        self.cond_enc = CondEnc(hidden)
        self.text_emb = nn.Embedding(sizes.text_vocab, hidden)
        self.speech_emb = nn.Embedding(SPEECH_VOCAB, hidden)
        self.speech_head = nn.Linear(hidden, SPEECH_VOCAB, bias=True)

    def prompt(
        self, speaker_emb: torch.Tensor, prompt_tokens: torch.Tensor, text_ids: torch.Tensor
    ) -> torch.Tensor:
        """[spk (1) | speech_emb(prompt P) | text_emb(text L) | speech_emb(start)] -> (1, 2+P+L, H).
        speaker_emb (1, 256), prompt_tokens (1, P), text_ids (1, L): no text start/stop ids."""
        spk = self.cond_enc.spkr_enc(speaker_emb.view(-1, SPEAKER_EMBED))[:, None]  # (1, 1, H)
        start = torch.full_like(text_ids[:, :1], START_SPEECH)
        parts = (
            spk,
            self.speech_emb(prompt_tokens),
            self.text_emb(text_ids),
            self.speech_emb(start),
        )
        return torch.cat(parts, dim=1)

    @torch.inference_mode()
    def generate(
        self,
        speaker_emb: torch.Tensor,
        prompt_tokens: torch.Tensor,
        text_ids: torch.Tensor,
        sampling: TurboSampling,
        generator: torch.Generator | None,
        max_new_tokens: int = MAX_NEW_TOKENS,
        forced: torch.Tensor | None = None,
    ) -> T3Output:
        """inference_turbo: prefill, then one step per drawn token until STOP (kept in the draws,
        dropped from `tokens`) or max_new_tokens + 1 draws. `forced` (N,): teacher forcing, the
        given tokens are fed instead of drawn (no draws; for logit parity tests)."""
        logits_seen: list[torch.Tensor] = []
        drawn = list(self.draws(speaker_emb, prompt_tokens, text_ids, sampling, generator,
                                max_new_tokens, forced, logits_seen))  # fmt: skip
        tokens = torch.cat(drawn, dim=1)[0]
        steps = max_new_tokens + 1 if forced is None else len(forced)
        reason = "max_tokens" if len(drawn) == steps and forced is None else "eos"
        if len(tokens) and int(tokens[-1]) == STOP_SPEECH:
            tokens, reason = tokens[:-1], "eos"
        return T3Output(tokens, logits_seen, reason)

    @torch.inference_mode()
    def draws(
        self,
        speaker_emb: torch.Tensor,
        prompt_tokens: torch.Tensor,
        text_ids: torch.Tensor,
        sampling: TurboSampling,
        generator: torch.Generator | None,
        max_new_tokens: int = MAX_NEW_TOKENS,
        forced: torch.Tensor | None = None,
        logits_seen: list[torch.Tensor] | None = None,
    ) -> Iterator[torch.Tensor]:
        """Each drawn token (1, 1) as soon as it is drawn (STOP included when drawn): the loop
        of `generate`, which consumes it; `stream` reads it token by token (T3 is causal, so
        the streamed tokens are generate's, from the same draws in the same order)."""
        embeds = self.prompt(speaker_emb, prompt_tokens, text_ids)
        steps = max_new_tokens + 1 if forced is None else len(forced)
        caches = self.tfmr.new_caches(1, embeds.shape[1] + steps, embeds.dtype, embeds.device)
        hidden = self.tfmr(embeds, caches, 0)[:, -1:]  # (1, 1, H)
        position = embeds.shape[1]
        history = torch.full((1, 1), START_SPEECH, dtype=torch.long, device=embeds.device)
        drawn: list[torch.Tensor] = []
        for step in range(steps):
            logits = self.speech_head(hidden)[:, -1, :]  # (1, V)
            if logits_seen is not None and forced is not None:  # parity checks only
                logits_seen.append(logits)  # (1001 x 6563 floats at most)
            processed = sampling.process(history, logits)
            if step > 0 and torch.all(processed == -torch.inf):
                return
            if forced is None:
                token = sampling.draw(processed, generator)  # (1, 1)
            else:
                token = forced[step].view(1, 1).to(embeds.device)
            drawn.append(token)
            yield token
            # The official checks STOP inside its step loop only: a STOP from the prefill's
            # draw is fed back like any token.
            if (step > 0 and int(token) == STOP_SPEECH) or step == steps - 1:
                return
            # The penalty sees the drawn tokens only from the second draw on (no start id).
            history = torch.cat(drawn, dim=1)
            hidden = self.tfmr(self.speech_emb(token), caches, position)
            position += 1
