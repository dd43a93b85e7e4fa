"""The least time Chatterbox Turbo can take on this machine, from what it must read and compute:
the floor beside ours in chatterbox_real_size_bench.py.

Error model of the floor (a lower bound, not an estimate):
* T3 one token: every weight the decode step reads once (the GPT-2 blocks, ln_f and the speech
  head, in the format they run in; one embedding row each is left out) plus the keys and values
  of every position so far, at the machine's measured read bandwidth (membw.py). The step's
  arithmetic (~1 GFLOP) is far below what the same time allows, so bytes bound it.
* S3Gen: the floating-point operations torch counts (`FlopCounterMode`: matrix products,
  convolutions, attention) over a real stream's passes (the flow re-runs its window, HiFT its
  left context) and over one whole-utterance pass, at the measured float32 GEMM rate. Element-
  wise work and the op-by-op overhead are left out, so the bound is below what any float32
  implementation reaches.
* N streams: T3 reads its weights once per step for all rows (a batched step), each row its own
  keys and values; S3Gen's operations scale with the rows.
"""

from __future__ import annotations

import time

import torch
from torch.utils.flop_counter import FlopCounterMode

from tts_core.models import laid_out

TOKENS_PER_AUDIO_S = 25  # S3 speech tokens: 25 Hz
GEMM_SIZE = 2048


def gemm_gflops(repeats: int = 5) -> float:
    """The best float32 matrix product rate here, GFLOP/s: (2048 x 2048) @ (2048 x 2048)."""
    a = torch.randn(GEMM_SIZE, GEMM_SIZE)
    b = torch.randn(GEMM_SIZE, GEMM_SIZE)
    a @ b  # warm the BLAS threads
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - start)
    return 2 * GEMM_SIZE**3 / best / 1e9


def tensor_bytes(module: torch.nn.Module) -> int:
    tensors = [*module.parameters(), *module.buffers()]
    return sum(t.numel() * t.element_size() for t in tensors)


def t3_step_weight_bytes(t3: torch.nn.Module) -> int:
    """What one decode step reads of T3's weights: the blocks, ln_f and the speech head."""
    return tensor_bytes(t3.tfmr.h) + tensor_bytes(t3.tfmr.ln_f) + tensor_bytes(t3.speech_head)


def t3_cache_bytes_per_position(t3: torch.nn.Module) -> int:
    """Keys and values of one position over every layer (float32, as the caches hold them)."""
    hidden = t3.tfmr.wpe.weight.shape[1]
    return len(t3.tfmr.h) * 2 * hidden * 4


def count_flops(run) -> int:  # noqa: ANN001
    with FlopCounterMode(display=False, custom_mapping=laid_out.flop_formulas()) as counter:
        run()
    return counter.get_total_flops()


def floor(
    weight_bytes: int,
    cache_bytes_per_position: int,
    prompt_positions: int,
    s3gen_flops_per_audio_s: float,
    read_gbps: float,
    gemm_gflops_rate: float,
    streams: int = 1,
    audio_s: float = 10.0,
) -> dict:
    """The floor of `streams` streams of `audio_s` each: seconds per audio second of T3 and of
    S3Gen over all rows, the aggregate (audio seconds per wall second) it allows and each
    stream's RTF (the rows advance together)."""
    tokens = TOKENS_PER_AUDIO_S * audio_s
    mean_positions = prompt_positions + tokens / 2
    step_bytes = weight_bytes + streams * cache_bytes_per_position * mean_positions
    t3 = TOKENS_PER_AUDIO_S * step_bytes / (read_gbps * 1e9)  # wall s per audio s, all rows
    s3gen = streams * s3gen_flops_per_audio_s / (gemm_gflops_rate * 1e9)
    return dict(
        streams=streams,
        t3_s_per_audio_s=t3,
        s3gen_s_per_audio_s=s3gen,
        aggregate=streams / (t3 + s3gen),
        rtf=t3 + s3gen,
    )
