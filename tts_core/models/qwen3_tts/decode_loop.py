"""The talker + code predictor decode loop: one codec frame (G codes) per step.

prefill -> draw c0 of frame 0; then for each frame k: code predictor gives c1..c15 from
[past_hidden, C(c0)], the frame is emitted, and the talker consumes F(frame k) + trailing[k]
(or tts_pad) at position P + k to give the logits of c0 for frame k+1.
Stops: c0 in the stop ids (EOS first) -> "eos"; max_new_tokens - 1 frames -> "max_new_tokens"
(the official emits at most max_new_tokens - 1 frames); the text-length cap -> "length_cap".
Everything the loop touches is preallocated at start: the talker KV cache (P + frame limit),
the predictor's 16-position cache, the c0 history buffer. The prefill is always eager; the
per-frame steps run eager, static-shape or CUDA-graphed (`mode`, see static_step.py).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from .config import GenerationDefaults
from .prompt import Prompt, SpecialTextVectors
from .sampling import SamplingParams, TalkerSampler, draw, make_generator, suppressed_ids
from .static_step import make_steps
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
        """(most frames allowed, reason reported when that limit stops the loop)."""
        by_tokens = self.max_new_tokens - 1
        if self.length_cap is not None and self.length_cap < by_tokens:
            return self.length_cap, "length_cap"
        return by_tokens, "max_new_tokens"


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


def step_input(
    talker: Talker, special: SpecialTextVectors, prompt: Prompt, frame: torch.Tensor, index: int
) -> torch.Tensor:
    """The talker's input after frame `index`: F(frame) + trailing text vector (or tts_pad),
    (1, 1, H)."""
    trailing = prompt.trailing
    text = trailing[index] if index < trailing.shape[0] else special.pad
    return (talker.frame_embed(frame[None]) + text).view(1, 1, -1)


class FrameLoop:
    """Iterate `frames()` to get (G,) int64 code frames; `stop_reason` is set when it ends."""

    def __init__(
        self,
        talker: Talker,
        special: SpecialTextVectors,
        prompt: Prompt,
        settings: DecodeSettings,
        mode: str = "eager",
    ) -> None:
        """mode: "eager" | "static" | "cuda_graphs", see static_step.py (same codes)."""
        self.talker = talker
        self.special = special
        self.prompt = prompt
        self.settings = settings
        self.stop_reason: str | None = None
        device = talker.device
        self.limit, self.limit_reason = settings.frame_limit()
        self.prefill_len = prompt.prefill.shape[1]
        self.generator = make_generator(settings.seed, device)
        self.sampler = talker_sampler(talker, settings, self.generator)
        self.stop_ids = stop_id_tensor(talker, settings)
        self.caches = talker.new_caches(1, self.prefill_len + max(self.limit, 1))
        self.predictor_caches = talker.code_predictor.new_caches(1)
        self.history = torch.zeros(1, max(self.limit, 1), dtype=torch.long, device=device)
        self.steps = make_steps(mode, talker, self.caches, self.predictor_caches)

    @property
    def graphs_failed(self) -> bool:
        """True when CUDA-graph capture failed and this request fell back to eager."""
        return self.steps is not None and self.steps.graphs_failed

    def _choose_subcode(self, logits: torch.Tensor) -> torch.Tensor:
        return draw(logits, self.settings.subtalker, self.generator)

    def _step_input(self, frame: torch.Tensor, index: int) -> torch.Tensor:
        return step_input(self.talker, self.special, self.prompt, frame, index)

    def frames(self) -> Iterator[torch.Tensor]:
        talker = self.talker
        logits, hidden = talker(self.prompt.prefill, self.caches, start=0)
        for index in range(self.limit):
            c0 = self.sampler(logits, self.history[:, :index])  # (1,)
            if bool(torch.isin(c0, self.stop_ids).any()):
                self.stop_reason = "eos"
                return
            rest = self.steps.predict(hidden, talker.codec_embed(c0), self._choose_subcode)
            frame = torch.cat([c0, rest[0]])  # (G,)
            self.history[:, index] = c0
            yield frame
            if index + 1 == self.limit:
                break
            step = self._step_input(frame, index)
            logits, hidden = self.steps.talker_step(step, self.prefill_len + index)
        self.stop_reason = self.limit_reason

    def release(self) -> None:
        """Drop the per-request buffers at once (called when a stream is closed)."""
        if self.steps is not None:
            self.steps.release()
        self.steps = None
        self.caches = []
        self.predictor_caches = []


def resolve_settings(
    defaults: GenerationDefaults,
    sampling: dict[str, Any],
    *,
    greedy: bool = False,
    seed: int | None = None,
    stop_ids: tuple[int, ...] = (),
    repetition_window: int | None = None,
    length_cap: int | None = None,
) -> DecodeSettings:
    """User kwargs (names of the official generate_voice_clone) over generation_config.json.

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
