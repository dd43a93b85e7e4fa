"""The generic part of the neural models' backends, written once: a model's backend declares what
it is and how the engine's settings become its model's request (`submit`); `NeuralBackend` loads
the model, serves it on `EngineLoop(model.runner(n), make_request=model.request)` (one thread
steps every stream and makes the voices), checks clips, and streams chunks (one stateful decoder
pass per stream: never independent), freeing a row as soon as its stream ends or is cancelled."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Mapping
from typing import Any, ClassVar

import numpy as np

from ..audio import SAMPLE_RATE
from ..engine.backend import BackendChunk, ReferenceNeeds, SynthesisParams, Voice
from ..engine.capabilities import Capabilities
from ..engine.errors import InputError
from ..engine.knobs import Knob
from ..serving import EngineLoop, RequestStream
from .device import resolve_device, resolve_dtype

log = logging.getLogger(__name__)


class NeuralBackend:
    # --- declared by each model's backend ---------------------------------------------------
    name: ClassVar[str]  # "voxcpm"
    title: ClassVar[str]  # for messages and the log ("VoxCPM2")
    description: ClassVar[str]
    knobs: ClassVar[tuple[Knob, ...]]  # besides the shared seed and chunk sizes
    knob_defaults: ClassVar[Mapping[str, Any]] = {}  # of knobs declared without a default
    reference: ReferenceNeeds
    needs_reference: ClassVar[bool]  # False: with no clip the model speaks a voice of its own
    default_max_batch: ClassVar[int] = 8  # streams stepped together (--max-batch)
    chunk_frames: ClassVar[str]  # the field of the model's chunks that counts its frames
    sample_rate: int  # what was loaded (each backend's, from its model)
    frame_samples: int  # per frame, the chunk-size unit
    weight_format: str  # "float32"
    can_clone = True
    # the language follows the text (the page hides its dropdown); text in pieces is buffered
    # until done (the prompt takes the whole text); one stateful decoder pass: no crossfade
    capabilities = Capabilities(reads_language=False, waits_on_loop=True)
    weight_format_reason, decode_step = "", None  # float weights only; no step graphs

    def __init__(
        self, model: Any, model_name: str, device: str, max_batch: int | None = None
    ) -> None:
        self.model = model
        self.model_name = model_name
        self.device = device
        self.loop = self.served_loop(model, max_batch or self.default_max_batch)
        self.default_concurrency = self.loop.max_batch  # the engine admits as many

    def served_loop(self, model: Any, max_batch: int) -> EngineLoop:
        """The loop every request of this backend goes through (started on first use)."""
        return EngineLoop(
            model.runner(max_batch), make_request=model.request, thread_name=f"tts-{self.name}"
        )

    def close(self) -> None:
        """Stop the loop's thread; streams still running end without a final chunk."""
        self.loop.close()

    # --- loading ----------------------------------------------------------------------------
    @classmethod
    def load(
        cls,
        name_or_path: str,
        device: str = "auto",
        dtype: str = "auto",
        max_batch: int | None = None,
        **options: Any,
    ) -> NeuralBackend:
        """A Hub repo id or local folder; dtype "auto": device.resolve_dtype's; max_batch None:
        `default_max_batch`; `options`: the model's own (its spec's backend_options)."""
        import torch

        device = cls.resolve_device(device)
        dtype = getattr(torch, resolve_dtype(dtype, device))
        model = cls.load_model(name_or_path, device, dtype, **options)
        backend = cls(model, str(name_or_path), device, max_batch=max_batch)
        log.info(
            "loaded %s %s on %s (%s, %d Hz)",
            cls.title,
            name_or_path,
            device,
            backend.weight_format,
            backend.sample_rate,
        )
        return backend

    @classmethod
    def resolve_device(cls, device: str) -> str:
        return resolve_device(device)

    @staticmethod
    def load_model(name_or_path: str, device: str, dtype: Any, **options: Any) -> Any:
        """The library's model of the checkpoint (each backend's loader)."""
        raise NotImplementedError

    # --- voices -----------------------------------------------------------------------------
    def create_voice(self, audio: np.ndarray | None, reference_text: str | None) -> Voice:
        """audio: 24 kHz mono float32 reference (tts_core.audio.SAMPLE_RATE), or None."""
        if audio is None:
            return self.voice_without_clip(reference_text)
        if self.reference.transcript == "required" and not (reference_text or "").strip():
            raise InputError(
                f"{self.title} needs the reference clip's transcript: set "
                "reference_text to the words the clip says.",
                "reference_text",
            )
        clip = reference_clip(audio)
        try:
            voice = self.loop.call(self.model.create_voice, clip, SAMPLE_RATE, reference_text)
        except ValueError as exc:  # the model's own checks on the clip
            raise InputError(f"Reference clip: {exc}", "reference") from exc
        return Voice(self.name, voice, self.voice_summary(voice, reference_text))

    def voice_summary(self, voice: Any, reference_text: str | None) -> dict[str, Any]:
        """What the user is told of a cloned voice (the request's stats)."""
        if self.reference.transcript == "ignored":  # cloned from the clip alone
            return {
                "mode": "reference",
                "transcript": False,
                "transcript_ignored": bool(reference_text),
            }
        mode = "continuation" if reference_text else "reference"
        return {"mode": mode, "transcript": bool(reference_text)}

    def voice_without_clip(self, reference_text: str | None) -> Voice:
        """No clip: the model's own voice (`voice=None`: it makes one up), or, where a clip is
        needed, a refusal saying what to give."""
        if self.needs_reference:
            needed = " and its transcript" if self.reference.transcript == "required" else ""
            raise InputError(
                f"{self.title} clones a voice: give a reference clip{needed}.", "reference"
            )
        if reference_text:
            raise InputError(
                "A transcript was given without a reference clip: add the clip it "
                "belongs to, or clear the transcript.",
                "reference_text",
            )
        return Voice(self.name, None, {"mode": "zero-shot", "transcript": False})

    # --- requests ---------------------------------------------------------------------------
    def sampling_defaults(self) -> dict[str, Any]:
        """Each knob's default: the declared one, else the model's (`knob_defaults`)."""
        return {knob.name: self.knob_defaults.get(knob.name, knob.default) for knob in self.knobs}

    def knob_values(self, params: SynthesisParams) -> dict[str, Any]:
        """Every knob's value for this request (the defaults for those not set)."""
        return {**self.sampling_defaults(), **params.values_of(self.knobs)}

    def submit(
        self, text: str, voice: Any, params: SynthesisParams, cancel: threading.Event
    ) -> RequestStream:
        """The model's request for these settings queued on the loop (`self.loop.submit`)."""
        raise NotImplementedError

    def stream(
        self, text: str, voice: Voice, params: SynthesisParams, cancel: threading.Event
    ) -> Iterator[BackendChunk]:
        """The request's chunks; a Stop frees the row at the loop's next step (after the frame
        in progress), before it is queued: nothing is queued."""
        if cancel.is_set():
            return
        try:
            chunks = self.submit(text, voice.data, params, cancel)
        except InputError:
            raise
        except ValueError as exc:  # the model's checks of this request (e.g. prompt too long)
            raise InputError(str(exc)) from exc
        yield from self.delivered(chunks, params, cancel)

    def delivered(
        self, chunks: RequestStream, params: SynthesisParams, cancel: threading.Event
    ) -> Iterator[BackendChunk]:
        """The request's chunks until its end or a cancel; its row freed either way."""
        try:
            for chunk in self.backend_chunks(chunks, params):
                yield chunk
                if cancel.is_set():
                    return
        finally:
            chunks.close()  # frees the row and its caches now, not at garbage collection

    def backend_chunks(
        self, chunks: RequestStream, params: SynthesisParams
    ) -> Iterator[BackendChunk]:
        """The model's chunks as the engine's (`chunk_frames` frames each)."""
        for chunk in chunks:
            yield BackendChunk(
                chunk.audio,
                independent=False,
                frames=getattr(chunk, self.chunk_frames),
                stop_reason=chunk.stop_reason,
                batch_size=chunk.batch_size,
            )


def reference_clip(audio: np.ndarray) -> np.ndarray:
    """The reference as mono float32 samples, or an InputError naming what is wrong."""
    clip = np.asarray(audio)
    if clip.ndim != 1 or clip.size == 0 or not np.issubdtype(clip.dtype, np.floating):
        raise InputError(
            f"Reference clip: expected mono float samples, got shape {clip.shape} ({clip.dtype}).",
            "reference",
        )
    if not np.all(np.isfinite(clip)):
        raise InputError("Reference clip: it contains NaN or infinite samples.", "reference")
    return clip.astype(np.float32)
