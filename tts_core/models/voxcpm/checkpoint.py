"""Strict loading of `model.safetensors` (or `pytorch_model.bin`) into VoxCPM2Network.

The official loader calls `load_state_dict(strict=False)`: a misnamed tensor silently stays
random. Here the file must hold exactly the network's keys with their shapes (the AudioVAE is
in its own file, see vae_checkpoint); anything else is a `CheckpointError` naming the keys.
Tensors are cast to the network's dtype (the release stores bfloat16).
"""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import load_file

from ..state_check import mismatches, shapes_of
from .network import VoxCPM2Network
from .vae_checkpoint import CheckpointError

SAFETENSORS_NAME = "model.safetensors"
BIN_NAME = "pytorch_model.bin"

# What a folder must hold (a tuple: any one of those names), and what a Hub download fetches:
# the released repo's weights in safetensors, the VAE in either format, the tokenizer files.
REQUIRED_FILES: tuple[str | tuple[str, ...], ...] = (
    "config.json",
    (SAFETENSORS_NAME, BIN_NAME),
    ("audiovae.safetensors", "audiovae.pth"),
    "tokenizer.json",
)
DOWNLOAD_PATTERNS = (
    "config.json",
    SAFETENSORS_NAME,
    "audiovae.safetensors",
    "audiovae.pth",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
)


def resolve_folder(name_or_path: str | Path) -> Path:
    """A local folder, or a Hub repo id downloaded with the files above only (the Qwen3
    loader's mechanism and errors: no network, unknown repo, a missing file named)."""
    from ..checkpoint import resolve_checkpoint

    return resolve_checkpoint(name_or_path, required=REQUIRED_FILES, patterns=DOWNLOAD_PATTERNS)


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
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise CheckpointError(f"{path}: cannot read ({exc})") from exc
    if isinstance(data, dict) and isinstance(data.get("state_dict"), dict):
        data = data["state_dict"]
    if not isinstance(data, dict):
        raise CheckpointError(f"{path}: not a state dict")
    return data, path


def check_model_state(net: VoxCPM2Network, state: dict[str, torch.Tensor], source: str) -> None:
    problems = mismatches(shapes_of(net.state_dict()), shapes_of(state))
    if problems:
        raise CheckpointError(f"{source} does not match config.json: " + "; ".join(problems))
    for key, tensor in state.items():
        if not tensor.is_floating_point():
            raise CheckpointError(f"{source}: {key} has dtype {tensor.dtype}, expected a float")


@torch.no_grad()
def load_model_state(net: VoxCPM2Network, folder: str | Path) -> Path:
    state, path = read_model_state(folder)
    check_model_state(net, state, str(path))
    for key, target in net.state_dict().items():
        target.copy_(state[key])
    return path
