"""VoxCPM2 in our own PyTorch (issue #14): the AudioVAE V2 (phase 1) and the whole model
(phase 2: MiniCPM-4 stacks, LocEnc, LocDiT + CFM, FSQ, stop head, the three prompt modes,
generate and exact streaming), equal to the official voxcpm==2.0.3 on float32 CPU."""

from ...lazy import lazy_exports

# name -> its module, imported on first use: the package itself imports no torch, so the
# backend reads the model's knobs (knobs.py) without loading the model's code
_EXPORTS = {
    "AudioChunk": ".runner",
    "AudioVAE": ".audiovae",
    "AudioVAEConfig": ".config",
    "CheckpointError": ".checkpoint",
    "ConfigError": ".config",
    "GenerationResult": ".model",
    "VAEDecoderState": ".vae_streaming",
    "Voice": ".voice",
    "VoxCPM2Config": ".config",
    "VoxCPMModel": ".model",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
