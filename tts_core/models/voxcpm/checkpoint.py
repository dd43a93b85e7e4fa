"""Strict loading of VoxCPM2's weights: `model.safetensors` (or `pytorch_model.bin`) into
VoxCPM2Network, `audiovae.safetensors` / `audiovae.pth` into AudioVAE.

The official loaders call `load_state_dict(strict=False)`: a misnamed tensor silently stays
random. Here a file must hold exactly the module's keys with their shapes; anything else is a
`CheckpointError` naming the keys. Tensors are cast to the module's dtype (the release stores the
network in bfloat16; the VAE is float32, as the official `.to(torch.float32)`, and its
`decoder.sr_bin_boundaries` stays int32).
"""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import load_file
from torch import nn

from ..state_check import mismatches, shapes_of

SAFETENSORS_NAME = "model.safetensors"
BIN_NAME = "pytorch_model.bin"
VAE_SAFETENSORS_NAME = "audiovae.safetensors"
VAE_PTH_NAME = "audiovae.pth"

# What a folder must hold (a tuple: any one of those names), and what a Hub download fetches:
# the released repo's weights in safetensors, the VAE in either format, the tokenizer files.
REQUIRED_FILES: tuple[str | tuple[str, ...], ...] = (
    "config.json",
    (SAFETENSORS_NAME, BIN_NAME),
    (VAE_SAFETENSORS_NAME, VAE_PTH_NAME),
    "tokenizer.json",
)
DOWNLOAD_PATTERNS = (
    "config.json",
    SAFETENSORS_NAME,
    VAE_SAFETENSORS_NAME,
    VAE_PTH_NAME,
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
)


class CheckpointError(ValueError):
    """A checkpoint file is missing, unreadable, or does not match the config."""


def resolve_folder(name_or_path: str | Path) -> Path:
    """A local folder, or a Hub repo id downloaded with the files above only (the Qwen3
    loader's mechanism and errors: no network, unknown repo, a missing file named)."""
    from ..checkpoint import resolve_checkpoint

    return resolve_checkpoint(name_or_path, required=REQUIRED_FILES, patterns=DOWNLOAD_PATTERNS)


def _torch_load(path: Path):
    """A pickled state dict (the official loaders also accept one under "state_dict")."""
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # pickle / zip errors: report the file, keep the cause
        raise CheckpointError(f"{path}: cannot read ({exc})") from exc
    if isinstance(data, dict) and isinstance(data.get("state_dict"), dict):
        data = data["state_dict"]
    return data


def read_model_state(folder: str | Path) -> tuple[dict[str, torch.Tensor], Path]:
    folder = Path(folder)
    if (folder / SAFETENSORS_NAME).is_file():
        path = folder / SAFETENSORS_NAME
        try:
            return load_file(str(path), device="cpu"), path
        except Exception as exc:  # header / truncation errors: report the file
            raise CheckpointError(f"{path}: cannot read ({exc})") from exc
    path = folder / BIN_NAME
    if not path.is_file():
        raise CheckpointError(f"{folder}: no weights (expected {SAFETENSORS_NAME} or {BIN_NAME})")
    data = _torch_load(path)
    if not isinstance(data, dict):
        raise CheckpointError(f"{path}: not a state dict")
    return data, path


def check_model_state(net: nn.Module, state: dict[str, torch.Tensor], source: str) -> None:
    problems = mismatches(shapes_of(net.state_dict()), shapes_of(state))
    if problems:
        raise CheckpointError(f"{source} does not match config.json: " + "; ".join(problems))
    for key, tensor in state.items():
        if not tensor.is_floating_point():
            raise CheckpointError(f"{source}: {key} has dtype {tensor.dtype}, expected a float")


@torch.no_grad()
def load_model_state(net: nn.Module, folder: str | Path) -> Path:
    """Fill `net` (a VoxCPM2Network) strictly from the folder's weights; returns the file."""
    state, path = read_model_state(folder)
    check_model_state(net, state, str(path))
    _copy(net, state)
    return path


def find_audiovae_file(folder: str | Path) -> Path:
    """audiovae.safetensors if present (the official preference), else audiovae.pth."""
    folder = Path(folder)
    for name in (VAE_SAFETENSORS_NAME, VAE_PTH_NAME):
        if (folder / name).is_file():
            return folder / name
    raise CheckpointError(
        f"{folder}: no AudioVAE weights (expected {VAE_SAFETENSORS_NAME} or {VAE_PTH_NAME})"
    )


def read_audiovae_state(path: Path) -> dict[str, torch.Tensor]:
    if path.suffix == ".safetensors":
        return load_file(str(path), device="cpu")
    data = _torch_load(path)
    if not isinstance(data, dict) or not all(
        isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in data.items()
    ):
        raise CheckpointError(f"{path}: not a state dict of named tensors")
    return data


def check_audiovae_state(vae: nn.Module, state: dict[str, torch.Tensor], source: str) -> None:
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
    """Fill `vae` (an AudioVAE) from the folder's AudioVAE file (strict); returns the file."""
    path = find_audiovae_file(folder)
    state = read_audiovae_state(path)
    check_audiovae_state(vae, state, str(path))
    _copy(vae, state)
    vae.refresh_derived()
    return path


def _copy(module: nn.Module, state: dict[str, torch.Tensor]) -> None:
    for key, target in module.state_dict().items():
        target.copy_(state[key])
