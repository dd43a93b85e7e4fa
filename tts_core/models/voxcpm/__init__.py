"""VoxCPM2 in our own PyTorch (issue #14): the AudioVAE V2 (phase 1) and the whole model
(phase 2: MiniCPM-4 stacks, LocEnc, LocDiT + CFM, FSQ, stop head, the three prompt modes,
generate and exact streaming), equal to the official voxcpm==2.0.3 on float32 CPU."""

from .audiovae import AudioVAE
from .checkpoint import CheckpointError
from .config import AudioVAEConfig, ConfigError, VoxCPM2Config
from .model import GenerationResult, VoxCPMModel
from .runner import AudioChunk
from .vae_streaming import VAEDecoderState
from .voice import Voice

__all__ = [
    "AudioChunk",
    "AudioVAE",
    "AudioVAEConfig",
    "CheckpointError",
    "ConfigError",
    "GenerationResult",
    "VAEDecoderState",
    "Voice",
    "VoxCPM2Config",
    "VoxCPMModel",
]
