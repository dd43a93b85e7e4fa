"""The one decode engine every neural model runs on (nano-vllm's engine/ shape), model-agnostic.

* sequence.py `Sequence`: the books the engine keeps of every request (cadence, frame limit,
              pending frames, stop, outbox); a model's row subclasses it
* batch.py    `BatchEngine`: one step = drop stopped -> admit -> one prefill chunk -> one
              decode step of the rows; `StepModel`: what a model implements to plug in
* loop.py     `EngineLoop`: the engine stepped on its own thread for a served model, `call`
              for the model's other work on that thread; `RequestStream` for the consumer
* alone.py    `run_alone`: a private one-row engine stepped by the caller's `next()`
              (`model.stream`); `InlineOutbox`

Models plug in from above (this package imports none of them): each offers `runner(max_batch)`
(its StepModel) and `request(...)`, served by `EngineLoop(model.runner(n),
make_request=model.request)` and stepped alone by `run_alone` for `model.stream`: Qwen3-TTS
(models/qwen3_tts/serving/runner.py), VoxCPM2, Chatterbox Turbo and English, TADA (their
runner.py).
"""

from .alone import InlineOutbox, run_alone
from .batch import DEFAULT_PREFILL_CHUNK, FIRST_CHUNK_PRIORITY_FRAMES, BatchEngine, StepModel
from .loop import EngineLoop, RequestStream
from .sequence import Sequence, Status

__all__ = [
    "DEFAULT_PREFILL_CHUNK",
    "FIRST_CHUNK_PRIORITY_FRAMES",
    "BatchEngine",
    "EngineLoop",
    "InlineOutbox",
    "Sequence",
    "RequestStream",
    "Status",
    "StepModel",
    "run_alone",
]
