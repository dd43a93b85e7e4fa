"""VoxCPM2 (tts_core.models.voxcpm) as a declaration over NeuralBackend (neural.py). Audio is at
the model's rate (48 kHz for the release), one stateful VAE decoder pass per stream; a "frame"
of the chunk sizes is one patch. Text sent in pieces is held until done: the prompt takes the
whole text before the first patch.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Any

from ..engine.backend import ReferenceNeeds, SynthesisParams
from ..engine.knobs import knobs_of
from ..models.voxcpm.knobs import VoxKnobs
from ..serving import RequestStream
from .neural import NeuralBackend

KNOBS = knobs_of(VoxKnobs)  # cfg_value, inference_timesteps (besides the shared ones)

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
