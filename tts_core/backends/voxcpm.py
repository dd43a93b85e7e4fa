"""Adapter: our VoxCPM2 model (tts_core.models.voxcpm) -> the engine's Backend interface.

Every request goes through the model's VoxCPMScheduler (continuous batching on the one
decode engine: up to `max_batch` streams step together on one loop thread, each bit-identical
to the same request alone; see models/voxcpm/serving.py), which computes the voices too.
Audio comes at the model's own rate (48 kHz for the release) from one exact, stateful VAE
decoder pass per stream, so chunks are never marked independent. A "frame" of the chunk-size
settings is one patch.

Text sent in pieces (Engine.open_fed, the WebSocket /v1/audio/speech/stream) is buffered: the
engine holds it until the sender says done, then runs the normal request with the whole text
(VoxCPM2's prompt takes the whole text before its first patch; it has no per-frame text input
to wait on). The audio is the whole text's; the first audio comes after done.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np

from ..audio import SAMPLE_RATE
from ..engine.backend import BackendChunk, ReferenceNeeds, SynthesisParams, Voice
from ..engine.capabilities import Capabilities
from ..engine.errors import InputError
from ..engine.knobs import Knob
from .device import resolve_device, resolve_dtype
from .qwen3 import DEFAULT_MAX_BATCH

log = logging.getLogger(__name__)
CFG_VALUE, INFERENCE_TIMESTEPS = 2.0, 10  # the official generate()'s defaults
# The request knobs this backend reads (besides the shared seed and chunk sizes)
KNOBS = (
    Knob("cfg_value", float, 0.0, 10.0, default=CFG_VALUE, label="Guidance (CFG value)",
         step=0.1, ui_range=(0.0, 5.0),
         help="Classifier-free guidance: higher follows the text and the voice more closely."),
    Knob("inference_timesteps", int, 1, 100, default=INFERENCE_TIMESTEPS, step=1,
         ui_range=(1, 50), label="Diffusion steps",
         help="Flow-matching steps per patch: more cost more time per patch."),
)  # fmt: skip

DESCRIPTION = (
    "VoxCPM2 voice cloning. With a reference clip it speaks in that voice; with its transcript "
    "too it continues the clip (closest clone); with no clip it makes up a voice. The language "
    "follows the text; guidance (CFG) and diffusion steps replace temperature, top-k and top-p."
)


SPEAKING_ROOM = 0.25  # of the model's positions kept free of the reference: text and speech


def reference_needs_of(model: Any) -> ReferenceNeeds:
    """VoxCPMBackend.reference for a loaded model: its caches hold max_length positions, and a
    clip with its transcript takes two patches' positions per patch of audio (the reference and
    the continuation prompt); the longest clip leaves SPEAKING_ROOM of them. The release: 8192
    positions at 6.25 patches/s (hundreds of seconds); a tiny test checkpoint: ~2.8 s."""
    patches_per_s = model.vae.sample_rate / (model.patch_size * model.vae.hop_length)
    longest = (1 - SPEAKING_ROOM) * model.config.max_length / (2 * patches_per_s)
    return dataclasses.replace(VoxCPMBackend.reference, max_seconds=round(longest, 2))


class VoxCPMBackend:
    name = "voxcpm"
    can_clone = True
    needs_reference = False  # zero-shot without a clip
    # with its transcript the clip is continued (closest clone); the AudioVAE encodes at 16 kHz
    reference = ReferenceNeeds(sample_rate=16_000, transcript="used")
    description = DESCRIPTION
    knobs = KNOBS
    # the language follows the text (the page hides its dropdown); text in pieces: buffered
    # until done (module doc); one exact stateful decoder pass: no crossfade
    capabilities = Capabilities(reads_language=False, waits_on_loop=True)
    weight_format_reason, decode_step = "", None  # float weights only; no step graphs

    def __init__(
        self, model: Any, model_name: str, device: str, max_batch: int = DEFAULT_MAX_BATCH
    ) -> None:
        from ..models.voxcpm.serving import VoxCPMScheduler

        self.model = model
        self.model_name = model_name
        self.device = device
        self.sample_rate = int(model.sample_rate)
        self.frame_samples = int(model.patch_size * model.vae.decode_hop_length)  # per patch
        self.weight_format = str(model.net.dtype).removeprefix("torch.")
        self.reference = reference_needs_of(model)
        self.scheduler = VoxCPMScheduler(model, max_batch=max_batch)  # thread starts on first use
        self.default_concurrency = self.scheduler.max_batch  # the engine admits as many

    def close(self) -> None:
        """Stop the scheduler's thread; streams still running end without a final chunk."""
        self.scheduler.close()

    @classmethod
    def load(
        cls,
        name_or_path: str,
        device: str = "auto",
        dtype: str = "auto",
        max_batch: int = DEFAULT_MAX_BATCH,
    ) -> VoxCPMBackend:
        """Hub repo id or local folder; dtype "auto": as backends.device.resolve_dtype (the
        AudioVAE always runs in float32); max_batch: streams decoded together."""
        import torch

        from ..models.voxcpm.model import VoxCPMModel

        device = resolve_device(device)
        dtype = resolve_dtype(dtype, device)
        model = VoxCPMModel.from_pretrained(
            name_or_path, device=device, dtype=getattr(torch, dtype)
        )
        log.info("loaded VoxCPM2 %s on %s (%s, %d Hz)", name_or_path, device, dtype,
                 model.sample_rate)  # fmt: skip
        return cls(model, str(name_or_path), device, max_batch=max_batch)

    def sampling_defaults(self) -> dict[str, Any]:
        """VoxCPM2's own knobs (no temperature / top-k / top-p / repetition penalty)."""
        return {knob.name: knob.default for knob in self.knobs}

    def create_voice(self, audio: np.ndarray | None, reference_text: str | None) -> Voice:
        """audio: 24 kHz mono float32 reference or None (zero-shot: the model makes up a voice)."""
        if audio is None:
            if reference_text:
                raise InputError(
                    "A transcript was given without a reference clip: add the clip it belongs "
                    "to, or clear the transcript.",
                    "reference_text",
                )
            return Voice(self.name, None, {"mode": "zero-shot", "transcript": False})
        clip = np.asarray(audio)
        if clip.ndim != 1 or clip.size == 0 or not np.issubdtype(clip.dtype, np.floating):
            raise InputError(
                f"Reference clip: expected mono float samples, got shape {clip.shape} "
                f"({clip.dtype}).",
                "reference",
            )
        if not np.all(np.isfinite(clip)):
            raise InputError("Reference clip: it contains NaN or infinite samples.", "reference")
        try:
            # on the scheduler's thread, as every computation of the model (serving/loop.py)
            voice = self.scheduler.call(self.model.create_voice, clip.astype(np.float32),
                                        SAMPLE_RATE, reference_text)  # fmt: skip
        except ValueError as exc:  # the model's own checks on the clip
            raise InputError(f"Reference clip: {exc}", "reference") from exc
        mode = "continuation" if reference_text else "reference"
        return Voice(self.name, voice, {"mode": mode, "transcript": bool(reference_text)})

    def stream(
        self, text: str, voice: Voice, params: SynthesisParams, cancel: threading.Event
    ) -> Iterator[BackendChunk]:
        """Patches decoded `first_chunk_frames` then `chunk_frames` at a time; a Stop frees the
        row at the scheduler's next step (after the patch in progress). `language` and the
        sampling knobs are ignored."""
        seed = params.seed  # drawn by the engine where the request had none (Engine.prepare)
        try:
            chunks = self.scheduler.submit(
                text,
                voice.data,
                seed=seed,
                **{**self.sampling_defaults(), **params.values_of(self.knobs)},
                first_chunk_patches=params.first_chunk_frames,
                chunk_patches=params.chunk_frames,
                should_stop=cancel.is_set,
            )
        except ValueError as exc:  # the model's checks of this request (e.g. prompt too long)
            raise InputError(str(exc)) from exc
        try:
            for chunk in chunks:
                yield BackendChunk(chunk.audio, independent=False, frames=chunk.patches,
                                   stop_reason=chunk.stop_reason, batch_size=chunk.batch_size)  # fmt: skip
                if cancel.is_set():
                    return
        finally:
            chunks.close()  # frees the row and its caches now, not at garbage collection
