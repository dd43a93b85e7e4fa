"""The operators, bits and time of one Chatterbox Turbo T3 decode step (issue 38, item 5).

    .venv/bin/python benchmarks/chatterbox_step_ops.py count
    .venv/bin/python benchmarks/chatterbox_step_ops.py digest
    .venv/bin/python benchmarks/chatterbox_step_ops.py time [--steps 80]
    .venv/bin/python benchmarks/chatterbox_step_ops.py prefill [--steps 80]
    .venv/bin/python benchmarks/chatterbox_step_ops.py first-audio --base /tmp/base [--steps 80]

Drives `T3Turbo.draws` directly (the call `model.stream` makes per token) on
`--folder` (default: the real-size random Turbo, int8 as `auto` leaves it) in the bundled voice:
* count: torch.profiler over one draw (feed + speech head + sampling + draw): aten operators by
  name; `calls` are the ones called from Python (no aten parent), `all` includes their children
  (deterministic: countable on a busy machine).
* digest: sha256 of every draw's speech-head logits and token, a greedy run (top_k 1) and a
  sampled run (the defaults, seed 0): two versions that keep every bit print the same digests.
* time: the median ms of a draw over `--steps` draws after 8, beside its byte floor (the weights
  a step reads, benchmarks/chatterbox_floor.py, at the read rate benchmarks/membw.py measures),
  and the median CPU time of the calling thread (`--threads 1`: all of the step's work, which
  time slices lost to other processes do not inflate: the A/B figure on a busy machine).
* first-audio: a stream's first chunk (`model.stream`) with this GPT-2 code and `--base`'s
  (e.g. `git archive <commit> | tar -x -C /tmp/base`), alternated in one process.
* prefill: a request's first draw with its caches as made (not zeroed) and zeroed as before,
  alternated in one process (`--steps` / 8 rounds, 1,000-draw requests as served).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))
TEXT = "The quick brown fox jumps over the lazy dog, and then it asks whether we are there yet."


def load(folder: str, threads: int):  # noqa: ANN201
    import torch

    import tts_core

    torch.set_num_threads(threads)
    model = tts_core.load_model(folder, quantize="auto")
    return model, model.builtin_voice


def draws(model, voice, sampling, seed: int, steps: int):  # noqa: ANN001, ANN201
    import torch

    inputs = (voice.speaker_emb, voice.t3_prompt_tokens, model.text_ids(TEXT), sampling)
    generator = torch.Generator().manual_seed(seed)
    return model.t3.draws(*inputs, generator, steps)


def count(model, voice, at: int = 20) -> dict:
    from torch.profiler import ProfilerActivity, profile

    from tts_core.models.chatterbox.sampling import TurboSampling

    stream = draws(model, voice, TurboSampling(), 0, at + 2)
    for _ in range(at):
        next(stream)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        next(stream)
    stream.close()
    events = [e for e in prof.events() if e.device_type.name == "CPU"]
    calls = Counter(e.name for e in events if e.cpu_parent is None)
    return {"calls": sum(calls.values()), "all": len(events), "by_name": dict(calls.most_common())}


def digest(model, voice, steps: int = 60) -> dict:
    from tts_core.models.chatterbox.sampling import TurboSampling

    out = {}
    for name, sampling in (("greedy", TurboSampling(top_k=1)), ("sampled", TurboSampling())):
        sha, seen = hashlib.sha256(), []
        hook = model.t3.speech_head.register_forward_hook(
            lambda _m, _i, logits, sha=sha: sha.update(logits.float().numpy().tobytes())
        )
        try:
            for token in draws(model, voice, sampling, 0, steps):
                seen.append(int(token))
        finally:
            hook.remove()
        sha.update(repr(seen).encode())
        out[name] = {"tokens": len(seen), "sha256": sha.hexdigest()[:16]}
    return out


def timed(model, voice, steps: int) -> dict:
    from chatterbox_floor import t3_step_weight_bytes
    from membw import measure_read_bandwidth

    from tts_core.models.chatterbox.sampling import TurboSampling

    stream, times, cpu = draws(model, voice, TurboSampling(), 0, steps + 10), [], []
    for index in range(steps + 8):
        start, start_cpu = time.perf_counter(), time.thread_time()
        next(stream)
        if index >= 8:
            times.append(time.perf_counter() - start)
            cpu.append(time.thread_time() - start_cpu)
    stream.close()
    weight_bytes = t3_step_weight_bytes(model.t3)
    read_gbps = measure_read_bandwidth(size_mb=512, repeats=5)
    floor_ms = weight_bytes / (read_gbps * 1e9) * 1e3
    step_ms = statistics.median(times) * 1e3
    return {
        "step_ms": round(step_ms, 2),
        "step_cpu_ms": round(statistics.median(cpu) * 1e3, 2),
        "floor_ms": round(floor_ms, 2),
        "ratio": round(step_ms / floor_ms, 2),
        "weight_mb": round(weight_bytes / 1e6, 1),
        "read_gbps": round(read_gbps, 1),
    }


def prefill(model, voice, rounds: int) -> dict:
    """The first draw (prefill + draw, the start of every request's first audio) with the
    caches as made now and zeroed as before, alternated in this process: ms, min and median."""
    import torch

    from tts_core.models.chatterbox import gpt2
    from tts_core.models.chatterbox.sampling import TurboSampling

    made = gpt2.FusedKV.__init__

    def zeroed(cache, *args, **kwargs) -> None:  # noqa: ANN001, ANN002, ANN003
        made(cache, *args, **kwargs)
        cache.kv.zero_()

    times: dict[str, list[float]] = {"as made": [], "zeroed": []}
    next(draws(model, voice, TurboSampling(), 0, 1000))  # the voice prefix, once
    for _ in range(rounds):
        for name, init in (("zeroed", zeroed), ("as made", made)):
            gpt2.FusedKV.__init__ = init
            try:
                start = time.perf_counter()
                stream = draws(model, voice, TurboSampling(), 0, 1000)
                next(stream)
                times[name].append(time.perf_counter() - start)
                stream.close()
                del stream
            finally:
                gpt2.FusedKV.__init__ = made
    return {
        name: {"min_ms": round(min(v) * 1e3, 1), "median_ms": round(statistics.median(v) * 1e3, 1)}
        for name, v in times.items()
    } | {"threads": torch.get_num_threads()}


def base_gpt2(tree: Path):  # noqa: ANN201 - a module
    """`tree`'s tts_core/models/chatterbox/gpt2.py as a module beside ours (its relative imports
    resolve in this tts_core: only the GPT-2 code differs)."""
    import importlib.util

    path = tree / "tts_core/models/chatterbox/gpt2.py"
    spec = importlib.util.spec_from_file_location("tts_core.models.chatterbox.gpt2_base", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def first_audio(model, voice, rounds: int, base: Path) -> dict:
    """Seconds to a stream's first chunk (model.stream, the default schedule: prefill, 12
    draws, the first S3Gen pass) with this GPT-2 code and `base`'s (its forwards swapped in),
    alternated in this process; min and median."""
    from tts_core.models.chatterbox import gpt2

    old, names = base_gpt2(base), ("GPT2Attention", "GPT2MLP", "GPT2Stack")
    ours = {name: dict(vars(getattr(gpt2, name))) for name in names}
    swapped = {name: dict(vars(getattr(old, name))) for name in names}

    def use(methods: dict) -> None:
        for name, members in methods.items():
            for key, value in members.items():
                if callable(value) or isinstance(value, staticmethod):
                    setattr(getattr(gpt2, name), key, value)

    times: dict[str, list[float]] = {"ours": [], "base": []}
    list(model.stream("Hello there.", voice, seed=1, max_new_tokens=20))  # warm
    try:
        for index in range(rounds):
            for name, methods in (("base", swapped), ("ours", ours)):
                use(methods)
                start = time.perf_counter()
                stream = model.stream(TEXT, voice, seed=index, max_new_tokens=60)
                next(stream)
                times[name].append(time.perf_counter() - start)
                stream.close()
    finally:
        use(ours)
    return {
        name: {"min_s": round(min(v), 3), "median_s": round(statistics.median(v), 3)}
        for name, v in times.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("mode", choices=("count", "digest", "time", "prefill", "first-audio"))
    parser.add_argument("--base", type=Path, help="first-audio: the tree whose GPT-2 to compare")
    parser.add_argument("--folder", default="/tmp/chatterbox-turbo-real-random")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--steps", type=int, default=80)
    args = parser.parse_args()
    model, voice = load(args.folder, args.threads)
    if args.mode == "count":
        result = count(model, voice)
    elif args.mode == "first-audio":
        result = first_audio(model, voice, args.steps // 8, args.base)
    elif args.mode == "prefill":
        result = prefill(model, voice, args.steps // 8)
    elif args.mode == "digest":
        result = digest(model, voice)
    else:
        result = timed(model, voice, args.steps)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
