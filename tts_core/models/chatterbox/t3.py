"""Turbo T3: text + voice prompt -> S3 speech tokens with a GPT-2 backbone (spec chatterbox.md
9.1, 9.3). Attribute names are the keys of `t3_turbo_v1.safetensors` (`tfmr.wte` and
`text_head` unused: dropped at load, checkpoint.py)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch
from torch import nn

from ..layers import KVCache
from .config import SPEAKER_EMBED, SPEECH_VOCAB, START_SPEECH, STOP_SPEECH, T3Sizes
from .gpt2 import GPT2Stack
from .sampling import TurboSampling, draw

MAX_NEW_TOKENS = 1000  # inference_turbo's max_gen_len: up to 1 + 1000 draws
VOICE_PREFIXES = 4  # voices whose prompt keys/values are kept: 74 MB each at real size


class CondEnc(nn.Module):
    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.spkr_enc = nn.Linear(SPEAKER_EMBED, hidden)


@dataclass
class TurboRow:
    """One request's T3 decode state between draws (`T3Turbo.draws`)."""

    caches: list[KVCache] = field(default_factory=list)  # per layer, (1, heads, L, D)
    hidden: torch.Tensor | None = None  # (1, 1, H): the last fed position's ln_f output
    position: int = 0  # the next position to feed
    pending: torch.Tensor | None = None  # (1, 1): the drawn token not yet fed


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
        # voice content -> per-layer (k, v) of its prompt positions (voice_prefix)
        self._prefixes: OrderedDict[tuple[bytes, bytes, str], list] = OrderedDict()

    def voice_embeds(self, speaker_emb: torch.Tensor, prompt_tokens: torch.Tensor) -> torch.Tensor:
        """The voice's part of the prompt, [spk | speech_emb(prompt)]: (1, 1+P, H)."""
        spk = self.cond_enc.spkr_enc(speaker_emb.view(-1, SPEAKER_EMBED))[:, None]  # (1, 1, H)
        return torch.cat([spk, self.speech_emb(prompt_tokens)], dim=1)

    def text_embeds(self, text_ids: torch.Tensor) -> torch.Tensor:
        """The request's part, [text_emb(text) | speech_emb(start)]: (1, L+1, H)."""
        start = torch.full_like(text_ids[:, :1], START_SPEECH)
        return torch.cat([self.text_emb(text_ids), self.speech_emb(start)], dim=1)

    def prefill(
        self,
        speaker_emb: torch.Tensor,
        prompt_tokens: torch.Tensor,
        text_ids: torch.Tensor,
        steps: int,
    ) -> tuple[list[KVCache], torch.Tensor, int]:
        """Caches of prompt + `steps` positions holding the prompt's keys and values, the last
        hidden state (1, 1, H) and the next position: the voice's positions from `voice_prefix`
        (once per voice), then the text and start (causal: one whole pass's keys and values)."""
        prefix = self.voice_prefix(speaker_emb, prompt_tokens)  # per layer (1, heads, 1+P, D)
        embeds = self.text_embeds(text_ids)
        voice_len = prefix[0][0].shape[2]
        length = voice_len + embeds.shape[1]
        caches = self.tfmr.new_caches(1, length + steps, embeds.dtype, embeds.device)
        for cache, (k, v) in zip(caches, prefix, strict=True):
            cache.write(0, k, v)
        hidden = self.tfmr(embeds, caches, voice_len)[:, -1:]  # (1, 1, H)
        return caches, hidden, length

    @torch.inference_mode()
    def voice_prefix(
        self, speaker_emb: torch.Tensor, prompt_tokens: torch.Tensor
    ) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Each layer's keys and values (1, heads, 1+P, D) of the voice's positions, kept for
        the last VOICE_PREFIXES voices (by content: the same embedding and tokens hit)."""
        weights = self.speech_head.weight  # where and in what the prefix was computed
        key = (
            speaker_emb.detach().float().cpu().numpy().tobytes(),
            prompt_tokens.detach().cpu().numpy().astype("int64").tobytes(),
            f"{weights.dtype} {weights.device}",
        )
        found = self._prefixes.pop(key, None)
        if found is None:
            embeds = self.voice_embeds(speaker_emb, prompt_tokens)
            caches = self.tfmr.new_caches(1, embeds.shape[1], embeds.dtype, embeds.device)
            self.tfmr(embeds, caches, 0)
            found = [(cache.k, cache.v) for cache in caches]
        self._prefixes[key] = found  # the most recent last
        while len(self._prefixes) > VOICE_PREFIXES:
            self._prefixes.popitem(last=False)
        return found

    def forget_prefixes(self) -> None:
        """Drop the kept voice prefixes (the weights changed: quant.quantize_t3)."""
        self._prefixes.clear()

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
        """inference_turbo: one step per drawn token until STOP (dropped from `tokens`) or
        max_new_tokens + 1 draws. `forced` (N,): those tokens fed instead (logit parity)."""
        logits_seen: list[torch.Tensor] = []
        voice = (speaker_emb, prompt_tokens, text_ids)
        drawn = list(self.draws(*voice, sampling, generator, max_new_tokens, forced, logits_seen))
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
        row: TurboRow | None = None,
    ) -> Iterator[torch.Tensor]:
        """Each drawn token (1, 1) as soon as it is drawn (STOP included): `generate`'s loop,
        read token by token by a stream. `row`: where the decode state lives (a caller's lets
        `feed` step it with other rows between draws; a token not yet fed is fed at the next)."""
        steps = max_new_tokens + 1 if forced is None else len(forced)
        row = TurboRow() if row is None else row
        row.caches, row.hidden, row.position = self.prefill(
            speaker_emb, prompt_tokens, text_ids, steps
        )
        device = row.hidden.device
        history = torch.full((1, 1), START_SPEECH, dtype=torch.long, device=device)
        drawn: list[torch.Tensor] = []
        for step in range(steps):
            if row.pending is not None:
                self.feed([row])
            logits = self.speech_head(row.hidden)[:, -1, :]  # (1, V)
            if logits_seen is not None and forced is not None:  # parity checks only
                logits_seen.append(logits)  # (1001 x 6563 floats at most)
            processed = sampling.process(history, logits)
            if step > 0 and torch.all(processed == -torch.inf):
                return
            if forced is None:
                token = draw(processed, generator)  # (1, 1)
            else:
                token = forced[step].view(1, 1).to(device)
            drawn.append(token)
            # The official checks STOP inside its step loop only: a STOP from the prefill's
            # draw is fed back like any token.
            last = (step > 0 and int(token) == STOP_SPEECH) or step == steps - 1
            row.pending = None if last else token
            yield token
            if last:
                return
            # The penalty sees the drawn tokens only from the second draw on (no start id).
            history = torch.cat(drawn, dim=1)

    @torch.inference_mode()
    def feed(self, rows: list[TurboRow]) -> None:
        """One GPT-2 step of each row's pending token in one call (own caches and positions);
        several rows only where every projection is row-invariant (int8: runner.py)."""
        if len(rows) == 1:
            embeds = self.speech_emb(rows[0].pending)  # (1, 1, H)
            hidden = self.tfmr(embeds, rows[0].caches, rows[0].position)  # (1, 1, H)
        else:
            embeds = self.speech_emb(torch.cat([row.pending for row in rows]))  # (B, 1, H)
            caches = [list(layer) for layer in zip(*(row.caches for row in rows), strict=True)]
            hidden = self.tfmr(embeds, caches, [row.position for row in rows])  # (B, 1, H)
        for index, row in enumerate(rows):
            row.hidden = hidden if len(rows) == 1 else hidden[index : index + 1].clone()
            row.position, row.pending = row.position + 1, None
