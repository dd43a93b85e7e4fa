"""Adapter: our Chatterbox Turbo (tts_core.models.chatterbox) -> the engine's Backend interface.

Streamed: T3 draws tokens and S3Gen + HiFT turn them into audio while it runs (`model.stream`:
the flow re-run over the prompt's tail and the newest tokens, ramping up to every `chunk_tokens`
tokens, the stable frames vocoded with a carried source; models/chatterbox/streaming.py). The
tokens are the official's for the seed; the audio approximates the whole-utterance pass (measured SNR in BENCHMARKS.md).
Streamed chunks carry the Perth watermark (knob `watermark`, on by default, with resemble-perth
installed): each chunk is marked with 0.25 s of context and a 40 ms tail crossfaded into the
next pass (audio/perth_watermark.py StreamWatermarker: no clicks at the joins, measured in
BENCHMARKS.md); `model.generate(watermark=True)` gives the official's whole-clip watermark.
Every request goes through the model's served loop (`EngineLoop(model.runner(max_batch),
make_request=model.request)`: continuous batching on the one decode engine,
models/chatterbox/serving.py: up to `max_batch` streams step together on one loop thread, each
bit-identical to the same request's `model.stream`), which makes the voices too.
Cloning takes the reference clip alone (no transcript); with no clip the checkpoint's built-in
voice (conds.pt) speaks. The English model's backend (chatterbox_english.py) is this class with
its own model and knobs (`_load_model`, `_request_args`).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np

from ..engine.backend import BackendChunk, ReferenceNeeds, SynthesisParams, Voice
from ..engine.capabilities import Capabilities
from ..engine.errors import InputError
from ..engine.knobs import Knob, sampling_knobs
from ..models.chatterbox.chunking import StreamChunking
from ..models.chatterbox.config import DEFAULT_MAX_BATCH
from ..serving.loop import EngineLoop
from .neural import reference_clip

log = logging.getLogger(__name__)
SAMPLES_PER_TOKEN = 960  # 40 ms at 24 kHz
DEFAULT_CHUNKING = StreamChunking()
SAMPLING_KNOBS = ("temperature", "top_k", "top_p", "repetition_penalty")
# --- Perth watermark of the stream (audio/perth_watermark.py; measured in BENCHMARKS.md) ---
WATERMARK_KNOB = Knob(
    "watermark", int, 0, 1, default=1, label="Perth watermark (1: on)", step=1,
    help="1: the streamed audio carries Resemble's Perth watermark, as the official marks "
         "its clips (needs the package resemble-perth); 0: no watermark.")  # fmt: skip
# The shared sampling knobs (their defaults: the official Turbo generate()'s, TurboSampling's;
# sampling_defaults), then the streaming chunk sizes; declared once here for page, API, checks.
KNOBS = (
    *sampling_knobs(*SAMPLING_KNOBS),
    # S3Gen's chunking (StreamChunking); the shared first_chunk_frames / chunk_frames only group
    # the audio into events. One token = 40 ms of audio; each pass re-runs the flow.
    Knob("first_chunk_tokens", int, 1, 200, default=DEFAULT_CHUNKING.first_tokens,
         label="First S3Gen chunk (tokens)", step=1, ui_range=(4, 100),
         help="Speech tokens before the first audio is made: fewer start sooner, but the "
              "first audio is shorter and each pass costs a flow run."),
    Knob("chunk_tokens", int, 1, 400, default=DEFAULT_CHUNKING.chunk_tokens,
         label="Later S3Gen chunks (tokens)", step=1, ui_range=(4, 200),
         help="Speech tokens between later passes: more cost fewer flow runs."),
    WATERMARK_KNOB,
)  # fmt: skip

# Turbo's shortest reference (exclusive): the official's assert, which
# models/chatterbox/cloning.MIN_SECONDS makes (not imported here: that module loads torch)
TURBO_MIN_REFERENCE_S = 5.0

DESCRIPTION = (
    "Chatterbox Turbo voice cloning from the reference clip alone (longer than 5 s; a "
    "transcript is not used). With no clip it speaks in the checkpoint's built-in voice. Audio "
    "streams while the tokens are drawn (S3Gen in chunks: close to, not bit-equal to, the "
    "whole-clip pass); the streamed audio carries the Perth watermark (knob watermark)."
)


class ChatterboxBackend:
    name = "chatterbox"
    can_clone = True
    needs_reference = False  # the built-in voice speaks without a clip
    # clones from the clip alone (the page hides the transcript box); Turbo refuses a clip of
    # 5 s or less (the official's assert, models/chatterbox/cloning.py); S3Gen reads its first
    # 10 s at 24 kHz, the tokenizer 16 kHz
    reference = ReferenceNeeds(
        sample_rate=24_000,
        min_seconds=TURBO_MIN_REFERENCE_S,
        min_exclusive=True,
        max_seconds=None,
        transcript="ignored",
        best_seconds=(6.0, 10.0),
    )
    reads_transcript = reference.transcript == "used"
    description = DESCRIPTION
    knobs = KNOBS
    capabilities = Capabilities(reads_language=False)  # English: the page hides the language
    decode_step = None  # no step graphs

    def __init__(
        self, model: Any, model_name: str, device: str, max_batch: int = DEFAULT_MAX_BATCH
    ) -> None:
        from ..models.chatterbox.quant import t3_weight_format

        self.model = model
        self.model_name = model_name
        self.device = device
        self.sample_rate = int(model.sample_rate)
        self.frame_samples = SAMPLES_PER_TOKEN
        self.weight_format = t3_weight_format(model)  # "int8": T3's blocks (quantize)
        self.weight_format_reason = getattr(model, "format_decision", "")
        # the served loop: its thread (tts-chatterbox, tts-chatterbox-english) starts on first use
        self.scheduler = EngineLoop(model.runner(max_batch), make_request=model.request,
                                    thread_name=f"tts-{self.name}")  # fmt: skip
        self.default_concurrency = self.scheduler.max_batch  # the engine admits as many
        preload_watermark()

    @classmethod
    def load(
        cls,
        name_or_path: str,
        device: str = "auto",
        max_batch: int = DEFAULT_MAX_BATCH,
        quantize: str = "auto",
        **_: Any,
    ) -> ChatterboxBackend:
        """Local folder in the released layout; float32 (dtype does not apply); quantize: T3 on
        the 8-bit CPU path ("auto": where faster and >= 30 dB, models/chatterbox/quant.py);
        max_batch: streams decoded together."""
        from .device import resolve_device

        device = resolve_device(device)
        model = cls._load_model(name_or_path, device, quantize)
        log.info("loaded %s %s on %s", cls.name, name_or_path, device)
        return cls(model, str(name_or_path), device, max_batch=max_batch)

    @staticmethod
    def _load_model(name_or_path: str, device: str, quantize: str) -> Any:
        from ..models.chatterbox.model import ChatterboxTurboModel

        return ChatterboxTurboModel.from_pretrained(name_or_path, device=device, quantize=quantize)

    @staticmethod
    def _sampling() -> type:
        """The model's sampling settings (a dataclass whose defaults are its generate()'s)."""
        from ..models.chatterbox.sampling import TurboSampling

        return TurboSampling

    def _request_args(self, values: dict[str, Any]) -> dict[str, Any]:
        """The request's model.stream arguments of the knob values (besides seed, chunking)."""
        return {"sampling": self._sampling()(**{name: values[name] for name in SAMPLING_KNOBS})}

    def close(self) -> None:
        """Stop the scheduler's thread; streams still running end without a final chunk."""
        self.scheduler.close()

    def sampling_defaults(self) -> dict[str, Any]:
        """Each knob's default: the sampling values of the model's generate() (`_sampling`'s
        dataclass defaults), the declared ones of the rest."""
        sampling = dataclasses.asdict(self._sampling()())
        return {knob.name: sampling.get(knob.name, knob.default) for knob in self.knobs}

    def create_voice(self, audio: np.ndarray | None, reference_text: str | None) -> Voice:
        """audio: 24 kHz mono float32 reference (Turbo: > 5 s), or None for the built-in voice."""
        # A transcript (the built-in voices carry theirs) is not used: both models clone from
        # the clip alone; the summary says so.
        if audio is None:
            if self.model.builtin_voice is None:
                raise InputError("This checkpoint has no built-in voice: add a reference clip.",
                                 "reference")  # fmt: skip
            return Voice(self.name, None, {"mode": "built-in"})
        clip = reference_clip(audio)
        try:
            # on the scheduler's thread, as every computation of the model (serving/loop.py)
            voice = self.scheduler.call(self.model.create_voice, clip, 24000)
        except ValueError as exc:  # e.g. shorter than 5 s
            raise InputError(f"Reference clip: {exc}", "reference") from exc
        return Voice(self.name, voice, {"mode": "reference", "transcript": False,
                                        "transcript_ignored": bool(reference_text)})  # fmt: skip

    def stream(
        self, text: str, voice: Voice, params: SynthesisParams, cancel: threading.Event
    ) -> Iterator[BackendChunk]:
        seed = params.seed  # drawn by the engine where the request had none (Engine.prepare)
        values = {**self.sampling_defaults(), **params.values_of(self.knobs)}
        chunking = StreamChunking(first_tokens=values["first_chunk_tokens"],
                                  chunk_tokens=values["chunk_tokens"])  # fmt: skip
        if cancel.is_set():
            return
        try:  # model.stream's arguments (model.request, which submit calls, takes the same)
            chunks = self.scheduler.submit(text, voice.data, seed=seed, chunking=chunking,
                                           should_stop=cancel.is_set,
                                           **self._request_args(values))  # fmt: skip
        except ValueError as exc:  # the request's checks (e.g. text too long for T3)
            raise InputError(str(exc)) from exc
        from ..audio.perth_watermark import stream_marker

        mark = stream_marker(values["watermark"], self.sample_rate)  # Perth, per chunk
        try:
            for chunk in chunks:
                # on the model thread: beside the scheduler's steps, its torch threads and the
                # steps' would share the cores (measured: +0.45 s per 1 s chunk, 2 cores)
                audio = self.scheduler.call(mark, chunk.audio.astype(np.float32, copy=False),
                                            chunk.final)  # fmt: skip
                yield BackendChunk(audio, frames=audio.size // SAMPLES_PER_TOKEN,
                                   stop_reason=chunk.stop_reason,
                                   batch_size=chunk.batch_size)  # fmt: skip
                if cancel.is_set():
                    return
        finally:
            chunks.close()  # frees the row and its caches now, not at garbage collection


def preload_watermark() -> None:
    """Perth's model loaded at backend start where the stream is watermarked by default and
    resemble-perth is installed, so the first request does not load it."""
    from ..audio.perth_watermark import perth_available, shared_watermarker

    if WATERMARK_KNOB.default and perth_available():
        shared_watermarker()
