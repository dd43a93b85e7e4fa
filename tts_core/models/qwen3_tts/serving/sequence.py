"""One Qwen3-TTS request inside the engine: everything that differs from row to row, on top of
the engine's books (tts_core/serving/sequence.py). A request made with `audio=False`
(`model.frames`) has no decoder state: its outbox receives lists of code frames instead of
AudioChunks, and no codec is needed.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ....audio.cadence import Cadence
from ....engine.handoff import Handoff
from ....serving.sequence import Sequence, Status
from ..decode_settings import DecodeSettings, stop_id_tensor, talker_sampler
from ..prompt import Prompt
from ..sampling import make_generator
from ..talker import Talker
from .kv_arena import Span

__all__ = ["Qwen3Sequence", "Status"]


class Qwen3Sequence(Sequence):
    def __init__(
        self,
        talker: Talker,
        prompt: Prompt,
        settings: DecodeSettings,
        voice: object,
        cadence: Cadence,
        should_stop: Callable[[], bool],
        audio: bool = True,
        outbox: Handoff | None = None,
    ) -> None:
        """outbox: where its chunks go (None: a Handoff to a consumer on another thread)."""
        limit, limit_reason = settings.frame_limit()
        super().__init__(cadence, should_stop, limit, limit_reason, audio=audio, outbox=outbox)
        self.prompt = prompt
        self.settings = settings
        self.voice = voice
        self.prompt_len = prompt.prefill.shape[1]
        device = talker.device
        self.generator = make_generator(settings.seed, device)
        self.sampler = talker_sampler(talker, settings, self.generator)
        self.stop_ids = stop_id_tensor(talker, settings)
        # set at admission / while running
        self.span: Span | None = None
        self.caches: list = []
        self.decoder_state = None
        self.history: torch.Tensor | None = None  # (1, limit) c0 ids drawn so far
        self.prefilled = 0  # prompt positions already in the cache
        self.logits: torch.Tensor | None = None  # (1, V) float32: the next c0's logits
        self.hidden: torch.Tensor | None = None  # (1, H): the talker's last final-norm hidden
        # the last frame while the talker has not consumed it yet: its talker step runs at the
        # start of the row's next decode step (Qwen3Runner.decode)
        self.awaiting_step: torch.Tensor | None = None

    def positions_needed(self) -> int:
        return self.prompt_len + max(self.limit, 1)

    def fit(self, capacity: int | None) -> Qwen3Sequence:
        """This request held to a cache of `capacity` positions (None: one made for it): its
        frame limit shortened so prompt + frames fit; ValueError when not even one frame does."""
        if capacity is None:
            return self
        if self.prompt_len + 1 > capacity:
            raise ValueError(
                f"the prompt takes {self.prompt_len} positions; the cache holds {capacity}: "
                "use a shorter reference clip or text"
            )
        if self.positions_needed() > capacity:
            self.limit, self.limit_reason = capacity - self.prompt_len, "length_cap"
        return self

    def admit(self, span: Span, caches: list, decoder_state: object) -> None:
        device = self.stop_ids.device
        self.span, self.caches, self.decoder_state = span, caches, decoder_state
        self.history = torch.zeros(1, max(self.limit, 1), dtype=torch.long, device=device)
        self.status = Status.PREFILL

    def release(self) -> Span | None:
        """Drop the per-request state; returns the span to give back to the arena."""
        span, self.span = self.span, None
        self.caches, self.decoder_state, self.history = [], None, None
        self.logits = self.hidden = self.awaiting_step = None
        self.status = Status.DONE
        return span

    def choose_c0(self) -> torch.Tensor:
        """(1,) c0 of the next frame from the pending logits."""
        return self.sampler(self.logits, self.history[:, : self.frames])

    def is_stop(self, c0: torch.Tensor) -> bool:
        return bool(torch.isin(c0, self.stop_ids).any())

    def add_frame(self, frame: torch.Tensor, batch: int) -> None:
        self.history[0, self.frames] = frame[0]
        super().add_frame(frame, batch)

    @property
    def next_position(self) -> int:
        """Where the talker step after the last emitted frame writes."""
        return self.prompt_len + self.frames - 1
