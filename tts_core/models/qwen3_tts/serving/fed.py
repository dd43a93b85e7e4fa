"""Qwen3-TTS rows whose text arrives in pieces (issue #27): "speak it as it comes".

In the streaming-text prompt the talker takes one trailing target-text vector per frame after
the prefill, then tts_eos, then tts_pad. A `FedSequence` holds only the trailing vectors of the
text committed so far (`TextFeed`: stable ids, equal to the whole text's ids); a row whose next
vector is not there yet does not step (`input_ready` False: the engine leaves it out of the
decode step, its KV span, sampler and decoder state kept), so every frame it makes sees exactly
the inputs the whole text would have given. `done` appends tts_eos and applies the length cap
of the whole text's token count; the KV span is reserved for `max_new_tokens` frames, since
the text's length is not known at admission.

`FedRequest` (over the model's served EngineLoop) is the consumer's handle: `feed(piece)`,
`done()`, `stream`. The feeder's calls never wait; the consumer does every wait (awaited on the
event loop under run_awaiting, engine/awaiting.py). The row is queued once the prefill's text is
committed (`model.fed_prefill_tokens`); a text done before that is submitted whole, exactly as a
one-shot request.
"""

from __future__ import annotations

import queue
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import torch

from ....audio.cadence import Cadence
from ....engine.awaiting import Condition
from ..decode_settings import length_cap_frames
from ..text_feed import TextFeed
from .sequence import Qwen3Sequence

if TYPE_CHECKING:
    from ..voice import Voice

_DONE = None  # in a FedSequence's arrivals: the text is complete


