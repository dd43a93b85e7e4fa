"""VoxCPM2 in our own PyTorch (issue #14). Phase 1: the AudioVAE V2 (encode, decode, exact
stateful streaming decode) and the config; the LM, LocEnc, LocDiT and generation come later."""

from .audiovae import AudioVAE
from .config import AudioVAEConfig, ConfigError, VoxCPM2Config
from .vae_checkpoint import CheckpointError
from .vae_streaming import VAEDecoderState

__all__ = [
    "AudioVAE",
    "AudioVAEConfig",
    "CheckpointError",
    "ConfigError",
    "VAEDecoderState",
    "VoxCPM2Config",
]
