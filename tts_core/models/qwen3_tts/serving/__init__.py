"""The one Qwen3-TTS decode engine (nano-vllm's engine/ shape): sequence -> model runner ->
engine step; served many streams at once by the Scheduler's thread, or one stream on the
caller's thread (`model.stream`, `run_alone`)."""

from .engine import BatchEngine, run_alone
from .scheduler import Scheduler, SequenceStream

__all__ = ["BatchEngine", "Scheduler", "SequenceStream", "run_alone"]
