"""Random VoxCPM2 weights with a spread that keeps activations O(1) and the audio in range
(torch only, so the tiny-fixture builder in the oracle venv and the real-size benchmark
checkpoint share them)."""

from __future__ import annotations

import torch


def vae_value(name: str, shape: torch.Size, gen: torch.Generator) -> torch.Tensor:
    """A value for the float tensor `name` of the AudioVAE state dict, drawn from `gen`."""
    if name.endswith("weight_v"):
        return torch.randn(shape, generator=gen)
    if name.endswith("weight_g"):
        return 0.45 + 0.4 * torch.rand(shape, generator=gen)
    if name.endswith("alpha"):
        return 0.5 + 1.5 * torch.rand(shape, generator=gen)
    if name.endswith("scale_embed.weight"):
        return 1.0 + 0.3 * torch.randn(shape, generator=gen)
    if name.endswith("bias_embed.weight") or name.endswith("bias"):
        return 0.1 * torch.randn(shape, generator=gen)
    raise KeyError(f"no init rule for {name}")


def model_value(name: str, shape: torch.Size, gen: torch.Generator) -> torch.Tensor:
    """A value for the tensor `name` of model.safetensors: linears ~ N(0, 1/fan_in), norms
    around 1, embeddings ~ N(0, 1), biases small."""
    if name.endswith("norm.weight"):
        return 1.0 + 0.2 * torch.randn(shape, generator=gen)
    if name.endswith("embed_tokens.weight") or name.endswith("special_token"):
        return torch.randn(shape, generator=gen)
    if name.endswith(".bias"):
        return 0.1 * torch.randn(shape, generator=gen)
    if name.endswith(".weight") and len(shape) == 2:
        return torch.randn(shape, generator=gen) / shape[1] ** 0.5
    raise KeyError(f"no init rule for {name}")
