"""The engine as a Ray Serve deployment: one replica = one model + its scheduler + its engine.

Imported only with `--replicas` (Ray is the optional extra `scale`). A request carries its
voice (the clip's float32 samples and transcript), so a voice saved on the ingress reaches
every replica. The replica's engine does what a single process does (validation, cadence,
fades), so its chunks, concatenated, are a single process's audio bit for bit; the ingress
only forwards them (tts_core/scale/backend.py). Bit for bit takes the same torch thread count
(a float sum's order follows it): Ray starts an actor with OMP_NUM_THREADS=1, so a replica is
started with the ingress's count instead (`deployment(torch_threads=)`), which /v1/models
shows as `torch_threads`. Several CPU replicas on one machine then share its cores.
"""

from __future__ import annotations

import argparse
import importlib
import threading
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any

import numpy as np
from ray import serve

from ..engine import SynthesisParams, SynthesisRequest
from ..engine.awaiting import iterate_awaiting, run_awaiting
from ..engine.requests import ModelVoice


class EngineReplica:
    """Builds the engine in the replica's process with the builder the composition root names
    ("module:function", app.py's build_engine: the same flags, not a copy of it)."""

    def __init__(self, args: dict[str, Any], builder: str) -> None:
        import torch

        module, _, name = builder.partition(":")
        build_engine = getattr(importlib.import_module(module), name)
        args = dict(args)
        threads = args.pop("torch_threads", None)
        if threads and torch.get_num_threads() != threads:  # OMP_NUM_THREADS not honoured
            torch.set_num_threads(threads)
        self.engine = build_engine(argparse.Namespace(**args), lambda *a, **k: None)
        self.replica_id = serve.get_replica_context().replica_id.unique_id

    def info(self) -> dict[str, Any]:
        import torch

        return {
            **self.engine.info(),
            "replica": self.replica_id,
            "torch_threads": torch.get_num_threads(),  # the ingress's (see the docstring)
            "active_requests": self.engine.active_requests,
            "waiting_requests": self.engine.waiting_requests,
        }

    async def stream(
        self,
        text: str,
        clip: np.ndarray | None,
        transcript: str | None,
        language: str,
        values: dict[str, Any],
        model_voice: ModelVoice | None = None,
    ) -> AsyncIterator[Any]:
        """The replica's id first, then each chunk's (N,) float32 audio. Cancelling the stream
        (the caller cancelled, or went away) cancels the engine's request at once. An async
        generator, its waits awaited on the replica's loop (engine/awaiting.py): Serve cancels
        one at its await, while a sync generator runs on in Serve's thread to its end, keeping
        the replica's engine busy for nobody. `model_voice`: a preset / designed voice
        (Qwen3-TTS CustomVoice / VoiceDesign) in place of a clip."""
        cancel = threading.Event()
        reference = None if clip is None else (24_000, clip)
        params = SynthesisParams(language, **values)
        request = SynthesisRequest(text, reference, transcript, params, model_voice)
        events = await run_awaiting(self.engine.stream, request, cancel)
        try:
            yield self.replica_id
            async with aclosing(iterate_awaiting(events)) as awaited:
                async for event in awaited:
                    yield event.audio
        finally:
            cancel.set()
            events.close()


def deployment(
    replicas: int,
    min_replicas: int | None,
    max_replicas: int | None,
    gpus: float,
    max_ongoing: int,
    torch_threads: int | None = None,
):  # noqa: ANN201 - a ray.serve Deployment
    """EngineReplica with `replicas` copies (or autoscaled between the bounds), each holding
    `gpus` GPUs (1 per replica on a GPU machine; 0 on CPUs) and started with `torch_threads`
    OpenMP threads (None: Ray's default, 1)."""
    actor: dict[str, Any] = {"num_gpus": gpus}
    if torch_threads:
        count = str(torch_threads)
        actor["runtime_env"] = {"env_vars": {"OMP_NUM_THREADS": count, "MKL_NUM_THREADS": count}}
    options: dict[str, Any] = {"ray_actor_options": actor, "max_ongoing_requests": max_ongoing}
    if min_replicas is not None or max_replicas is not None:
        low = min_replicas if min_replicas is not None else 1
        options["autoscaling_config"] = {
            "min_replicas": low,
            "initial_replicas": replicas,
            "max_replicas": max(max_replicas or replicas, low),
        }
    else:
        options["num_replicas"] = replicas
    return serve.deployment(EngineReplica, name="EngineReplica", **options)
