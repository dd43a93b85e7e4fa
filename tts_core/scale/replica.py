"""The engine as a Ray Serve deployment: one replica = one model + its scheduler + its engine.

Imported only with `--replicas` (Ray is the optional extra `scale`). A request carries its
voice (the clip's float32 samples and transcript), so a voice saved on the ingress reaches
every replica. The replica's engine does what a single process does (validation, cadence,
fades), so its chunks, concatenated, are a single process's audio bit for bit; the ingress
only forwards them (tts_core/scale/backend.py).
"""

from __future__ import annotations

import argparse
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
from ray import serve

from ..engine import SynthesisParams, SynthesisRequest


class EngineReplica:
    """Builds the engine in the replica's process (app.build_engine: the same flags)."""

    def __init__(self, args: dict[str, Any]) -> None:
        from app import build_engine  # the composition root's engine, not a copy of it

        self.engine = build_engine(argparse.Namespace(**args), lambda *a, **k: None)
        self.replica_id = serve.get_replica_context().replica_id.unique_id

    def info(self) -> dict[str, Any]:
        import torch

        return {**self.engine.info(), "replica": self.replica_id,
                "torch_threads": torch.get_num_threads(),  # Ray gives a replica 1 by default
                "active_requests": self.engine.active_requests,
                "waiting_requests": self.engine.waiting_requests}  # fmt: skip

    def stream(self, text: str, clip: np.ndarray | None, transcript: str | None,
               language: str, values: dict[str, Any]) -> Iterator[Any]:  # fmt: skip
        """The replica's id first, then each chunk's (N,) float32 audio. Closing the stream
        (the caller cancelled, or went away) cancels the engine's request."""
        cancel = threading.Event()
        reference = None if clip is None else (24_000, clip)
        request = SynthesisRequest(text, reference, transcript, SynthesisParams(language, **values))
        events = self.engine.stream(request, cancel)
        try:
            yield self.replica_id
            for event in events:
                yield event.audio
        finally:
            cancel.set()
            events.close()


def deployment(replicas: int, min_replicas: int | None, max_replicas: int | None,
               gpus: float, max_ongoing: int):  # noqa: ANN201 - a ray.serve Deployment  # fmt: skip
    """EngineReplica with `replicas` copies (or autoscaled between the bounds), each holding
    `gpus` GPUs (1 per replica on a GPU machine; 0 on CPUs)."""
    options: dict[str, Any] = {"ray_actor_options": {"num_gpus": gpus},
                               "max_ongoing_requests": max_ongoing}  # fmt: skip
    if min_replicas is not None or max_replicas is not None:
        low = min_replicas if min_replicas is not None else 1
        options["autoscaling_config"] = {"min_replicas": low, "initial_replicas": replicas,
                                         "max_replicas": max(max_replicas or replicas, low)}  # fmt: skip
    else:
        options["num_replicas"] = replicas
    return serve.deployment(EngineReplica, name="EngineReplica", **options)
