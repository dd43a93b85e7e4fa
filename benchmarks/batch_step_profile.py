"""Where a batched scheduler step spends its time, at 1 row and at N rows.

    .venv/bin/python benchmarks/batch_step_profile.py --checkpoint /tmp/qwen3-0.6B-random \
        --rows 1 8 --frames 24 --threads 2 [--attention step|kernel|sdpa|both|all] \
        [--rounds 1] [--json out.json]

Wraps the model runner's calls (code predictor, talker step, prefill), the per-row chunk decode,
the per-row code-predictor draws and the attention of the decode steps, runs `rows` streams
together through the scheduler (int8 layers, bf16 codec decoder where the CPU has native bf16,
EOS suppressed so every stream runs `--frames` frames) and prints milliseconds per decode step
for each part. `--attention`: `step`, each 8-bit stack's step in one native call where it runs
(models/stack_step.py, the served path: its attention is inside that call); `kernel`, layer by
layer with the one-query kernel (models/attend_one.py); `sdpa`, layer by layer with SDPA row by
row; `both` = kernel and sdpa, `all` = the three; alternated `--rounds` times in one process
(the same model and voice).
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time
from collections import defaultdict
from pathlib import Path

import soundfile as sf
import torch
from common import LANGUAGE, REF_CLIP, TEXT

import tts_core
from tts_core.backends.qwen3 import served_loop
from tts_core.engine.model_thread import run_on_passing_thread
from tts_core.models import layers
from tts_core.models.qwen3_tts.serving import runner as runner_module


def timed(owner: object, name: str, sink: dict, label: str, undo: list) -> None:
    """Replace owner.name by a pass-through adding its wall time to sink[label]."""
    inner = getattr(owner, name)
    undo.append((owner, name, owner.__dict__.get(name)))

    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            sink[label] += time.perf_counter() - start

    setattr(owner, name, wrapper)


def _not_here(*args):  # noqa: ANN002, ANN202 - attend_one's and stack_step's "does not apply"
    return None


MODES = {"both": ("kernel", "sdpa"), "all": ("step", "kernel", "sdpa")}


def profile(model, voice, rows: int, frames: int, attention: str) -> tuple[dict, int]:  # noqa: ANN001
    scheduler = served_loop(model, max_batch=rows)
    spent: dict[str, float] = defaultdict(float)
    steps = {"n": 0}
    undo: list = []
    if attention == "step":
        timed(layers, "stack_step", spent, "8-bit stacks, one native call a step", undo)
    else:
        undo.append((layers, "stack_step", layers.stack_step))
        layers.stack_step = _not_here
    if attention == "sdpa":
        undo.append((layers, "attend_one", layers.attend_one))
        layers.attend_one = _not_here
    else:
        timed(layers, "attend_one", spent, "attention, one-query kernel", undo)
    timed(layers, "scaled_dot_product", spent, "attention, SDPA", undo)
    timed(scheduler.runner, "predict", spent, "code predictor (15 passes)", undo)
    timed(scheduler.runner, "talker_step", spent, "talker step", undo)
    timed(scheduler.runner, "prefill", spent, "prefill", undo)
    timed(model, "decode_chunk", spent, "codec decoder (per row)", undo)
    timed(runner_module, "draw_rows", spent, "code-predictor draws", undo)
    step = scheduler._decode_step

    def counted(seqs):  # noqa: ANN001, ANN202
        steps["n"] += 1
        start = time.perf_counter()
        try:
            return step(seqs)
        finally:
            spent["whole decode step"] += time.perf_counter() - start

    scheduler._decode_step = counted
    list(scheduler.submit(TEXT, voice, language=LANGUAGE, seed=0, max_new_tokens=6))  # warm-up
    spent.clear()
    steps["n"] = 0
    streams = [
        scheduler.submit(TEXT, voice, language=LANGUAGE, seed=i, max_new_tokens=frames + 1)
        for i in range(rows)
    ]
    threads = [threading.Thread(target=lambda s=s: list(s)) for s in streams]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    scheduler.close()
    for owner, name, original in reversed(undo):
        if original is None:
            delattr(owner, name)  # an instance attribute shadowing the class's method
        else:
            setattr(owner, name, original)
    return dict(spent), steps["n"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", type=Path, required=True)
    parser.add_argument("--rows", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--frames", type=int, default=24)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--attention", choices=("step", "kernel", "sdpa", *MODES), default="step")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    def load():  # noqa: ANN202
        decoder = torch.bfloat16 if torch.ops.mkldnn._is_mkldnn_bf16_supported() else None
        model = tts_core.load_model(args.checkpoint, quantize="int8", decoder_dtype=decoder)
        with torch.no_grad():
            model.talker.codec_head.weight[model.config.talker.codec_eos_token_id].zero_()
        audio, rate = sf.read(REF_CLIP, dtype="float32")
        return model, model.create_voice(audio, rate)

    model, voice = run_on_passing_thread(load)
    modes = MODES.get(args.attention, (args.attention,))
    runs = [
        (f"{rows} row(s), {mode}", rows, mode)
        for _ in range(args.rounds)
        for rows in args.rows
        for mode in modes
    ]  # alternated: each round runs every configuration once, in the same order
    results: dict[str, list[tuple[dict, int]]] = defaultdict(list)
    for name, rows, mode in runs:
        results[name].append(profile(model, voice, rows, args.frames, mode))
    load = ", ".join(f"{v:.2f}" for v in os.getloadavg())
    print(f"{args.checkpoint} int8, {args.threads} threads, load average {load}")
    table = {
        name: {
            label: [1000 * spent.get(label, 0.0) / n for spent, n in rounds]
            for label in sorted({label for spent, _ in rounds for label in spent})
        }
        for name, rounds in results.items()
    }
    labels = sorted({label for parts in table.values() for label in parts})
    print("ms per decode step (min-max of rounds)".ljust(40) + "".join(f"{n:>24}" for n in table))
    for label in labels:
        cells = []
        for parts in table.values():
            values = parts.get(label, [0.0])
            span = f"{min(values):.1f}" + (f"-{max(values):.1f}" if len(values) > 1 else "")
            cells.append(f"{span:>24}")
        print(label.ljust(40) + "".join(cells))
    if args.json:
        args.json.write_text(json.dumps({"load_average": load, "ms_per_step": table}, indent=1))
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
