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
`done()`, `stream`. It queues the row once the prefill's text is committed: x-vector mode one
target token, ICL mode T2 - len(ref_text) tokens (T2 = reference frames + 1); a text done
before that is submitted whole, exactly as a one-shot request.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import torch

from ....audio.cadence import Cadence
from ..decode_settings import length_cap_frames
from ..text_feed import TextFeed
from .sequence import Sequence

if TYPE_CHECKING:
    from ..voice import Voice


class FedSequence(Sequence):
    """A Sequence whose trailing text vectors arrive while it runs."""

    def __init__(self, *args: Any, text_tokens: int, length_cap: bool, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._lock = threading.Lock()
        self._new_ids: list[int] = []  # committed, not yet embedded (any thread appends)
        self._done = False  # the feeder said done (under _lock)
        self._eos_added = False  # loop thread only
        self.text_tokens = text_tokens
        self._length_cap = length_cap

    def push(self, ids: list[int], done: bool = False) -> None:
        """Committed target ids (any thread); done: nothing more comes."""
        with self._lock:
            self._new_ids.extend(ids)
            self._done = self._done or done

    @property
    def input_ready(self) -> bool:
        if self._eos_added or self.frames - 1 < self.prompt.trailing.shape[0]:
            return True
        with self._lock:
            return bool(self._new_ids) or self._done

    @torch.inference_mode()
    def sync(self, talker: Any, eos: torch.Tensor) -> None:
        """Embed the ids pushed since the last step (loop thread); after done, tts_eos and the
        whole text's length cap."""
        with self._lock:
            ids, self._new_ids = self._new_ids, []
            done = self._done
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
        # for the whole-text fallback in `done`, whatever the checkpoint type's default)
        if kwargs.get("non_streaming_mode"):
            raise ValueError("text fed in pieces needs non_streaming_mode=False")
        self._loop, self._model = loop, loop.runner.model
        self._voice, self._language = voice, language
        cadence = {"first_chunk_frames": first_chunk_frames, "chunk_frames": chunk_frames}
        layout = {"should_stop": should_stop, "non_streaming_mode": False}
        self._kwargs = {**kwargs, **cadence, **layout}
        self._feed = TextFeed(self._model.text_tokenizer)
        self._need = loop.call(self._model.fed_prefill_tokens, voice)
        self._seq: FedSequence | None = None
        self._stream: Any = None  # the loop's RequestStream
        self._ready = threading.Event()  # the stream exists
        self._lock = threading.Lock()

    @property
    def text(self) -> str:
        return self._feed.text

    def feed(self, piece: str) -> None:
        """More text (any piece: a word, a character, half a word)."""
        with self._lock:
            ids = self._feed.feed(piece)
            if self._seq is not None:
                self._seq.push(ids)
                self._loop.wake()
            elif len(self._feed.committed) >= max(self._need, 1):
                self._open()

    def done(self) -> None:
        """No more text: the rest is committed, then tts_eos."""
        with self._lock:
            rest = self._feed.finish()
            if self._seq is not None:
                self._seq.push(rest, done=True)
                self._loop.wake()
                return
            self._stream = self._loop.submit(
                self._feed.text, self._voice, self._language, **self._kwargs
            )
            self._ready.set()

    @property
    def stream(self) -> Any:
        """The chunks (blocks until the request is queued: enough text, or done)."""
        self._ready.wait()
        assert self._stream is not None
        return self._stream

    def wait_stream(self, timeout: float | None) -> Any:
        return self._stream if self._ready.wait(timeout) else None

    def chunks(self, stop: Callable[[], bool], poll_s: float) -> Iterator[Any]:
        """`stream`'s chunks, asking `stop` every `poll_s` while none comes: a row waiting for
        text takes no step, so the loop never asks its should_stop (nor wakes to); once `stop`
        answers True the request is closed (its row freed at the loop's next step) and the
        iteration ends."""
        try:
            while (stream := self.wait_stream(poll_s)) is None:
                if stop():
                    return
            while True:
                try:
                    # a fed row's outbox directly (with a timeout); a whole-text request
                    # (done before the prompt's text was in) steps anyway: its stream
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

    def _open(self) -> None:
        loop, committed = self._loop, self._feed.committed
        used = max(self._need, 1 if self._voice.ref_codes is None else 0)
        arena = loop.runner.capacity
        seq = loop.call(
            self._model.fed_request,
            self._feed.role,
            committed[:used],
            self._voice,
            self._language,
            cache_positions=arena,
            **self._kwargs,
        )
        seq.push(committed[used:])
        self._seq = seq
        self._stream = loop.enqueue(seq)
        self._ready.set()
