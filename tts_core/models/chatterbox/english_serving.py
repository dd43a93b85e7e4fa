"""The original English model on the one decode engine (serving.py's ChatterboxRunner and
ChatterboxScheduler): its request, `EnglishSequence`, and its served scheduler.

scheduler = EnglishScheduler(model, max_batch=8)
for chunk in scheduler.submit("Hello", voice, seed=1, exaggeration=0.5):  # model.stream's
    play(chunk.audio)

What differs from Turbo is the request's: T3 is the Llama with classifier-free guidance, whose
cond and uncond rows (2 rows a request; 1 with cfg_weight 0) take one `T3English.draws` call per
step, the request's own, with its own generator drawing in the official order (one multinomial a
token); at most max_new_tokens draws, STOP ends it at any draw; drop_invalid_tokens' rule (S3Gen
starts over after the first start id); no silence appended for the final pass, and none at all
when no speech token was drawn. S3Gen is the 10-step CFM with CFG (`meanflow=False`), per row
(padded_s3gen.py solves the meanflow CFM only). So a request's chunks are `model.stream`'s bit
for bit alone and in any batch (tests/chatterbox/test_english_batching.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import torch

from .chunking import StreamChunking
from .config import START_SPEECH
from .english_t3 import COND_POSITIONS, MAX_NEW_TOKENS, EnglishSampling
from .serving import DEFAULT_MAX_BATCH, ChatterboxScheduler, ChatterboxSequence

if TYPE_CHECKING:
    from .english import ChatterboxEnglishModel
    from .voice import ChatterboxVoice


class EnglishSequence(ChatterboxSequence):
    """One English request, checked (ValueError when it cannot run), from `model.stream`'s
    arguments: text ids, exaggeration and sampling (with cfg_weight) besides the shared state
    (serving.py)."""

    def __init__(
        self,
        model: ChatterboxEnglishModel,
        text: str,
        voice: ChatterboxVoice | None = None,
        seed: int = 0,
        exaggeration: float = 0.5,
        sampling: EnglishSampling | None = None,
        max_new_tokens: int = MAX_NEW_TOKENS,
        chunking: StreamChunking | None = None,
        should_stop: Callable[[], bool] | None = None,
        *,
        outbox: Any = None,
    ) -> None:
        super().__init__(model, voice, seed, chunking or StreamChunking(), max_new_tokens,
                         int(max_new_tokens), should_stop or (lambda: False), outbox)  # fmt: skip
        self.text_ids = model.text_ids(text)  # (1, Lt); ValueError past T3's text positions
        self.exaggeration, self.sampling = float(exaggeration), sampling or EnglishSampling()
        self.restarted = False  # a start id was drawn: S3Gen started over
        # T3's prompt: cond, text, start + bos (T3English.prompt), then one position a draw
        positions = COND_POSITIONS + self.text_ids.shape[1] + 2 + self.limit
        if positions > model.t3.rope.cos.shape[0]:
            raise ValueError(f"text too long: {positions} T3 positions > the model's "
                             f"{model.t3.rope.cos.shape[0]}")  # fmt: skip

    def open_draws(self, generator: torch.Generator) -> Iterator[torch.Tensor]:
        voice, t3 = self.voice, self.model.t3
        cond = t3.conditioning(voice.speaker_emb, voice.t3_prompt_tokens, self.exaggeration)
        return t3.draws(cond, self.text_ids, self.sampling, generator, self.max_new_tokens)

    def take(self, token: int) -> None:
        if token == START_SPEECH and not self.restarted:
            # drop_invalid_tokens keeps what follows the first start id: S3Gen starts over
            # (audio already handed out stays: a random-weights edge case)
            self.speech, self.restarted, self.due = [], True, self.chunking.first_tokens
            self.start_s3gen()
        else:
            super().take(token)

    def final_tokens(self) -> torch.Tensor | None:
        return self.speech_tokens() if self.speech else None


class EnglishScheduler(ChatterboxScheduler):
    """Every English stream of the app (EnglishSequence requests), S3Gen per row."""

    def __init__(self, model: ChatterboxEnglishModel, max_batch: int = DEFAULT_MAX_BATCH) -> None:
        super().__init__(model, EnglishSequence, max_batch, "auto",
                         "tts-chatterbox-english")  # fmt: skip
