"""Qwen3-TTS on the one decode engine (tts_core/serving, nano-vllm's engine/ shape): its
request (sequence.py), caches and batched calls (kv_arena.py, model_runner.py), decode step
(engine.py: Qwen3Runner); served many streams at once by the Scheduler's thread, or one stream
on the caller's thread (`model.stream`, `run_alone`)."""

from ....serving.engine import BatchEngine
from .engine import run_alone
from .scheduler import Scheduler, SequenceStream

__all__ = ["BatchEngine", "Scheduler", "SequenceStream", "run_alone"]
