"""Device and dtype resolution, once for every backend: `--device auto|cpu|cuda` and
`--dtype auto|float32|bfloat16`."""

from __future__ import annotations


def resolve_device(device: str) -> str:
    """ "auto": CUDA when available, else the CPU; "cuda" without a CUDA device is an error."""
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("--device cuda was asked for, but no CUDA device is available")
    return device


def resolve_dtype(dtype: str, device: str) -> str:
    """ "auto": bfloat16 on a CUDA GPU with bfloat16 arithmetic (compute capability 8.0+: A100,
    L4, H100, RTX 30xx and later), float32 elsewhere: older GPUs (T4, V100) would emulate it,
    and on a CPU the weights' format is the quantizer's business."""
    if dtype != "auto":
        return dtype
    import torch

    native_bf16 = device == "cuda" and torch.cuda.get_device_capability() >= (8, 0)
    return "bfloat16" if native_bf16 else "float32"
