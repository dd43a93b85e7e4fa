"""The engine: admit -> validate -> (cached) voice -> backend stream -> chunks + live stats.

One per process and model (app.py builds it); the page, gradio_client and the HTTP routes share
its admission, so a request beyond its bound is refused (`EngineBusy`) wherever it comes from.
A request's types are in requests.py, its events and streams in streams.py.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from ..audio import Cadence, ChunkJoiner, ms_to_samples
from .admission import Admission, Ticket
from .backend import Backend, BackendChunk, Notice, TextInlet, Voice, reads_transcript
from .errors import BackendError, EngineBusy, InputError
from .handoff import off_the_loop
from .knobs import backend_knobs, refuse_unread_shared
from .requests import EngineConfig, ModelVoice, Prepared, SynthesisRequest, seeded
from .stats import RequestStats
from .streams import EngineStream, FedStream, StreamEvent
from .validation import check_params, clean_reference_text, clean_text, prepare_reference
from .voice_cache import VoiceCache

log = logging.getLogger(__name__)


class Engine:
    def __init__(
        self, backend: Backend, config: EngineConfig | None = None, notice: Notice | None = None
    ) -> None:
        self.backend = backend
        self.config = config or EngineConfig()
        # e.g. "fell back to eSpeak because ...": summary shown in the page and in every
        # request's stats, details folded away
        self.notice = notice.summary if notice else None
        self.notice_details = notice.details if notice else None
        self.sample_rate = int(backend.sample_rate)  # of every event
        self.capabilities = backend.capabilities  # declared on its class (capabilities.py)
        limit = self.config.max_concurrent or backend.default_concurrency
        self.max_concurrent = max(1, int(limit))
        self.admission = Admission(self.max_concurrent, self.config.max_queue)
        self._voices = VoiceCache(self.config.voice_cache_size)

    @property
    def active_requests(self) -> int:
        """Requests running on the backend now."""
        return self.admission.running

    @property
    def waiting_requests(self) -> int:
        return self.admission.waiting

    def info(self) -> dict[str, Any]:
        b = self.backend
        return {
            "backend": b.name,
            "model": b.model_name,
            "device": b.device,
            "sample_rate": self.sample_rate,
            "frame_ms": round(1000 * b.frame_samples / self.sample_rate, 3),  # chunk-size unit
            "weight_format": b.weight_format,
            "weight_format_reason": b.weight_format_reason,
            "decode_step": b.decode_step,  # Qwen3: "CUDA graphs" / "eager"
            "can_clone": b.can_clone,
            "reads_language": self.capabilities.reads_language,  # VoxCPM2: from the text
            "reads_transcript": reads_transcript(b),  # Chatterbox: clones from the clip alone
            "needs_reference": b.needs_reference,
            # what the checkpoint does (vLLM-Omni's task_type: Qwen3-TTS Base / CustomVoice /
            # VoiceDesign; every other backend clones: Base) and its preset voices (#41)
            "task_type": self.capabilities.task_type,
            "speakers": list(self.capabilities.speakers),
            "instruct_supported": bool(getattr(b, "instruct_supported", False)),  # its instructions
            # text sent in pieces (open_fed): spoken as it arrives, or held until it is complete
            "text_in": "streamed" if self.capabilities.takes_text_pieces else "buffered",
            "description": b.description,
            "max_concurrent": self.max_concurrent,
            "max_queue": self.admission.queue_size,
            "max_chars": self.config.limits.max_chars,
            "notice": self.notice,
            "notice_details": self.notice_details,
            "sampling_defaults": b.sampling_defaults(),  # the knobs this backend reads
        }

    def prepare(self, request: SynthesisRequest) -> Prepared:
        """Validate everything that can be checked before any synthesis (InputError); `stream`
        runs it before it returns, so a route can still say 400. A voice without a clip costs
        nothing to build, so the backend's rules on it (VoxCPM2: no transcript without its
        clip) are checked by building (and caching) it here."""
        return self._prepare(clean_text(request.text, self.config.limits), request)

    def _prepare(self, text: str | TextInlet, request: SynthesisRequest) -> Prepared:
        limits = self.config.limits
        refuse_unread_shared(request.params.values, self.backend)  # InputError naming it
        params = seeded(check_params(request.params, limits, backend_knobs(self.backend)))
        reference, ref_text, notices = self._reference(request.reference, request.reference_text)
        if request.model_voice is not None:  # built now: a refusal is the request's 400
            if reference is not None:
                raise InputError("A preset or designed voice takes no reference clip.", "voice")
            self._model_voice(request.model_voice)
            return Prepared(text, params, None, None, notices, request.model_voice)
        if reference is None:
            if self.backend.needs_reference:
                raise InputError(
                    "This voice needs a reference clip: upload or record 3-10 s of clear speech.",
                    "reference",
                )
            self._voice(None, ref_text)
        return Prepared(text, params, reference, ref_text, notices)

    def stream(
        self, request: SynthesisRequest, cancel: threading.Event | None = None
    ) -> EngineStream:
        """Takes a place in line (EngineBusy when the line is full) and validates now
        (InputError); the returned iterator waits for a slot, then yields the chunks."""
        ticket = self.admission.reserve(cancel)
        try:
            prepared = self.prepare(request)
        except BaseException:
            ticket.release()
            raise
        return EngineStream(self._run(prepared, ticket.cancel, ticket), ticket)

    def open_fed(
        self, request: SynthesisRequest, cancel: threading.Event | None = None
    ) -> FedStream:
        """`stream` for text that arrives in pieces (`request.text` the first, may be empty):
        `feed(piece)`, `done()`; the events equal `stream`'s of the whole text. The text's limit
        is checked as it arrives; a backend that `takes_text_pieces` speaks meanwhile, any
        other gets the whole text at `done()`."""
        ticket = self.admission.reserve(cancel)
        try:
            inlet = TextInlet(self.config.limits.max_chars)
            inlet.push(request.text)
            prepared = self._prepare(inlet, request)
        except BaseException:
            ticket.release()
            raise
        return FedStream(self._run(prepared, ticket.cancel, ticket), ticket, inlet)

    def synthesize(
        self, request: SynthesisRequest, cancel: threading.Event | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """The whole clip at once: ((N,) float32, final stats)."""
        pieces, stats = [], {}
        for event in self.stream(request, cancel):
            pieces.append(event.audio)
            stats = event.stats
        return np.concatenate(pieces) if pieces else np.zeros(0, np.float32), stats

    def _run(self, job: Prepared, cancel: threading.Event, ticket: Ticket) -> Iterator[StreamEvent]:
        b = self.backend
        stats = RequestStats(b.name, b.model_name, b.device, self.sample_rate, b.weight_format)
        stats.notices += ([self.notice] if self.notice else []) + job.notices
        stats.seed = job.params.seed
        try:
            if not ticket.wait_turn(cancel):
                yield self._cancelled(stats)
                return
            stats.queue_wait_s = stats.elapsed()
            if self.capabilities.waits_on_loop:  # on the caller's thread: its waits awaited
                yield from self._produce(job, cancel, stats)
            else:  # a backend that computes or blocks: off an event loop (one thread)
                yield from off_the_loop(lambda: self._produce(job, cancel, stats), "tts-backend")
        finally:
            ticket.release()

    @staticmethod
    def _cancelled(stats: RequestStats) -> StreamEvent:
        """The final event of a request cancelled before it produced audio."""
        stats.finish("cancelled")
        return StreamEvent(np.zeros(0, np.float32), 0, True, stats.as_dict())

    def _produce(
        self, job: Prepared, cancel: threading.Event, stats: RequestStats
    ) -> Iterator[StreamEvent]:
        t0 = time.perf_counter()
        if job.model_voice is not None:
            voice = self._model_voice(job.model_voice)
        else:
            voice = self._voice(job.reference, job.reference_text)
        stats.voice_s = time.perf_counter() - t0
        stats.voice = dict(voice.summary)
        # only backends whose phrases are synthesized independently need crossfades
        phrases = self.capabilities.independent_phrases
        rate = self.sample_rate
        overlap = ms_to_samples(self.config.crossfade_ms, rate) if phrases else 0
        joiner = ChunkJoiner(overlap, ms_to_samples(self.config.fade_ms, rate))
        cadence = Cadence(job.params.first_chunk_frames, job.params.chunk_frames)
        pending: list[np.ndarray] = []
        stop_reason, index, started, batch = "end", 0, time.perf_counter(), None
        pieces = self._pieces(job, voice, cancel)
        if pieces is None:  # cancelled while it waited for the rest of its text
            yield self._cancelled(stats)
            return
        try:
            for piece in pieces:
                stop_reason = piece.stop_reason or stop_reason
                batch = _larger(batch, piece.batch_size)
                pending.append(joiner.push(piece.audio, piece.independent))
                if self._chunk_due(pending, joiner.held, piece, cadence, index):
                    audio = np.concatenate(pending)
                    pending = []
                    stats.add_chunk(audio.size, time.perf_counter() - started, batch)
                    yield StreamEvent(audio, index, False, stats.as_dict())
                    index, started, batch = index + 1, time.perf_counter(), None
                if cancel.is_set():
                    stop_reason = "cancelled"
                    break
        except (InputError, BackendError, EngineBusy):  # EngineBusy: a busy remote (remote.py)
            raise
        except Exception as exc:
            log.exception("backend %s failed", self.backend.name)
            raise BackendError(f"Synthesis failed ({type(exc).__name__}: {exc}).") from exc
        finally:
            close = getattr(pieces, "close", None)
            if close is not None:
                close()  # a generator backend: run its cleanup (stop its worker) now
        if cancel.is_set():  # also when the backend ended at the cancel with no piece after it
            stop_reason = "cancelled"
        audio = np.concatenate([*pending, joiner.finish()])
        if index == 0 and audio.size == 0:
            if stop_reason == "cancelled" or cancel.is_set():
                yield self._cancelled(stats)
                return
            raise BackendError("The voice produced no audio for this text.")
        stats.add_chunk(audio.size, time.perf_counter() - started, batch)
        stats.finish(stop_reason)
        yield StreamEvent(audio, index, True, stats.as_dict())

    def _chunk_due(
        self,
        pending: list[np.ndarray],
        held: int,
        piece: BackendChunk,
        cadence: Cadence,
        index: int,
    ) -> bool:
        """Whether the audio pending makes the next event. Only eSpeak's short buffers
        (independent phrases) are gathered to the request's cadence, the joiner's held-back
        tail counted; any other backend's chunks go out as they come, its last with the end."""
        size = sum(p.size for p in pending)
        if not self.capabilities.independent_phrases:
            return size > 0 and piece.stop_reason is None
        return cadence.due((size + held) / self.backend.frame_samples, index)

    def _pieces(
        self, job: Prepared, voice: Voice, cancel: threading.Event
    ) -> Iterator[BackendChunk] | None:
        """The backend's audio for the job's text: the whole text, or text that arrives in
        pieces (read as it comes by a backend that takes pieces, else held until done; None
        when cancelled meanwhile)."""
        text = job.text
        if isinstance(text, str):
            return self.backend.stream(text, voice, job.params, cancel)
        if self.capabilities.takes_text_pieces:  # its waits for text awaited, as any other
            return self.backend.stream_fed(text, voice, job.params, cancel)  # type: ignore[attr-defined]
        whole = text.wait_whole(cancel)
        return None if whole is None else self.backend.stream(whole, voice, job.params, cancel)

    def prepare_voice(
        self, reference: str | Path | tuple[int, np.ndarray], reference_text: str | None
    ) -> None:
        """Build and cache the voice of a clip now (e.g. right after it was saved), so the
        first request with it starts at once. Validates like a request (InputError)."""
        audio, ref_text, _notices = self._reference(reference, reference_text)
        if audio is not None or not self.backend.needs_reference:
            self._voice(audio, ref_text)

    def _reference(
        self, reference: str | Path | tuple[int, np.ndarray] | None, reference_text: str | None
    ) -> tuple[np.ndarray | None, str | None, list[str]]:
        """(clip as float32 at 24 kHz or None, cleaned transcript, notices); InputError."""
        limits = self.config.limits
        ref_text = clean_reference_text(reference_text, limits)
        audio, notices = prepare_reference(reference, limits, ref_text is not None)
        return audio, ref_text, notices

    def _voice(self, reference: np.ndarray | None, reference_text: str | None) -> Voice:
        """The backend's voice for this clip and transcript, from the cache or built now;
        InputError for what the backend refuses, BackendError when it fails."""
        return self._voices.get_or_build(
            reference, reference_text, lambda: self._build_voice(reference, reference_text)
        )

    def _model_voice(self, spec: ModelVoice) -> Voice:
        """The backend's own voice for `spec` (no clip: nothing to cache); InputError when
        the served model makes none."""
        if self.capabilities.task_type == "Base":  # it clones: no `model_voice` of its own
            raise InputError(
                f"{self.backend.name} clones voices from a reference clip: it has "
                "no preset or designed voices.",
                "voice",
            )
        return self.backend.model_voice(spec)  # type: ignore[attr-defined]

    def _build_voice(self, reference: np.ndarray | None, reference_text: str | None) -> Voice:
        try:
            return self.backend.create_voice(reference, reference_text)
        except (InputError, BackendError, EngineBusy):
            raise
        except Exception as exc:
            log.exception("backend %s could not build a voice", self.backend.name)
            raise BackendError(
                f"Could not build a voice from the reference ({type(exc).__name__}: {exc})."
            ) from exc


def _larger(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else max(a, b)
