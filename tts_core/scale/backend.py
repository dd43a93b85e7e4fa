"""The ingress's backend: every request streamed from a replica through the deployment handle.

The ingress's own engine admits requests for all replicas together (its admission: replicas x
each one's concurrency run, the rest wait or get 503), adds no fade (the replica's engine
did) and hands each request's chunks on as they come. A replica that dies mid-stream ends
that stream with a BackendError (Ray's actor error); Ray restarts it, and the next request
goes to a live one. A cancelled request cancels the replica's work (its generator is closed).
"""

from __future__ import annotations

import threading
from collections import Counter, deque
from collections.abc import Iterator
from typing import Any

import numpy as np

from ..engine.backend import BackendChunk, SynthesisParams, Voice
from ..engine.capabilities import Capabilities
from ..engine.errors import BackendError, EngineBusy, InputError
from ..engine.requests import ModelVoice


class ReplicaBackend:
    name = "replicas"
    can_clone = True
    device = "ray"

    def __init__(self, handle: Any, info: dict[str, Any], replicas: int) -> None:  # noqa: ANN401
        self.handle = handle
        self.info = info
        self.model_name = str(info["model"])
        self.sample_rate = int(info["sample_rate"])
        self.frame_samples = round(info["frame_ms"] * self.sample_rate / 1000)
        self.needs_reference = bool(info["needs_reference"])
        self.description = f"{info['description']} ({replicas} replicas on Ray Serve)"
        self.default_concurrency = int(info["max_concurrent"]) * replicas
        self.knobs = _knobs_of(str(info["backend"]))
        self.weight_format = info["weight_format"]  # the replicas' (each loads the same)
        self.weight_format_reason = info["weight_format_reason"]
        self.decode_step = info["decode_step"]
        self.torch_threads = info.get("torch_threads")  # each replica's (GET /v1/models)
        # what the replicas' checkpoint does (#41): a CustomVoice / VoiceDesign model speaks
        # with voices it makes itself; the replica's engine builds (and checks) them
        self.task_type = str(info.get("task_type", "Base"))
        self.speakers = tuple(info.get("speakers", ()))
        self.instruct_supported = bool(info.get("instruct_supported", False))
        # the served backend's language use and checkpoint type; text in pieces reaches a
        # replica whole
        self.capabilities = Capabilities(
            reads_language=bool(info["reads_language"]),
            task_type=self.task_type,
            speakers=self.speakers,
        )
        if self.task_type != "Base":
            self.can_clone = False
        self.served_by: Counter[str] = Counter()  # replica id -> requests it answered
        # (replica id, text) of the last requests, in the order their replicas started them
        self.history: deque[tuple[str, str]] = deque(maxlen=256)
        self._lock = threading.Lock()

    def replicas(self) -> dict[str, Any]:
        """The replicas' states as Ray Serve reports them ({"RUNNING": 2, ...}) and how many
        requests each one answered here."""
        from ray import serve

        from . import APP_NAME

        deployments = serve.status().applications[APP_NAME].deployments
        states = {
            name: {str(k): v for k, v in d.replica_states.items()}
            for name, d in deployments.items()
        }
        with self._lock:
            return {"states": states, "served": dict(self.served_by)}

    def sampling_defaults(self) -> dict[str, Any]:
        return dict(self.info.get("sampling_defaults") or {})

    def create_voice(self, audio: np.ndarray | None, reference_text: str | None) -> Voice:
        """The clip travels with each request: every replica can speak with it."""
        return Voice(self.name, (audio, reference_text), {"transcript": bool(reference_text)})

    def model_voice(self, spec: ModelVoice) -> Voice:
        """The preset / description travels with each request; the replica's engine builds
        the voice (its refusals come back as the replica's own InputError)."""
        return Voice(self.name, spec, {"speaker": spec.speaker, "instruct": bool(spec.instruct)})

    def stream(
        self, text: str, voice: Voice, params: SynthesisParams, cancel: threading.Event
    ) -> Iterator[BackendChunk]:
        if isinstance(voice.data, ModelVoice):
            clip, transcript, model_voice = None, None, voice.data
        else:
            (clip, transcript), model_voice = voice.data, None
        call = self.handle.options(stream=True).stream
        pieces = call.remote(
            text, clip, transcript, params.language, dict(params.values), model_voice
        )
        try:
            replica = next(pieces)
            with self._lock:
                self.served_by[replica] += 1
                self.history.append((replica, text))
            for audio in pieces:
                yield BackendChunk(audio)
                if cancel.is_set():
                    return
        except Exception as exc:
            cause = getattr(exc, "cause", None)  # RayTaskError: what the replica raised
            if isinstance(cause, InputError | BackendError | EngineBusy):
                raise cause from None  # the replica's own words, as a single process says them
            if type(exc).__module__.startswith("ray"):  # RayActorError, TaskCancelledError...
                raise BackendError(
                    f"The replica serving this request failed "
                    f"({type(exc).__name__}); please try again."
                ) from exc
            raise
        finally:
            pieces.cancel()


def _knobs_of(backend: str) -> tuple:
    from ..backends import backend_classes

    return next((tuple(cls.knobs) for cls in backend_classes() if cls.name == backend), ())