class FedSequence(Qwen3Sequence):
    """A Qwen3Sequence whose trailing text vectors arrive while it runs."""

    def __init__(self, *args: Any, text_tokens: int, length_cap: bool, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # committed ids not yet embedded, then _DONE: any thread puts, the loop thread takes
        # (a SimpleQueue: the loop thread never waits for a feeder's lock)
        self._arrivals: queue.SimpleQueue[list[int] | None] = queue.SimpleQueue()
        self._eos_added = False  # loop thread only
        self.text_tokens = text_tokens
        self._length_cap = length_cap

    def push(self, ids: list[int], done: bool = False) -> None:
        """Committed target ids (any thread); done: nothing more comes."""
        if ids:
            self._arrivals.put(ids)
        if done:
            self._arrivals.put(_DONE)

    @property
    def input_ready(self) -> bool:
        if self._eos_added or self.frames - 1 < self.prompt.trailing.shape[0]:
            return True
        return not self._arrivals.empty()

    @torch.inference_mode()
    def sync(self, talker: Any, eos: torch.Tensor) -> None:
        """Embed the ids pushed since the last step (loop thread); after done, tts_eos and the
        whole text's length cap."""
        ids, done = self._arrived()
        parts = [self.prompt.trailing]
        if ids:
            ids_t = torch.tensor([ids], dtype=torch.long, device=self.prompt.trailing.device)
            parts.append(talker.text_embed(ids_t)[0])
            self.text_tokens += len(ids)
        if done and not self._eos_added:
            parts.append(eos[None])
            self._eos_added = True
            if self._length_cap:
                cap = max(length_cap_frames(self.text_tokens), self.frames)
                if cap < self.limit:
                    self.limit, self.limit_reason = cap, "length_cap"
        if len(parts) > 1:
            self.prompt.trailing = torch.cat(parts, 0)

    def _arrived(self) -> tuple[list[int], bool]:
        """(the ids pushed since the last call, whether done came); the one taker."""
        items = []
        while not self._arrivals.empty():
            items.append(self._arrivals.get_nowait())
        return [i for item in items if item is not _DONE for i in item], _DONE in items


class FedRequest:
    """Text in pieces -> one request's audio chunks (`stream`), as if the text came at once."""

    def __init__(
        self,
        loop: Any,
        voice: Voice,
        language: str | None = "auto",
        *,
        first_chunk_frames: int = 2,
        chunk_frames: int = 6,
        should_stop: Callable[[], bool] | None = None,
        **kwargs: Any,
    ) -> None:
        """loop: the EngineLoop (tts_core/serving/loop.py) serving the model with its runner
        (`model.runner`, runner.py); `kwargs`: those of `model.stream`. The chunks equal those
        of `loop.submit(whole text, voice, language, ...)` with the same arguments."""
        Cadence(first_chunk_frames, chunk_frames)  # ValueError now
        # text that arrives after the first frame has the streaming-text layout only (also
        # for the whole-text fallback, whatever the checkpoint type's default)
        if kwargs.get("non_streaming_mode"):
            raise ValueError("text fed in pieces needs non_streaming_mode=False")
        self._loop, self._model = loop, loop.runner.model
        self._voice, self._language = voice, language
        cadence = {"first_chunk_frames": first_chunk_frames, "chunk_frames": chunk_frames}
        layout = {"should_stop": should_stop, "non_streaming_mode": False}
        self._kwargs = {**kwargs, **cadence, **layout}
        self._feed = TextFeed(self._model.text_tokenizer)
        self._need = loop.call(self._model.fed_prefill_tokens, voice)
        self._text_in = Condition()  # guards the feed, _seq and _stream; no wait holds it
        self._seq: FedSequence | None = None  # the row, once queued with the prompt's text
        self._stream: Any = None  # the loop's RequestStream, once queued

    @property
    def settled(self) -> bool:
        """No text so far is on its way to the model: the request is queued with all of it,
        or the prompt's text has not come yet (nothing to queue)."""
        with self._text_in:
            return self._stream is not None or not self._can_queue()

    def feed(self, piece: str) -> None:
        """More text (any piece: a word, a character, half a word)."""
        self._commit(lambda: self._feed.feed(piece), done=False)

    def done(self) -> None:
        """No more text: the rest is committed, then tts_eos."""
        self._commit(self._feed.finish, done=True)

    def _commit(self, take: Callable[[], list[int]], done: bool) -> None:
        """`take()`'s committed ids to the row (the consumer woken while none is queued)."""
        with self._text_in:
            ids = take()
            if self._seq is None:
                self._text_in.notify_all()
                return
            self._seq.push(ids, done=done)
        self._loop.wake()

    @property
    def stream(self) -> Any:
        """The chunks (waits until the request can be queued: enough text, or done)."""
        return self._queued(None)

    def chunks(self, stop: Callable[[], bool], poll_s: float) -> Iterator[Any]:
        """`stream`'s chunks, asking `stop` every `poll_s` while none comes: a row waiting for
        text takes no step, so the loop never asks its should_stop (nor wakes to); once `stop`
        answers True the request is closed (its row freed at the loop's next step) and the
        iteration ends."""
        try:
            while (stream := self._queued(poll_s)) is None:
                if stop():
                    return
            while True:
                try:
                    # a fed row's outbox directly (with a timeout); a whole-text request
                    # (done before the row was queued) steps anyway: its stream
                    chunk = next(stream) if self._seq is None else self._seq.outbox.get(poll_s)
                except queue.Empty:
                    if stop():
                        return
                    continue
                except StopIteration:
                    return
                yield chunk
        finally:
            self.close()

    def close(self) -> None:
        if self._stream is not None:
            self._stream.close()

    def _can_queue(self) -> bool:
        return self._feed.finished or len(self._feed.committed) >= max(self._need, 1)

    def _queued(self, timeout: float | None) -> Any:
        """The loop's stream, the request queued now if its text allows; None when `timeout`
        passed with too little text (consumer side: waits)."""
        with self._text_in:
            if self._stream is not None:
                return self._stream
            if not self._text_in.wait_for(self._can_queue, timeout):
                return None
            whole = self._feed.text if self._feed.finished else None
            role, committed = self._feed.role, list(self._feed.committed)
        if whole is not None:
            self._stream = self._loop.submit(whole, self._voice, self._language, **self._kwargs)
            return self._stream
        used = max(self._need, 1 if self._voice.ref_codes is None else 0)
        seq = self._loop.call(
            self._model.fed_request,
            role,
            committed[:used],
            self._voice,
            self._language,
            cache_positions=self._loop.runner.capacity,
            **self._kwargs,
        )
        with self._text_in:  # what came while the row was built goes with it
            seq.push(self._feed.committed[used:], done=self._feed.finished)
            self._stream = self._loop.enqueue(seq)
            self._seq = seq
        return self._stream
