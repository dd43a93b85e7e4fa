"""Strict loading of a Chatterbox folder (spec chatterbox.md 2): Turbo's released file names
(the English model's: english.py), every tensor through the shared streamed loader
(models/checkpoint.py), every key and shape checked before anything is copied. The only keys
skipped are T3's that the official never uses at inference (`T3_UNUSED`: `tfmr.wte.weight`,
deleted after the official strict load, and `text_head.weight`), so they cost no memory here.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

from ..checkpoint import CheckpointError, TensorSource, load_safetensors, load_strict, under
from .config import NANO_T3_FILE, SIZES_FILE, TURBO_T3_FILE

S3GEN_FILE = "s3gen_meanflow.safetensors"
VE_FILE = "ve.safetensors"
CONDS_FILE = "conds.pt"
TOKENIZER_FILES = ("vocab.json", "merges.txt")
TOKENIZER_EXTRAS = ("added_tokens.json", "special_tokens_map.json", "tokenizer_config.json")
T3_FILES = (TURBO_T3_FILE, NANO_T3_FILE)  # Turbo's or Nano's (config.t3_file picks)
REQUIRED_FILES = (VE_FILE, T3_FILES, S3GEN_FILE, *TOKENIZER_FILES)
MODEL_FILES = (VE_FILE, *T3_FILES, S3GEN_FILE, *TOKENIZER_FILES, *TOKENIZER_EXTRAS)
DOWNLOAD_PATTERNS = (*MODEL_FILES, CONDS_FILE, SIZES_FILE)  # and the built-in voice, sizes
T3_UNUSED = ("tfmr.wte.weight", "text_head.weight")

__all__ = ["CheckpointError", "check_unused", "load_part"]


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
