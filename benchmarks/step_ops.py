"""The operators and the time of one talker step and one code-predictor pass (issue 38, item 3).

    .venv/bin/python benchmarks/step_ops.py --checkpoint /tmp/qwen3-0.6B-random count
    .venv/bin/python benchmarks/step_ops.py --checkpoint /tmp/qwen3-0.6B-random digest
    .venv/bin/python benchmarks/step_ops.py --checkpoint /tmp/qwen3-0.6B-random ab \
        --base /tmp/cp-ops-base --rounds 8

Streams `--frames` frames through `model.stream` (int8, EOS suppressed, as engine_bench.py), greedy
and sampled (seed 0), and wraps `Qwen3Runner.talker_step` and `code_predictor.predict` (no engine
code is changed):
* count: torch.profiler over one talker step and one frame's 15 passes; aten operators by name
  per step and per pass (deterministic: they can be counted on a busy machine). `calls` are the
  operators called from Python (no aten parent), `all` includes the ones they call.
* digest: sha256 of every step's hidden state and logits and every frame's codes: two versions
  of the code that keep every bit print the same digests.
* time: the median ms of a talker step and of a frame's passes over `--clips` clips (one JSON line).
* ab: `time` in alternating processes, `--base` (an old tts_core, e.g. `git archive main | tar -x
  -C /tmp/cp-ops-base`) and this checkout, in ABBA order; the ratio of the medians, load average.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

PASSES = 15  # code-predictor passes a frame (0.6B and 1.7B)


def load(checkpoint: Path, threads: int):  # noqa: ANN201
    import soundfile as sf
    import torch
    from common import REF_CLIP, REF_TEXT
    from engine_bench import suppress_eos

    import tts_core

    torch.set_num_threads(threads)
    model = tts_core.load_model(checkpoint, quantize="int8", decoder_dtype=torch.float32)
    suppress_eos(model)
    ref, rate = sf.read(REF_CLIP, dtype="float32")
    return model, model.create_voice(ref, rate, ref_text=REF_TEXT)


def stream(model, voice, frames: int, greedy: bool, audio=None) -> None:  # noqa: ANN001
    """One clip of `frames` frames in one chunk; audio(chunk.audio) on each chunk if given."""
    from common import LANGUAGE, TEXT

    for chunk in model.stream(
        TEXT,
        voice,
        language=LANGUAGE,
        greedy=greedy,
        seed=None if greedy else 0,
        max_new_tokens=frames + 1,
        first_chunk_frames=frames,
        chunk_frames=frames,
        length_cap=False,
    ):
        if audio is not None:
            audio(chunk.audio)


class Hook:
    """Wraps owner.name: `before(args)` and `after(args, result)` around every call."""

    def __init__(self, owner: object, name: str, before=None, after=None) -> None:  # noqa: ANN001
        self.owner, self.name, self.inner = owner, name, getattr(owner, name)
        inner = self.inner

        def call(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
            state = before(args) if before else None
            result = inner(*args, **kwargs)
            if after:
                after(args, result, state)
            return result

        setattr(owner, name, call)

    def remove(self) -> None:
        setattr(self.owner, self.name, self.inner)


def runner_class():  # noqa: ANN201
    from tts_core.models.qwen3_tts.serving.runner import Qwen3Runner

    return Qwen3Runner


# ---------------------------------------------------------------- count
def profiled(which: int, sink: dict, key: str):  # noqa: ANN201
    """before/after hooks that profile the `which`-th call and store its op counts in sink[key]."""
    from torch.profiler import ProfilerActivity, profile

    seen = {"calls": 0}

    def before(args):  # noqa: ANN001, ANN202
        seen["calls"] += 1
        if seen["calls"] != which:
            return None
        prof = profile(activities=[ProfilerActivity.CPU])
        prof.__enter__()
        return prof

    def after(args, result, prof) -> None:  # noqa: ANN001
        if prof is None:
            return
        prof.__exit__(None, None, None)
        events = [e for e in prof.events() if e.device_type.name == "CPU"]
        sink[key] = {
            "all": Counter(e.name for e in events),
            "calls": Counter(e.name for e in events if e.cpu_parent is None),
        }

    return before, after


def count(args: argparse.Namespace) -> dict:
    model, voice = load(args.checkpoint, args.threads)
    results = {}
    for greedy in (True, False):
        sink: dict = {}
        hooks = [
            Hook(runner_class(), "talker_step", *profiled(3, sink, "talker_step")),
            Hook(model.talker.code_predictor, "predict", *profiled(3, sink, "frame_passes")),
        ]
        stream(model, voice, 6, greedy)
        for hook in hooks:
            hook.remove()
        results["greedy" if greedy else "sampled"] = sink
    for mode, sink in results.items():
        for part, counts in sink.items():
            per = PASSES if part == "frame_passes" else 1
            label = "per pass" if per > 1 else "per step"
            print(
                f"\n{mode} {part}: {sum(counts['calls'].values()) / per:.1f} calls from Python, "
                f"{sum(counts['all'].values()) / per:.1f} operators in all, {label}"
            )
            for name, n in counts["calls"].most_common(args.rows):
                print(f"  {n / per:7.2f}  {name}")
    return {
        mode: {part: {k: dict(v) for k, v in c.items()} for part, c in sink.items()}
        for mode, sink in results.items()
    }


# ---------------------------------------------------------------- digest
def record_clip(model, voice, frames: int, greedy: bool) -> dict[str, list]:  # noqa: ANN001
    """Every talker step's hidden and logits, every frame's codes and the audio of one clip."""
    seen: dict[str, list] = {"hidden": [], "logits": [], "codes": [], "audio": []}

    def after_step(call_args, result, state) -> None:  # noqa: ANN001
        for seq in call_args[1]:
            seen["hidden"].append(seq.hidden.clone())
            seen["logits"].append(seq.logits.clone())

    hooks = [
        Hook(runner_class(), "talker_step", after=after_step),
        Hook(model.talker.code_predictor, "predict", after=lambda a, c, s: seen["codes"].append(c)),
    ]
    stream(model, voice, frames, greedy, audio=seen["audio"].append)
    for hook in hooks:
        hook.remove()
    return seen


def digest(args: argparse.Namespace) -> dict:
    """sha256 per clip and per kind of output; --dump: the outputs themselves (torch.save)."""
    model, voice = load(args.checkpoint, args.threads)
    clips = {
        mode: record_clip(model, voice, args.frames, mode == "greedy")
        for mode in ("greedy", "sampled")
    }
    if args.dump:
        import torch

        torch.save(clips, args.dump)
    out = {}
    for mode, seen in clips.items():
        for kind, values in seen.items():
            sha = hashlib.sha256()
            for value in values:
                sha.update((value if hasattr(value, "tobytes") else value.numpy()).tobytes())
            out[f"{mode} {kind}"] = sha.hexdigest()[:16]
    print(json.dumps(out))
    return out


# ---------------------------------------------------------------- time
def timed(times: list[float]):  # noqa: ANN201
    def before(args) -> float:  # noqa: ANN001
        return time.perf_counter()

    def after(args, result, start: float) -> None:  # noqa: ANN001
        times.append(time.perf_counter() - start)

    return before, after


def time_steps(args: argparse.Namespace) -> dict:
    model, voice = load(args.checkpoint, args.threads)
    step, passes = [], []
    stream(model, voice, 4, args.greedy)  # warm-up
    hooks = [
        Hook(runner_class(), "talker_step", *timed(step)),
        Hook(model.talker.code_predictor, "predict", *timed(passes)),
    ]
    for _ in range(args.clips):
        stream(model, voice, args.frames, args.greedy)
    for hook in hooks:
        hook.remove()
    result = {
        "talker_step_ms": 1000 * statistics.median(step),
        "frame_passes_ms": 1000 * statistics.median(passes),
    }
    print(json.dumps(result))
    return result


def ab(args: argparse.Namespace) -> dict:
    """`time` in alternating processes (ABBA): --base's tts_core, then this checkout's."""
    here = Path(__file__).resolve()
    trees = {"base": str(args.base), "new": str(here.parents[1])}
    samples: dict[str, list[dict]] = {"base": [], "new": []}
    loads = []
    for round_ in range(args.rounds):
        order = ("base", "new") if round_ % 2 == 0 else ("new", "base")
        for side in order:
            env = {**os.environ, "PYTHONPATH": trees[side]}
            command = [sys.executable, str(here), "--checkpoint", str(args.checkpoint)]
            command += ["--threads", str(args.threads), "--frames", str(args.frames)]
            command += ["time", "--clips", str(args.clips)] + (["--greedy"] if args.greedy else [])
            line = subprocess.run(command, env=env, check=True, capture_output=True, text=True)
            samples[side].append(json.loads(line.stdout.strip().splitlines()[-1]))
            loads.append(Path("/proc/loadavg").read_text().split()[0])
            print(side, samples[side][-1], "load", loads[-1], flush=True)
    result = {"rounds": args.rounds, "load_1min": loads, "greedy": args.greedy}
    for key in ("talker_step_ms", "frame_passes_ms"):
        base = statistics.median(s[key] for s in samples["base"])
        new = statistics.median(s[key] for s in samples["new"])
        result[key] = {"base": base, "new": new, "ratio": new / base}
    print(json.dumps(result, indent=1))
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoint", type=Path, required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--frames", type=int, default=24)
    ap.add_argument("--json", type=Path)
    sub = ap.add_subparsers(dest="mode", required=True)
    sub.add_parser("count").add_argument("--rows", type=int, default=40)
    sub.add_parser("digest").add_argument("--dump", type=Path)
    for name in ("time", "ab"):
        mode = sub.add_parser(name)
        mode.add_argument("--clips", type=int, default=3)
        mode.add_argument("--greedy", action="store_true")
        if name == "ab":
            mode.add_argument("--base", type=Path, required=True)
            mode.add_argument("--rounds", type=int, default=8)
    args = ap.parse_args()
    result = {"count": count, "digest": digest, "time": time_steps, "ab": ab}[args.mode](args)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
