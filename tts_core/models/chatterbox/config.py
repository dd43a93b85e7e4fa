"""Chatterbox sizes: the released constants (Turbo's or Nano's T3, by the T3 file in the folder),
or a checkpoint's `chatterbox_sizes.json` (the tiny test checkpoints': tools/oracle writes it).
The release has no config file (the official code hard-codes every size), and head counts cannot
be read from tensor shapes; every size is checked against the tensors on load.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

SIZES_FILE = "chatterbox_sizes.json"

# Fixed by the code whatever the checkpoint (spec chatterbox.md 1, 8, 9).
START_SPEECH, STOP_SPEECH = 6561, 6562
SPEECH_VOCAB = 6563  # T3 speech tokens: 6561 S3 tokens + start + stop
S3_VOCAB = 6561
SILENCE_TOKEN = 4299  # S3GEN_SIL
SAMPLE_RATE = 24000
S3_RATE = 16000
MELS = 80
PROMPT_TOKENS = 375  # Turbo speech_cond_prompt_len
SPEAKER_EMBED = 256
LOOKAHEAD = 3  # the flow encoder's pre_lookahead_len: tokens of right context
DEFAULT_MAX_BATCH = 8  # streams one scheduler steps together (runner.py)


class SizesError(ValueError):
    """chatterbox_sizes.json is unreadable or incomplete."""


@dataclass(frozen=True)
class T3Sizes:
    n_layer: int = 24
    n_embd: int = 1024
    n_head: int = 16
    n_positions: int = 8196
    text_vocab: int = 50276


# the released T3 of each Turbo-family model, by its file (spec chatterbox.md 11: Nano is
# chatterbox HEAD's from_local(..., nano=True), "GPT2_small"; everything else is Turbo's)
TURBO_T3_FILE, NANO_T3_FILE = "t3_turbo_v1.safetensors", "t3_nano_v1.safetensors"
RELEASED_T3 = {TURBO_T3_FILE: T3Sizes(), NANO_T3_FILE: T3Sizes(n_layer=12, n_embd=768, n_head=12)}


def t3_file(folder: Path) -> str:
    """The T3 file of a Turbo-family folder: Turbo's where both are present."""
    return next((name for name in RELEASED_T3 if (Path(folder) / name).is_file()), TURBO_T3_FILE)


@dataclass(frozen=True)
class EncoderSizes:  # UpsampleConformerEncoder
    size: int = 512
    heads: int = 8
    linear_units: int = 2048
    num_blocks: int = 6


@dataclass(frozen=True)
class DecoderSizes:  # the CFM estimator (ConditionalDecoder)
    channels: int = 256
    heads: int = 8
    head_dim: int = 64
    n_blocks: int = 4
    mid_blocks: int = 12


@dataclass(frozen=True)
class S3TokSizes:
    n_audio_state: int = 1280
    n_audio_head: int = 20
    n_audio_layer: int = 6


@dataclass(frozen=True)
class CampPlusSizes:
    embedding_size: int = 192
    growth_rate: int = 32
    bn_size: int = 4
    init_channels: int = 128


@dataclass(frozen=True)
class HiftSizes:
    base_channels: int = 512
    f0_channels: int = 512


@dataclass(frozen=True)
class ChatterboxSizes:
    t3: T3Sizes = field(default_factory=T3Sizes)
    ve_hidden: int = 256
    s3tok: S3TokSizes = field(default_factory=S3TokSizes)
    encoder: EncoderSizes = field(default_factory=EncoderSizes)
    decoder: DecoderSizes = field(default_factory=DecoderSizes)
    campplus: CampPlusSizes = field(default_factory=CampPlusSizes)
    hift: HiftSizes = field(default_factory=HiftSizes)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ChatterboxSizes:
        parts = {
            part.name: part.default_factory for part in fields(cls) if part.name != "ve_hidden"
        }
        try:
            kwargs: dict[str, Any] = {name: kind(**data[name]) for name, kind in parts.items()}
            kwargs["ve_hidden"] = int(data["ve_hidden"])
        except (KeyError, TypeError) as error:
            raise SizesError(f"{SIZES_FILE}: missing or unknown field ({error})") from error
        return cls(**kwargs)

    @classmethod
    def of_folder(cls, folder: Path) -> ChatterboxSizes:
        """The released sizes of its T3 file (Turbo or Nano), unless the folder holds
        chatterbox_sizes.json."""
        data = sizes_file(folder)
        return cls(t3=RELEASED_T3[t3_file(folder)]) if data is None else cls.from_dict(data)


def sizes_file(folder: Path) -> dict[str, Any] | None:
    """The fields of the folder's chatterbox_sizes.json; None without one (the release)."""
    path = Path(folder) / SIZES_FILE
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise SizesError(f"{path}: unreadable ({error})") from error
    if not isinstance(data, dict):
        raise SizesError(f"{path}: not a JSON object")
    return data
