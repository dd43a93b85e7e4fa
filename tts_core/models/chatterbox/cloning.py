"""Reference clip -> ChatterboxVoice, as Turbo's `prepare_conditionals` (spec chatterbox.md 3):
24 kHz (librosa.load's soxr_hq: audio.analysis.resample), loudness to -27 LUFS, a 16 kHz copy
for T3's prompt tokens (first 15 s, <= 375) and the VoiceEncoder; the first 10 s at 24 kHz for
S3Gen: its log-mel, and a torchaudio-sinc 16 kHz copy for CAMPPlus and the S3 prompt tokens."""

from __future__ import annotations

import logging

import numpy as np
import torch

from ...audio.analysis import resample as librosa_resample
from .config import PROMPT_TOKENS, S3_RATE, SAMPLE_RATE
from .features import prompt_mel, resample
from .loudness import norm_loudness
from .voice import ChatterboxVoice

MIN_SECONDS = 5.0  # the official asserts a longer clip
T3_PROMPT_SECONDS = 15  # ENC_COND_LEN
S3GEN_PROMPT_SECONDS = 10  # DEC_COND_LEN

log = logging.getLogger(__name__)


def to_24k(audio: np.ndarray, sr: int) -> np.ndarray:
    """Mono float32 at 24 kHz (librosa.load(path, sr=24000): channel mean, soxr_hq)."""
    if audio.ndim == 2:  # (S, C) as soundfile reads it; librosa averages the channels
        audio = np.mean(audio, axis=1, dtype=np.float32)
    if sr != SAMPLE_RATE:
        audio = librosa_resample(audio, sr, SAMPLE_RATE)
    return np.ascontiguousarray(audio, dtype=np.float32)


@torch.inference_mode()
def make_voice(
    audio,
    sr,
    ve,
    tokenizer,
    campplus,
    device,
    *,
    turbo: bool = True,
    t3_prompt_seconds: int = T3_PROMPT_SECONDS,
    t3_prompt_tokens: int = PROMPT_TOKENS,
) -> ChatterboxVoice:
    """turbo: the > 5 s check and the -27 LUFS loudness step (tts_turbo.py); False: the English
    prepare_conditionals (tts.py: neither; its T3 prompt passed as t3_prompt_seconds / tokens)."""
    if not turbo and audio.size == 0:
        raise ValueError("the reference clip is empty")
    ref24 = to_24k(audio, sr)
    if turbo and len(ref24) / SAMPLE_RATE <= MIN_SECONDS:
        raise ValueError(
            f"the reference clip must be longer than {MIN_SECONDS:g} s "
            f"(got {len(ref24) / SAMPLE_RATE:.2f} s)"
        )
    if turbo:
        ref24 = norm_loudness(ref24, SAMPLE_RATE)
    ref16 = librosa_resample(ref24, SAMPLE_RATE, S3_RATE)
    head = torch.from_numpy(ref24[: S3GEN_PROMPT_SECONDS * SAMPLE_RATE].copy())[None]  # (1, S)
    feat = prompt_mel(head)  # (1, Tm, 80)
    head16 = resample(head, SAMPLE_RATE, S3_RATE)[0]
    embedding = campplus(head16)
    prompt_token = tokenizer(head16)
    if feat.shape[1] != 2 * prompt_token.shape[1]:  # clip not a multiple of 40 ms
        log.warning("reference mel length is not 2 x its token count: tokens cut to mel // 2")
        prompt_token = prompt_token[:, : feat.shape[1] // 2]
    t3_tokens = tokenizer(
        torch.from_numpy(ref16[: t3_prompt_seconds * S3_RATE].copy()), max_tokens=t3_prompt_tokens
    )
    speaker = ve.embed(ref16)
    return ChatterboxVoice(speaker, t3_tokens, prompt_token, feat, embedding).to(device)
