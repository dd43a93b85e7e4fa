"""A seed's bytes follow the torch thread count (a float sum's order follows it): Ray started
each replica with 1 thread while a single process runs with its default (2 here), so the same
seed gave other bytes under --replicas (issue #37). Replicas now start with the ingress's count,
and GET /v1/models says the count. No Ray cluster here: the deployment's options are checked
as built (tests/test_replicas.py runs the replicas themselves, marked `replicas`).
"""

from __future__ import annotations

import httpx
import pytest
import torch
from test_openai_api import RecordingEngine, make_api, serve


def test_replicas_start_with_this_processes_thread_count() -> None:
    pytest.importorskip("ray.serve")
    from tts_core.scale.replica import deployment

    threads = torch.get_num_threads()
    built = deployment(2, None, None, 0, 8, torch_threads=threads)
    env = built.ray_actor_options["runtime_env"]["env_vars"]
    assert env["OMP_NUM_THREADS"] == env["MKL_NUM_THREADS"] == str(threads)


def test_replica_engine_deploys_with_this_processes_thread_count(monkeypatch) -> None:
    """replica_engine (Ray and Serve's calls faked: no cluster) deploys replicas started with
    torch.get_num_threads() and hands them the count."""
    from types import SimpleNamespace

    ray = pytest.importorskip("ray")
    from ray import serve

    import app
    import tts_core.scale.replica as replica_module
    from tts_core import scale

    built, bound = [], []
    real = replica_module.deployment

    def capture(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        built.append(real(*args, **kwargs))
        return SimpleNamespace(bind=lambda replica_args, build: bound.append(replica_args))

    info = {
        "model": "m",
        "sample_rate": 24000,
        "frame_ms": 80.0,
        "needs_reference": False,
        "description": "",
        "max_concurrent": 1,
        "backend": "espeak",
        "torch_threads": 3,
        "reads_language": True,
        "weight_format": "float32",
        "weight_format_reason": "",
        "decode_step": None,
    }
    handle = SimpleNamespace(
        info=SimpleNamespace(remote=lambda: SimpleNamespace(result=lambda: info))
    )
    monkeypatch.setattr(replica_module, "deployment", capture)
    monkeypatch.setattr(ray, "is_initialized", lambda: True)
    monkeypatch.setattr(ray, "cluster_resources", lambda: {})
    monkeypatch.setattr(serve, "start", lambda **kwargs: None)
    monkeypatch.setattr(serve, "run", lambda application, **kwargs: handle)
    args = app.parse_args(["--model", "espeak", "--replicas", "2"])
    engine = scale.replica_engine(args, "app:build_engine")
    threads = str(torch.get_num_threads())
    assert built[0].ray_actor_options["runtime_env"]["env_vars"]["OMP_NUM_THREADS"] == threads
    assert bound[0]["torch_threads"] == torch.get_num_threads()
    assert engine.backend.torch_threads == 3  # what the replicas say they run with


def test_models_lists_the_torch_thread_count(espeak_backend, tmp_path) -> None:
    with serve(make_api(RecordingEngine(espeak_backend), tmp_path)) as url:
        info = httpx.get(f"{url}/v1/models", timeout=30).json()["data"][-1]["info"]
    assert info["torch_threads"] == torch.get_num_threads()
