"""Continuous batching, served: one thread steps every active Qwen3-TTS stream together.

scheduler = Scheduler(model, max_batch=8)
for chunk in scheduler.submit("Hello", voice, seed=1):   # same chunks as model.stream
    play(chunk.audio)

The Scheduler is the served driver of the one engine: tts_core/serving's EngineLoop (its loop
thread steps the BatchEngine while there is work; `call` runs the model's other work there)
with Qwen3's runner (engine.py) over the shared KV arena. `submit` checks a request and queues
it; each request's chunks reach its consumer through its stream. A joining request delays the
running ones by one prefill chunk per step and a few steps of its own, never by its whole
prompt. Every model computation of the served model runs on the loop thread (see
tts_core/serving/loop.py for why): the steps, and, through `call`, each prompt and each voice.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ....audio.cadence import Cadence
from ....engine.model_thread import run_on_passing_thread
from ....serving.engine import DEFAULT_PREFILL_CHUNK, FIRST_CHUNK_PRIORITY_FRAMES
from ....serving.loop import EngineLoop, RequestStream
from ..model import Qwen3TTSModel, Voice
from .engine import Qwen3Runner
from .fed import FedRequest
from .sequence import Sequence

__all__ = ["FIRST_CHUNK_PRIORITY_FRAMES", "Scheduler", "SequenceStream"]

DEFAULT_POSITIONS_PER_ROW = 1024  # arena size per row of --max-batch: ~80 s of audio per row
SequenceStream = RequestStream  # the chunks of one submitted request (tts_core/serving/loop.py)


class Scheduler(EngineLoop):
    def __init__(
        self,
        model: Qwen3TTSModel,
        max_batch: int = 8,
        cache_positions: int | None = None,
        prefill_chunk: int = DEFAULT_PREFILL_CHUNK,
    ) -> None:
        """cache_positions: the talker KV arena shared by all rows (default
        max_batch * 1024); a request reserves its prompt + frame limit there when admitted."""
        if prefill_chunk < 1:
            raise ValueError("prefill_chunk must be >= 1")
        capacity = cache_positions or max_batch * DEFAULT_POSITIONS_PER_ROW
        # built on a thread that ends (its RoPE table is a parallel op: see the loop's module
        # doc); the loop thread starts on first use, so a scheduler never used holds no thread
        runner = run_on_passing_thread(lambda: Qwen3Runner(model, max_batch, capacity))
        super().__init__(runner, prefill_chunk, thread_name="tts-scheduler")
        self.model = model

    def submit(
        self,
        text: str,
        voice: Voice,
        language: str | None = "auto",
        *,
        first_chunk_frames: int = 2,
        chunk_frames: int = 6,
        should_stop: Callable[[], bool] | None = None,
        **kwargs: Any,
    ) -> RequestStream:
        """Validate now (ValueError / TypeError, as `model.stream`) and queue the request; the
        returned stream yields its AudioChunks. `kwargs`: those of `model.stream`."""
        cadence = Cadence(first_chunk_frames, chunk_frames)  # ValueError below 1
        prompt, settings = self.call(self.model.plan, text, voice, language, **kwargs)
        self.model._codec()  # no codec: fail now
        seq = Sequence(self.model.talker, prompt, settings, voice,
                       cadence, should_stop or _never)  # fmt: skip
        if seq.prompt_len + 1 > self.runner.capacity:
            raise ValueError(
                f"the prompt takes {seq.prompt_len} positions; the cache holds "
                f"{self.runner.capacity}: use a shorter reference clip or text"
            )
        seq.cap_to(self.runner.capacity)
        return self.enqueue(seq)

    def open_fed(
        self,
        voice: Voice,
        language: str | None = "auto",
        *,
        first_chunk_frames: int = 2,
        chunk_frames: int = 6,
        should_stop: Callable[[], bool] | None = None,
        **kwargs: Any,
    ) -> FedRequest:
        """A request whose text arrives in pieces (fed.py): `feed(piece)`, `done()`, and its
        `stream`, whose chunks equal those of `submit(whole text, ...)` with the same kwargs."""
        return FedRequest(self, voice, language, first_chunk_frames, chunk_frames, should_stop,
                          kwargs)  # fmt: skip


def _never() -> bool:
    return False
