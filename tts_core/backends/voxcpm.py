"""Adapter: our VoxCPM2 model (tts_core.models.voxcpm) -> the engine's Backend interface.

Every request goes through the backend's EngineLoop (backends/neural.py: continuous batching on
the one decode engine, up to `max_batch` streams stepped together on one loop thread, each
bit-identical to the same request alone; models/voxcpm/runner.py), which computes the voices
too. Audio comes at the model's own rate (48 kHz for the release) from one exact, stateful VAE
decoder pass per stream, so chunks are never marked independent. A "frame" of the chunk-size
settings is one patch.

Text sent in pieces (Engine.open_fed, the WebSocket /v1/audio/speech/stream) is buffered: the
engine holds it until the sender says done, then runs the normal request with the whole text
(VoxCPM2's prompt takes the whole text before its first patch; it has no per-frame text input
to wait on). The audio is the whole text's; the first audio comes after done.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Any

from ..engine.backend import ReferenceNeeds, SynthesisParams
from ..engine.knobs import Knob
from ..serving import RequestStream
from .neural import NeuralBackend

CFG_VALUE, INFERENCE_TIMESTEPS = 2.0, 10  # the official generate()'s defaults
# The request knobs this backend reads (besides the shared seed and chunk sizes)
KNOBS = (
    Knob(
        "cfg_value",
        float,
        0.0,
        10.0,
        default=CFG_VALUE,
        label="Guidance (CFG value)",
        step=0.1,
        ui_range=(0.0, 5.0),
        help="Classifier-free guidance: higher follows the text and the voice more closely.",
    ),
    Knob(
        "inference_timesteps",
        int,
        1,
        100,
        default=INFERENCE_TIMESTEPS,
        step=1,
        ui_range=(1, 50),
        label="Diffusion steps",
        help="Flow-matching steps per patch: more cost more time per patch.",
    ),
)

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


class VoxCPMBackend(NeuralBackend):
    name, title = "voxcpm", "VoxCPM2"
    needs_reference = False  # zero-shot without a clip
    # with its transcript the clip is continued (closest clone); the AudioVAE encodes at 16 kHz
    reference = ReferenceNeeds(sample_rate=16_000, transcript="used")
    description = DESCRIPTION
    knobs = KNOBS
    chunk_frames = "patches"

    def __init__(
        self, model: Any, model_name: str, device: str, max_batch: int | None = None
    ) -> None:
        super().__init__(model, model_name, device, max_batch)
        self.sample_rate = int(model.sample_rate)  # the release: 48 kHz
        self.frame_samples = int(model.patch_size * model.vae.decode_hop_length)  # per patch
        self.weight_format = str(model.net.dtype).removeprefix("torch.")  # the AudioVAE: fp32
        self.reference = reference_needs_of(model)

    @staticmethod
    def load_model(name_or_path: str, device: str, dtype: Any) -> Any:
        from ..models.voxcpm.model import VoxCPMModel

        return VoxCPMModel.from_pretrained(name_or_path, device=device, dtype=dtype)

    def submit(
        self, text: str, voice: Any, params: SynthesisParams, cancel: threading.Event
    ) -> RequestStream:
        """model.request's arguments: the knobs by name, the chunk sizes in patches (`language`
        is ignored)."""
        return self.loop.submit(
            text,
            voice,
            seed=params.seed,
            **self.knob_values(params),
            first_chunk_patches=params.first_chunk_frames,
            chunk_patches=params.chunk_frames,
            should_stop=cancel.is_set,
        )
