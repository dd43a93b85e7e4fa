"""The one decode engine every neural model runs on (nano-vllm's engine/ shape), model-agnostic:
sequence.py (`Sequence`, the books of a request), batch.py (`BatchEngine`, one step; `StepModel`,
what a model implements), loop.py (`EngineLoop`: the engine on its own thread for a served
model), alone.py (`run_alone`: one row on the caller's thread, for `model.stream`).

Models plug in from above (this package imports none of them): each offers `runner(max_batch)`
(its StepModel) and `request(...)`, served by `EngineLoop(model.runner(n),
make_request=model.request)` and stepped alone by `run_alone` for `model.stream`.
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
