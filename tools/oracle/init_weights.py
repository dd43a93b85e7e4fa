"""Seeded random weights with enough spread to give non-trivial outputs.

The official `_init_weights` leaves codebooks, SnakeBeta parameters, norms and many biases at
constants (zeros/ones), which would hide bugs (a skipped norm weight, swapped alpha/beta,
ignored cluster_usage) and give silent audio. Here every tensor is drawn from one seeded
generator, in sorted-name order, with a rule per parameter kind.
"""

from __future__ import annotations

import math

import torch

LOGIT_GAIN = 4.0  # codec_head / lm_head logits have std ~ this: wide argmax margins


def _normal(gen: torch.Generator, shape: torch.Size, std: float, mean: float = 0.0):
    return torch.randn(shape, generator=gen, dtype=torch.float64).mul(std).add(mean).float()


def _uniform(gen: torch.Generator, shape: torch.Size, lo: float, hi: float):
    return (torch.rand(shape, generator=gen, dtype=torch.float64) * (hi - lo) + lo).float()


def _fan_in(name: str, t: torch.Tensor) -> int:
    if t.dim() == 2:  # Linear [out, in]
        return t.shape[1]
    if "upsample" in name and ".0.conv" in name or ".block.1.conv" in name:
        # ConvTranspose1d [in, out, k] with stride k (upsample) or k/2 (decoder blocks)
        stride = t.shape[2] if "upsample" in name else t.shape[2] // 2
        return t.shape[0] * t.shape[2] // stride
    return t.shape[1] * t.shape[2]  # Conv1d [out, in/groups, k]


def _value(name: str, t: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    shape = t.shape
    if name.endswith("cluster_usage"):
        return _uniform(gen, shape, 0.5, 2.0)
    if name.endswith("initialized"):
        return torch.ones(shape)
    if name.endswith(("embedding_sum", "embed_sum")):
        return _normal(gen, shape, 1.0)  # rescaled by the caller (times cluster_usage)
    if name.endswith((".alpha", ".beta")):  # SnakeBeta, stored as logs
        return _normal(gen, shape, 0.2)
    if name.endswith(".scale") or name.endswith(".gamma"):  # LayerScale / ConvNeXt gamma
        return _uniform(gen, shape, 0.05, 0.3)
    if name.endswith("norm.weight") or "layernorm" in name or name.endswith("_norm.weight"):
        return _normal(gen, shape, 0.1, mean=1.0)
    if name.endswith(".bias"):
        return _normal(gen, shape, 0.05)
    if "embedding" in name and t.dim() == 2:
        return _normal(gen, shape, 1.0)
    if name.endswith(("codec_head.weight",)) or ".lm_head." in name:
        return _normal(gen, shape, LOGIT_GAIN / math.sqrt(shape[1]))
    return _normal(gen, shape, 1.0 / math.sqrt(_fan_in(name, t)))


@torch.no_grad()
def randomize(module: torch.nn.Module, seed: int) -> None:
    """Overwrite every parameter and persistent buffer of `module` in place."""
    gen = torch.Generator().manual_seed(seed)
    tensors = dict(module.state_dict(keep_vars=True))
    for name in sorted(tensors):
        t = tensors[name]
        if not t.is_floating_point():
            continue
        t.data.copy_(_value(name, t, gen).to(t.dtype))
    _couple_codebooks(tensors)


def _couple_codebooks(tensors: dict[str, torch.Tensor]) -> None:
    # Stored sums are usage * vector, so the effective codebook (sum / usage) is ~N(0, 1).
    for name, t in tensors.items():
        if name.endswith(("embedding_sum", "embed_sum")):
            usage = tensors[name.rsplit(".", 1)[0] + ".cluster_usage"]
            t.data.mul_(usage.data[:, None])


@torch.no_grad()
def round_to_bf16(module: torch.nn.Module) -> None:
    """Round every float tensor to bf16 precision in place (what the bf16 file will hold)."""
    for t in module.state_dict(keep_vars=True).values():
        if t.is_floating_point():
            t.data.copy_(t.data.to(torch.bfloat16).to(t.dtype))
