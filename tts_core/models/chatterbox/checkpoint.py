"""Strict loading of a Chatterbox Turbo folder (spec chatterbox.md 2): the released file names,
every tensor through the shared streamed loader (models/checkpoint.py), every key and shape
checked before anything is copied. The only keys skipped are the ones the official never uses
at inference: `tfmr.wte.weight` (deleted after the official strict load) and `text_head.weight`
(T3), so they cost no memory here; everything else must match exactly.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

from ..checkpoint import CheckpointError, TensorSource, load_safetensors, load_strict, under
from .config import NANO_T3_FILE, TURBO_T3_FILE

T3_FILE = TURBO_T3_FILE  # Nano's is NANO_T3_FILE (config.t3_file picks the one present)
S3GEN_FILE = "s3gen_meanflow.safetensors"
VE_FILE = "ve.safetensors"
CONDS_FILE = "conds.pt"
TOKENIZER_FILES = ("vocab.json", "merges.txt")
REQUIRED_FILES: tuple[str | tuple[str, ...], ...] = (
    VE_FILE,
    (TURBO_T3_FILE, NANO_T3_FILE),
    S3GEN_FILE,
    *TOKENIZER_FILES,
)
DOWNLOAD_PATTERNS = (
    VE_FILE,
    TURBO_T3_FILE,
    NANO_T3_FILE,
    S3GEN_FILE,
    *TOKENIZER_FILES,
    "added_tokens.json",
    "special_tokens_map.json",
    "tokenizer_config.json",
    CONDS_FILE,
    "chatterbox_sizes.json",
)
T3_UNUSED = ("tfmr.wte.weight", "text_head.weight")

__all__ = ["CheckpointError", "load_part", "resolve_folder"]


def resolve_folder(name_or_path: str | Path) -> Path:
    """A local folder, or a Hub repo id downloaded with the files above only (the shared
    loader's errors: no network, unknown repo, a missing file named)."""
    from ..checkpoint import resolve_checkpoint

    return resolve_checkpoint(name_or_path, required=REQUIRED_FILES, patterns=DOWNLOAD_PATTERNS)


class _Without:
    """A TensorSource minus some keys (unused tensors the official also discards)."""

    def __init__(self, source: TensorSource, dropped: tuple[str, ...]) -> None:
        self._source = source
        self.shapes = {key: shape for key, shape in source.shapes.items() if key not in dropped}

    def copy_into(self, key: str, target: torch.Tensor) -> None:
        self._source.copy_into(key, target)


def load_part(
    module: nn.Module,
    path: Path,
    prefix: str = "",
    dropped: tuple[str, ...] = (),
    after: Callable[[nn.Module], None] | None = None,
) -> nn.Module:
    """Fill `module` strictly from the tensors of `path` under `prefix` (prefix removed), less
    `dropped`; `after` runs on the filled module (eval mode is always set)."""
    with load_safetensors(path) as file:
        source: TensorSource = file
        if dropped:
            source = _Without(source, dropped)
        if prefix:
            source = under(source, prefix)
        load_strict(module, source, f"{path} [{prefix or 'all'}]")
    if after is not None:
        after(module)
    return module.eval()


def check_unused(path: Path, prefixes: tuple[str, ...]) -> None:
    """Every tensor of `path` lies under one of `prefixes` (no part of the file is ignored)."""
    with load_safetensors(path) as file:
        stray = sorted(key for key in file.shapes if not key.startswith(prefixes))
    if stray:
        raise CheckpointError(f"{path}: unexpected key(s) outside {prefixes}: {stray[:8]}")
