"""What one request asks, by name (Knobs), and of the decode, resolved: DecodeSettings and what
is built from them.

`Knobs.settings` turns the user's keyword arguments (the official `generate_voice_clone`
names) over generation_config.json into DecodeSettings; `frame_limit` says when the request
stops if EOS never comes: max_new_tokens - 1 frames (the official emits at most that many) or
the text-length cap (`length_cap_frames`), whichever is smaller. `talker_sampler` and
`stop_id_tensor` are the request's own c0 sampler and stop ids (serving/sequence.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ...audio.cadence import Cadence
from .config import GenerationDefaults
from .sampling import SamplingParams, TalkerSampler, suppressed_ids
from .talker import Talker

# Frame cap from the text length: 1 s of audio (12.5 frames) per target-text token -- about
# 3x a normal speaking rate -- plus 2 s. It stops a talker that never emits EOS long before
# max_new_tokens (8192 frames = 11 min by default).
LENGTH_CAP_FRAMES_PER_TOKEN = 12.5
LENGTH_CAP_EXTRA_FRAMES = 25


def length_cap_frames(text_tokens: int) -> int:
    return math.ceil(LENGTH_CAP_FRAMES_PER_TOKEN * text_tokens) + LENGTH_CAP_EXTRA_FRAMES


@dataclass(frozen=True)
class DecodeSettings:
    talker: SamplingParams
    subtalker: SamplingParams
    max_new_tokens: int
    length_cap: int | None  # frame cap derived from the text length; None = off
    stop_ids: tuple[int, ...] = ()  # extra c0 ids that end the utterance like EOS
    penalty_window: int | None = None  # penalize only the last N frames' c0 (None = all)
    seed: int | None = None

    def frame_limit(self) -> tuple[int, str]:
        """(most frames allowed, reason reported when that limit stops the request)."""
        by_tokens = self.max_new_tokens - 1
        if self.length_cap is not None and self.length_cap < by_tokens:
            return self.length_cap, "length_cap"
        return by_tokens, "max_new_tokens"


@dataclass(frozen=True)
class Knobs:
    """What a request reads by name (the model's `stream`, `generate`, `request`, `plan`),
    declared once; a bad value is a ValueError here, an unknown name a TypeError
    (models/contract.py `read_knobs`).

    A chunk after `first_chunk_frames` frames, then every `chunk_frames`. greedy: argmax in
    talker and sub-talker, no repetition penalty. stop_ids: extra c0 ids that end the utterance
    like EOS. repetition_window: penalize only the last N frames' c0. length_cap: stop at
    `length_cap_frames(text tokens)` frames (reason "length_cap"). non_streaming_mode: the
    official text layout (True: the whole text in the prompt; False: one text token per
    frame); None: the default of the checkpoint's type (Base False, the other two True). The
    rest: the official generate_voice_clone's sampling names, None: generation_config.json's
    value (GenerationDefaults)."""

    first_chunk_frames: int = 2
    chunk_frames: int = 6
    greedy: bool = False
    stop_ids: tuple[int, ...] = ()
    repetition_window: int | None = None
    length_cap: bool = True
    non_streaming_mode: bool | None = None
    do_sample: bool | None = None
    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    repetition_penalty: float | None = None
    subtalker_dosample: bool | None = None
    subtalker_temperature: float | None = None
    subtalker_top_k: int | None = None
    subtalker_top_p: float | None = None
    max_new_tokens: int | None = None

    def __post_init__(self) -> None:
        self.cadence()  # ValueError below 1
        if self.repetition_window is not None and self.repetition_window < 0:
            raise ValueError("repetition_window must be >= 0")
        layout = self.non_streaming_mode
        if layout is not None and not isinstance(layout, bool):
            raise ValueError(f"non_streaming_mode must be True or False, got {layout!r}")

    def cadence(self) -> Cadence:
        return Cadence(self.first_chunk_frames, self.chunk_frames)

    def settings(
        self, defaults: GenerationDefaults, length_cap: int | None, seed: int | None
    ) -> DecodeSettings:
        """The sampling knobs over generation_config.json (`defaults`); `length_cap`: the
        frame cap from the text's length (None: off)."""
        values = {
            name: default if getattr(self, name) is None else getattr(self, name)
            for name, default in vars(defaults).items()
        }
        if self.greedy:
            values.update(do_sample=False, subtalker_dosample=False, repetition_penalty=1.0)
        if int(values["max_new_tokens"]) < 2:
            raise ValueError("max_new_tokens must be >= 2 (at most max_new_tokens - 1 frames)")
        return DecodeSettings(
            talker=SamplingParams(
                do_sample=bool(values["do_sample"]),
                temperature=float(values["temperature"]),
                top_k=int(values["top_k"]),
                top_p=float(values["top_p"]),
                repetition_penalty=float(values["repetition_penalty"]),
            ),
            subtalker=SamplingParams(
                do_sample=bool(values["subtalker_dosample"]),
                temperature=float(values["subtalker_temperature"]),
                top_k=int(values["subtalker_top_k"]),
                top_p=float(values["subtalker_top_p"]),
            ),
            max_new_tokens=int(values["max_new_tokens"]),
            length_cap=length_cap,
            stop_ids=tuple(int(i) for i in self.stop_ids),
            penalty_window=self.repetition_window,
            seed=seed,
        )


def talker_sampler(
    talker: Talker, settings: DecodeSettings, generator: torch.Generator
) -> TalkerSampler:
    """The c0 sampler of one request (the official processors, its own generator)."""
    cfg = talker.cfg
    device = talker.device
    return TalkerSampler(
        settings.talker,
        eos_id=cfg.codec_eos_token_id,
        suppressed=suppressed_ids(cfg.vocab_size, cfg.codec_eos_token_id, device),
        generator=generator,
        penalty_window=settings.penalty_window,
    )


def stop_id_tensor(talker: Talker, settings: DecodeSettings) -> torch.Tensor:
    """(S,) int64: EOS first, then the request's extra stop ids."""
    ids = [talker.cfg.codec_eos_token_id, *settings.stop_ids]
    return torch.tensor(ids, dtype=torch.long, device=talker.device)
