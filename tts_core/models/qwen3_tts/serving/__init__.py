"""Serving many Qwen3-TTS streams at once (continuous batching): sequence -> scheduler ->
model runner, the shape of nano-vllm's engine/."""

from .scheduler import Scheduler, SequenceStream

__all__ = ["Scheduler", "SequenceStream"]
