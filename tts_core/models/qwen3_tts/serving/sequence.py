"""One request inside the engine: everything that differs from row to row.

Its own prompt and position, sampling parameters, random generator, c0 history (repetition
penalty), stop ids, frame limit, chunk cadence, span of the KV cache and codec-decoder state.
The stepping thread (the scheduler's, or the caller's for `model.stream`) owns every field
except `cancelled` and the outbox, which the consumer uses to stop it and to read its chunks.
A request made with `audio=False` (`model.frames`) has no decoder state: its outbox receives
lists of code frames instead of AudioChunks, and no codec is needed.
"""

from __future__ import annotations

import enum
import threading
import time
from collections.abc import Callable

import torch

from ....audio.cadence import Cadence
from ....engine.handoff import Handoff
from ..decode_settings import DecodeSettings, stop_id_tensor, talker_sampler
from ..prompt import Prompt
from ..sampling import make_generator
from ..talker import Talker
from .kv_arena import Span


class Status(enum.Enum):
    WAITING = "waiting"  # in line for a row and a span of the arena
    PREFILL = "prefill"  # its prompt goes through the talker, a chunk at a time
    DECODING = "decoding"  # one frame per scheduler step
    DONE = "done"


class Sequence:
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
        self.prompt = prompt
        self.settings = settings
        self.voice = voice
        self.cadence = cadence
        self.should_stop = should_stop
        self.audio = audio  # False: code frames only, no codec-decoder state (model.frames)
        self.limit, self.limit_reason = settings.frame_limit()
        self.prompt_len = prompt.prefill.shape[1]
        device = talker.device
        self.generator = make_generator(settings.seed, device)
        self.sampler = talker_sampler(talker, settings, self.generator)
        self.stop_ids = stop_id_tensor(talker, settings)
        self.status = Status.WAITING
        self.cancelled = threading.Event()
        self.outbox = Handoff() if outbox is None else outbox  # chunks, then end or error
        self.submitted = time.perf_counter()
        # set at admission / while running
        self.span: Span | None = None
        self.caches: list = []
        self.decoder_state = None
        self.history: torch.Tensor | None = None  # (1, limit) c0 ids drawn so far
        self.prefilled = 0  # prompt positions already in the cache
        self.frames = 0  # frames emitted
        self.logits: torch.Tensor | None = None  # (1, V) float32: the next c0's logits
        self.hidden: torch.Tensor | None = None  # (1, H): the talker's last final-norm hidden
        # the last frame while the talker has not consumed it yet: its talker step runs at the
        # start of the row's next decode step (BatchEngine._decode_step)
        self.awaiting_step: torch.Tensor | None = None
        self.pending: list[torch.Tensor] = []  # frames of the chunk being gathered
        self.chunk_batch = 0  # most rows stepped together for the pending frames
        self.chunk_started = self.submitted

    # ------------------------------------------------------------------ lifecycle
    def positions_needed(self) -> int:
        return self.prompt_len + max(self.limit, 1)

    def cap_to(self, capacity: int) -> None:
        """Shorten the frame limit so prompt + frames fit `capacity` positions."""
        if self.positions_needed() > capacity:
            self.limit, self.limit_reason = capacity - self.prompt_len, "length_cap"

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

    @property
    def stopped(self) -> bool:
        return self.cancelled.is_set() or self.should_stop()

    # ------------------------------------------------------------------ decoding
    def choose_c0(self) -> torch.Tensor:
        """(1,) c0 of the next frame from the pending logits."""
        return self.sampler(self.logits, self.history[:, : self.frames])

    def is_stop(self, c0: torch.Tensor) -> bool:
        return bool(torch.isin(c0, self.stop_ids).any())

    def add_frame(self, frame: torch.Tensor, batch: int) -> None:
        self.history[0, self.frames] = frame[0]
        self.frames += 1
        self.pending.append(frame)
        self.chunk_batch = max(self.chunk_batch, batch)

    @property
    def at_limit(self) -> bool:
        return self.frames == self.limit

    @property
    def before_first_chunk(self) -> bool:
        """No chunk delivered yet: every frame made so far is still pending."""
        return self.frames == len(self.pending)

    @property
    def chunk_due(self) -> bool:
        chunks_out = 0 if self.before_first_chunk else 1  # (any later one alike)
        return self.cadence.due(len(self.pending), chunks_out) or self.at_limit

    @property
    def next_position(self) -> int:
        """Where the talker step after the last emitted frame writes."""
        return self.prompt_len + self.frames - 1

    def take_chunk(self) -> tuple[list[torch.Tensor], float, int]:
        """(frames, seconds since the previous chunk, batch size) and start the next chunk."""
        now = time.perf_counter()
        taken = (self.pending, now - self.chunk_started, max(self.chunk_batch, 1))
        self.pending, self.chunk_batch, self.chunk_started = [], 0, now
        return taken

    def restart_clock(self) -> None:
        """The next chunk's time counts from now (the consumer stepping this request inline
        took its chunk and has handed control back: its own time is not compute)."""
        if not self.pending:
            self.chunk_started = time.perf_counter()
