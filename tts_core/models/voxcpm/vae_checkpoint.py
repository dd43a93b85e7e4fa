"""Strict loading of `audiovae.safetensors` / `audiovae.pth` into our AudioVAE.

The official loader merges these keys into the model's state dict and calls
`load_state_dict(strict=False)`, so a misnamed tensor silently stays random. Here every key of
the model must be in the file with its exact shape and the file may hold nothing else;
otherwise `CheckpointError` names the keys. Float tensors are cast to the model's float32 (as
the official `.to(torch.float32)` of the VAE); `decoder.sr_bin_boundaries` stays int32.
"""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import load_file
from torch import nn

from ..state_check import mismatches, shapes_of

SAFETENSORS_NAME = "audiovae.safetensors"
PTH_NAME = "audiovae.pth"
_SHOWN = 8  # keys listed in an error message


class CheckpointError(ValueError):
    """An AudioVAE checkpoint file is missing, unreadable, or does not match the config."""


def find_audiovae_file(folder: str | Path) -> Path:
    """audiovae.safetensors if present (the official preference), else audiovae.pth."""
    folder = Path(folder)
    for name in (SAFETENSORS_NAME, PTH_NAME):
        if (folder / name).is_file():
            return folder / name
    raise CheckpointError(
        f"{folder}: no AudioVAE weights (expected {SAFETENSORS_NAME} or {PTH_NAME})"
    )


def read_audiovae_state(path: Path) -> dict[str, torch.Tensor]:
    if path.suffix == ".safetensors":
        return load_file(str(path), device="cpu")
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # pickle / zip errors: report the file, keep the cause
        raise CheckpointError(f"{path}: cannot read ({exc})") from exc
    if isinstance(data, dict) and isinstance(data.get("state_dict"), dict):
        data = data["state_dict"]  # the official loader accepts {"state_dict": ...}
    if not isinstance(data, dict) or not all(
        isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in data.items()
    ):
        raise CheckpointError(f"{path}: not a state dict of named tensors")
    return data


def check_state(vae: nn.Module, state: dict[str, torch.Tensor], source: str) -> None:
    """Raise CheckpointError unless `state` has exactly the model's keys and shapes."""
    expected = vae.state_dict()
    problems = mismatches(shapes_of(expected), shapes_of(state))
    if problems:
        raise CheckpointError(
            f"{source} does not match audio_vae_config in config.json: " + "; ".join(problems)
        )
    for key, tensor in state.items():
        if tensor.is_floating_point() != expected[key].is_floating_point():
            raise CheckpointError(
                f"{source}: {key} has dtype {tensor.dtype}, expected {expected[key].dtype}"
            )


@torch.no_grad()
def load_audiovae_state(vae: nn.Module, folder: str | Path) -> Path:
    """Fill `vae` (an AudioVAE: audiovae.py imports this module, so the type is not named)
    from the folder's AudioVAE file (strict); returns the file used."""
    path = find_audiovae_file(folder)
    state = read_audiovae_state(path)
    check_state(vae, state, str(path))
    for key, target in vae.state_dict().items():
        target.copy_(state[key])
    vae.refresh_derived()
    return path
