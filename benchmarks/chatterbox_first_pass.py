"""Where Chatterbox Turbo's first S3Gen pass goes (issue 38, item 5): the pass a stream makes at
`StreamChunking.first_tokens` tokens, the last thing before its first audio.

    .venv/bin/python benchmarks/chatterbox_first_pass.py [--folder /tmp/chatterbox-turbo-real-random]
        [--tokens 12] [--repeats 9] [--threads 2] [--top 25] [--cpu] [--flow-prompt N]

Times each part of the pass by forward hooks (median ms over `--repeats` fresh streams; `--cpu
--threads 1`: the thread's CPU time, which a busy machine's time slicing does not inflate): the
flow's conformer encoder, each estimator call (meanflow: 2), the rest of the flow, HiFT's F0
predictor, HiFT's decode, and the rest (the source excitation, the trims); then a profiler table
of the aten operators by input shape (the self time of one pass, averaged over 3); and the pass's
floor: its FLOPs (chatterbox_floor.count_flops) at the float32 GEMM rate measured here. The
machine is shared: read the shares more than the milliseconds (`uptime` is printed).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

CLOCK = [time.perf_counter]  # --cpu: time.thread_time (one thread: its work, not the waits)
PARTS = {
    "flow encoder": "flow.encoder",
    "estimator": "flow.decoder.estimator",
    "hift f0": "hift.f0_predictor",
}


class PartTimer:
    """Seconds spent in each named module per pass (forward pre/post hooks)."""

    def __init__(self, model) -> None:  # noqa: ANN001
        self.spent: dict[str, float] = defaultdict(float)
        self.handles = []
        for name, path in PARTS.items():
            owner, rest = path.split(".", 1)
            module = getattr(model, owner).get_submodule(rest)
            self._hook(module, name)

    def _hook(self, module, name: str) -> None:  # noqa: ANN001
        started: list[float] = []

        def before(*_):  # noqa: ANN002, ANN202
            started.append(CLOCK[0]())

        def after(*_):  # noqa: ANN002, ANN202
            self.spent[name] += CLOCK[0]() - started.pop()

        self.handles += [
            module.register_forward_pre_hook(before),
            module.register_forward_hook(after),
        ]


def first_pass(model, voice, tokens, chunking, timer: PartTimer) -> dict[str, float]:  # noqa: ANN001
    """One fresh stream's first push, in ms by part."""
    from tts_core.models.chatterbox.streaming import S3GenStream, StreamNoise

    noise = StreamNoise.for_voice(0, voice, 400)
    stream = S3GenStream(model.flow, model.hift, voice, noise, chunking)
    timer.spent.clear()
    hift_decode = model.hift.decode

    def decode(*args):  # noqa: ANN002, ANN202
        start = CLOCK[0]()
        out = hift_decode(*args)
        timer.spent["hift decode"] += CLOCK[0]() - start
        return out

    model.hift.decode = decode
    try:
        start = CLOCK[0]()
        mel = stream.flow.push(tokens, False)
        flow_s = CLOCK[0]() - start
        start = CLOCK[0]()
        stream.hift.push(mel, False)
        hift_s = CLOCK[0]() - start
    finally:
        del model.hift.decode
    parts = {name: s * 1e3 for name, s in timer.spent.items()}
    parts["flow rest"] = flow_s * 1e3 - parts["flow encoder"] - parts["estimator"]
    parts["hift rest"] = hift_s * 1e3 - parts["hift f0"] - parts["hift decode"]
    parts["total"] = (flow_s + hift_s) * 1e3
    return parts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--folder", default="/tmp/chatterbox-turbo-real-random")
    parser.add_argument("--tokens", type=int, default=12)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--cpu", action="store_true", help="the calling thread's CPU time")
    parser.add_argument("--flow-prompt", type=int, default=None, help="default: StreamChunking's")
    args = parser.parse_args()
    if args.cpu:
        CLOCK[0] = time.thread_time

    import torch
    from chatterbox_floor import count_flops, gemm_gflops
    from torch.profiler import ProfilerActivity, profile

    import tts_core
    from tts_core.models.chatterbox.chunking import StreamChunking

    torch.set_num_threads(args.threads)
    model = tts_core.load_model(args.folder, quantize="auto")
    chunking = StreamChunking()
    if args.flow_prompt is not None:
        chunking = StreamChunking(flow_prompt=args.flow_prompt)
    voice = model.builtin_voice
    tokens = torch.randint(0, 6561, (1, args.tokens), generator=torch.Generator().manual_seed(0))
    timer = PartTimer(model)
    first_pass(model, voice, tokens, chunking, timer)  # warm
    runs = [first_pass(model, voice, tokens, chunking, timer) for _ in range(args.repeats)]
    for name in runs[0]:
        values = [run[name] for run in runs]
        print(f"{name:14} {statistics.median(values):8.1f} ms  (min {min(values):.1f})")
    for handle in timer.handles:
        handle.remove()
    flops = count_flops(lambda: first_pass(model, voice, tokens, chunking, PartTimer(model)))
    rate = gemm_gflops()
    total = statistics.median(run["total"] for run in runs)
    print(
        f"FLOPs {flops / 1e9:.2f} G at {rate:.0f} GFLOP/s (float32 GEMM here): floor "
        f"{flops / rate / 1e6:.1f} ms, ours {total:.1f} ms ({total / (flops / rate / 1e6):.1f}x)"
    )
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        for _ in range(3):
            first_pass(model, voice, tokens, chunking, PartTimer(model))
    table = prof.key_averages(group_by_input_shape=True).table(
        sort_by="self_cpu_time_total",
        row_limit=args.top,
        max_name_column_width=36,
        max_shapes_column_width=80,
    )
    print(table)
    print(subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())


if __name__ == "__main__":
    main()
