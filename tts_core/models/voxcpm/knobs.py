"""What a VoxCPM2 request reads by name (`VoxKnobs`, `VoxStreamKnobs`), with the official
generate()'s defaults; the served ones carry their range and labels (contract.knob). No torch:
the backend reads these at import."""

from __future__ import annotations

from dataclasses import dataclass

from ...audio.cadence import Cadence
from ..contract import knob

# the shared chunk sizes (engine/knobs.py), which `stream` reads as its patch counts
CHUNK_NAMES = {"first_chunk_frames": "first_chunk_patches", "chunk_frames": "chunk_patches"}


@dataclass(frozen=True)
class VoxKnobs:
    """What `generate` reads by name."""

    cfg_value: float = knob(
        2.0,
        0.0,
        10.0,
        label="Guidance (CFG value)",
        step=0.1,
        ui_range=(0.0, 5.0),
        help="Classifier-free guidance: higher follows the text and the voice more closely.",
    )
    inference_timesteps: int = knob(
        10,
        1,
        100,
        step=1,
        ui_range=(1, 50),
        label="Diffusion steps",
        help="Flow-matching steps per patch: more cost more time per patch.",
    )
    max_len: int = 4096  # patches at most (besides the cap from the text's length)

    def __post_init__(self) -> None:
        if self.max_len < 1 or self.inference_timesteps < 1:
            raise ValueError("max_len and inference_timesteps must be >= 1")


@dataclass(frozen=True)
class VoxStreamKnobs(VoxKnobs):
    """What `stream` and `request` read by name: a chunk every `chunk_patches` patches, the
    first after `first_chunk_patches` (None: the same); also as CHUNK_NAMES."""

    chunk_patches: int = 1
    first_chunk_patches: int | None = None

    def __post_init__(self) -> None:
        self.cadence()  # ValueError below 1
        super().__post_init__()

    def cadence(self) -> Cadence:
        first = self.first_chunk_patches
        return Cadence(self.chunk_patches if first is None else first, self.chunk_patches)
