"""CUDA-graph replay of the static decode steps (moshi `CUDAGraphed` style), opt-in.

Only used when the model is on a CUDA device and its decode mode is "cuda_graphs"
(`load_model(..., cuda_graphs=True)` or `model.set_decode_mode("cuda_graphs")`).
`TTS_NO_CUDA_GRAPH=1` in the environment turns it off. Any capture error gives a warning and
the eager path, with the same results. Nothing here touches CUDA at import time.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from typing import Any

import torch

DISABLE_ENV = "TTS_NO_CUDA_GRAPH"
WARMUP_STEPS = 2

# capture(fn, static_inputs, warmup_steps) -> (graph with .replay(), static outputs)
Capture = Callable[[Callable, tuple[torch.Tensor, ...], int], tuple[Any, Any]]


def disabled_by_env() -> bool:
    return os.environ.get(DISABLE_ENV, "").strip() not in ("", "0", "false", "False")


def unavailable_reason(device: torch.device) -> str | None:
    """Why CUDA graphs cannot be used for weights on `device` (None = they can be tried)."""
    if disabled_by_env():
        return f"{DISABLE_ENV} is set"
    if device.type != "cuda":
        return f"the model is on {device.type}, CUDA graphs need a CUDA device"
    return None


def capture_cuda_graph(
    fn: Callable, inputs: tuple[torch.Tensor, ...], warmup_steps: int
) -> tuple[Any, Any]:
    """Warm `fn` up on a side stream (as the PyTorch docs require), then capture one call.

    The decode steps write K/V at the position held in `inputs`, so the warm-up calls (run for
    real, with the same inputs) rewrite the same values: they are harmless.
    """
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(warmup_steps):
            fn(*inputs)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    # thread_local: a request decoding eagerly in another thread meanwhile is not disturbed.
    with torch.cuda.graph(graph, capture_error_mode="thread_local"):
        outputs = fn(*inputs)
    return graph, outputs


class GraphedCallable:
    """Wraps fn(*tensors) -> tensor or tuple of tensors with fixed shapes.

    The first call captures a graph over static copies of its inputs; later calls copy their
    inputs in and replay. Returned tensors are the graph's static outputs: read (or clone) them
    before the next call. If capture fails, a warning is given and `fn` runs eagerly for good
    (`failed` is then True). The graph lives as long as this object (one per request).
    """

    def __init__(
        self, fn: Callable, capture: Capture = capture_cuda_graph, warmup_steps: int = WARMUP_STEPS
    ) -> None:
        self.fn = fn
        self.capture = capture
        self.warmup_steps = warmup_steps
        self.failed = False
        self.graph: Any = None
        self.inputs: tuple[torch.Tensor, ...] = ()
        self.outputs: Any = None

    def __call__(self, *args: torch.Tensor) -> Any:
        if self.failed:
            return self.fn(*args)
        if self.graph is None:
            try:
                self.inputs = tuple(arg.clone() for arg in args)
                self.graph, self.outputs = self.capture(self.fn, self.inputs, self.warmup_steps)
            except Exception as error:  # any capture problem means "decode eagerly"
                self.release()
                self.failed = True
                warnings.warn(
                    f"CUDA graph capture failed, decoding eagerly instead ({error!r}); "
                    f"set {DISABLE_ENV}=1 to skip the attempt",
                    RuntimeWarning,
                    stacklevel=2,
                )
                return self.fn(*args)
        for static, arg in zip(self.inputs, args, strict=True):
            static.copy_(arg)
        self.graph.replay()
        return self.outputs

    def release(self) -> None:
        self.graph, self.inputs, self.outputs = None, (), None
