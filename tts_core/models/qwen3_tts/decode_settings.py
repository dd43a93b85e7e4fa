"""What one request asks of the decode, resolved: DecodeSettings and what is built from them.

`resolve_settings` turns the user's keyword arguments (the official `generate_voice_clone`
names) over generation_config.json into DecodeSettings; `frame_limit` says when the request
stops if EOS never comes: max_new_tokens - 1 frames (the official emits at most that many) or
the text-length cap (`length_cap_frames`), whichever is smaller. `talker_sampler` and
`stop_id_tensor` are the request's own c0 sampler and stop ids (serving/sequence.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from .config import GenerationDefaults
from .sampling import SamplingParams, TalkerSampler, suppressed_ids
from .talker import Talker

# Frame cap from the text length: 1 s of audio (12.5 frames) per target-text token -- about
# 3x a normal speaking rate -- plus 2 s. It stops a talker that never emits EOS long before
# max_new_tokens (8192 frames = 11 min by default).
LENGTH_CAP_FRAMES_PER_TOKEN = 12.5
LENGTH_CAP_EXTRA_FRAMES = 25
SAMPLING_KEYS = (
    "do_sample",
    "temperature",
    "top_k",
    "top_p",
    "repetition_penalty",
    "subtalker_dosample",
    "subtalker_temperature",
    "subtalker_top_k",
    "subtalker_top_p",
    "max_new_tokens",
)


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


def resolve_settings(
    defaults: GenerationDefaults,
    length_cap: int | None = None,
    *,
    greedy: bool = False,
    seed: int | None = None,
    stop_ids: tuple[int, ...] = (),
    repetition_window: int | None = None,
    **sampling: Any,
) -> DecodeSettings:
    """User kwargs (names of the official generate_voice_clone) over generation_config.json;
    TypeError on an unknown name.

    `greedy` = argmax in talker and sub-talker and no repetition penalty.
    """
    unknown = sorted(set(sampling) - set(SAMPLING_KEYS))
    if unknown:
        raise TypeError(f"unknown generation arguments: {', '.join(unknown)}")
    values = dict(vars(defaults))
    values.update({k: v for k, v in sampling.items() if v is not None})
    if greedy:
        values.update(do_sample=False, subtalker_dosample=False, repetition_penalty=1.0)
    if int(values["max_new_tokens"]) < 2:
        raise ValueError("max_new_tokens must be >= 2 (at most max_new_tokens - 1 frames)")
    if repetition_window is not None and repetition_window < 0:
        raise ValueError("repetition_window must be >= 0")
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
        stop_ids=tuple(int(i) for i in stop_ids),
        penalty_window=repetition_window,
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
