"""Engine replicas on Ray Serve (`python app.py --replicas N`); optional extra `scale`.

`replica_engine(args, builder)` starts (or joins, `--ray-address`) a Ray cluster, deploys the
engine as `--replicas` replicas (autoscaled between `--min-replicas` and `--max-replicas` when
given), one GPU each where there are GPUs, and returns the ingress's Engine: the page,
gradio_client, the PCM route and /v1 in front of them, unchanged (ReplicaBackend). Each replica
builds its engine with `builder`, which the composition root names ("app:build_engine"), so
nothing here imports app.py. Nothing here is imported without `--replicas`.
"""

from __future__ import annotations

import argparse
import os
import queue
import threading
from typing import Any

APP_NAME = "tts"  # the Serve application holding the replicas


def replica_engine(args: argparse.Namespace, builder: str, address: str | None = None) -> Any:  # noqa: ANN401
    """The ingress's Engine over `args.replicas` EngineReplica deployments (Ray started or
    joined here), each built in its own process by `builder` ("module:function", importable
    there: the composition root's build_engine(args, report))."""
    import ray
    import torch
    from ray import serve

    from ..engine import Engine, EngineConfig, Limits
    from .backend import ReplicaBackend
    from .replica import deployment

    if not ray.is_initialized():
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env = {"env_vars": {"PYTHONPATH": root}}  # the replicas import the builder
        _init_on_lasting_thread(address=address or args.ray_address, runtime_env=env)
    serve.start(proxy_location="Disabled")  # no HTTP of Ray's own: this process is the ingress
    gpus = 1 if ray.cluster_resources().get("GPU", 0) >= 1 and args.device != "cpu" else 0
    replica_args = {k: v for k, v in vars(args).items() if _plain(v)}
    # a single process's torch threads, so a seed gives the same bytes (replica.py)
    threads = torch.get_num_threads()
    replica_args.update(replicas=None, wait_for_model=True, torch_threads=threads)
    per_replica = args.max_concurrent or args.max_batch or 8
    app = deployment(
        args.replicas, args.min_replicas, args.max_replicas, gpus, per_replica, threads
    )
    handle = serve.run(app.bind(replica_args, builder), name=APP_NAME, route_prefix=None)
    info = handle.info.remote().result()
    backend = ReplicaBackend(handle, info, args.max_replicas or args.replicas)
    limits = Limits(max_chars=args.max_chars, max_reference_s=args.max_reference_seconds)
    config = EngineConfig(
        limits=limits,
        fade_ms=0.0,
        crossfade_ms=0.0,  # done by the replica
        max_queue=args.queue_size,
    )
    return Engine(backend, config)


def _init_on_lasting_thread(**options: Any) -> None:
    """ray.init on a thread that lives as long as the process. A local cluster's processes
    (gcs_server, raylet) are started with PR_SET_PDEATHSIG, which Linux fires when the *thread*
    that started them ends: started from the model-loading thread, they were killed as soon as
    loading finished."""
    import ray

    outcome: queue.Queue[BaseException | None] = queue.Queue()

    def parent() -> None:
        try:
            ray.init(**options)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            outcome.put(exc)
            return
        outcome.put(None)
        threading.Event().wait()  # never set: this thread is the cluster's parent

    threading.Thread(target=parent, name="ray-parent", daemon=True).start()
    failure = outcome.get()
    if failure is not None:
        raise failure


def _plain(value: object) -> bool:
    return value is None or isinstance(value, str | int | float | bool)
