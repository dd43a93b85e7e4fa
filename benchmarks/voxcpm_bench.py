"""Times our VoxCPM2 (`tts_core.models.voxcpm.VoxCPMModel`) streaming fixed work: one dtype
per process. voxcpm_official_bench.py runs the same work through the official voxcpm==2.0.3.

    .venv/bin/python benchmarks/voxcpm_bench.py --checkpoint /tmp/voxcpm2-random \
        --dtype float32 --patches 10 --threads 2 --json benchmarks/results/voxcpm/ours-float32.json
    .venv/bin/python benchmarks/voxcpm_bench.py --checkpoint tests/fixtures/voxcpm2-tiny \
        --patches 40 --streams 1 4 --no-parts      # continuous batching only

The work (shared with the official script, which imports it from here): the text of
benchmarks/common.py, seed 0, cfg 2.0, 10 CFM steps, streamed one patch per chunk, in two
modes: zero-shot (no voice) and reference + transcript (tests/fixtures/ref_clip_24k.wav and
common.REF_TEXT as both the reference and the continuation prompt). Each mode runs once with 2
patches (warm-up), then timed with exactly `--patches` patches: `max_len` caps the run and the
random checkpoint's stop head never fires (make_random_voxcpm.py); the run fails if another
number of patches comes out.

Parts are timed by wrapping methods of the loaded objects (no library code is changed):
`net.prefill` (prompt), `net.advance` (one LM step: base LM 28 layers + FSQ + residual LM 8
layers), `net.feat_decoder.solve_requests` (DiT: the Euler CFM solve, 10 steps, CFG batch of
2), `net.encode_patches` on one patch (LocEnc of the new patch) and `vae.decode_step` (the
streaming VAE decode of one patch). Time to first audio = from the `stream` call to the first
chunk with audio (prompt building, prefill, one DiT solve, one VAE decode).

Continuous batching (`--streams 1 4`): per mode, N requests (seeds 0..N-1, `max_len` =
`--patches`) through one served EngineLoop (models/voxcpm/runner.py): each alone, one after the
other, then N at once; audio seconds per wall second of each, time to first audio, and whether
every stream of the batch is byte-identical to itself alone. The model loads and computes on
threads that end (or on the scheduler's own thread): one OpenMP team at a time (a second live
team slows every parallel op, tts_core/serving/loop.py).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import threading
import time
from functools import partial
from pathlib import Path

from common import REF_CLIP, REF_TEXT, TEXT, wrap

SEED = 0
CFG = 2.0
TIMESTEPS = 10
MODES = ("zero_shot", "ref_text")
MODE_LABEL = {"zero_shot": "zero-shot", "ref_text": "reference + transcript"}


def rss_mb() -> float:
    """Resident memory now (MB), from /proc."""
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def load_average() -> str:
    return " / ".join(f"{x:.2f}" for x in os.getloadavg())


def mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def summarize(
    *,
    patches: int,
    audio_s: float,
    whole_s: float,
    ttfa_s: float,
    prefill_ms: float,
    lm: list[float],
    dit: list[float],
    locenc: list[float],
    vae: list[float],
) -> dict:
    """Per-patch means and whole-run figures of one timed run (times in ms unless _s)."""
    parts = sum(lm) + sum(dit) + sum(locenc) + sum(vae)
    other = (1000 * whole_s - prefill_ms - parts) / patches
    patch_ms = mean(lm) + mean(dit) + mean(locenc) + mean(vae) + other
    return {
        "patches": patches,
        "audio_s": audio_s,
        "prefill_ms": prefill_ms,
        "lm_step_ms": mean(lm),
        "lm_steps": len(lm),
        "dit_ms": mean(dit),
        "dit_calls": len(dit),
        "locenc_ms": mean(locenc),
        "vae_decode_ms": mean(vae),
        "vae_calls": len(vae),
        "other_ms_per_patch": other,
        "patch_ms": patch_ms,
        "time_to_first_audio_ms": 1000 * ttfa_s,
        "whole_s": whole_s,
        "rtf_whole": whole_s / audio_s,
        "rtf_steady": patch_ms / (1000 * audio_s / patches),
    }


ROWS = [  # label, key, format
    ("load (s)", "load_s", "{:.1f}"),
    ("voice prompt (s)", "voice_s", "{:.2f}"),
    ("prefill (ms)", "prefill_ms", "{:.0f}"),
    ("LM step: base 28 + residual 8 layers (ms/patch)", "lm_step_ms", "{:.0f}"),
    ("DiT: CFM 10 steps with CFG (ms/patch)", "dit_ms", "{:.0f}"),
    ("LocEnc of the new patch (ms/patch)", "locenc_ms", "{:.1f}"),
    ("VAE decode, streaming (ms/patch)", "vae_decode_ms", "{:.0f}"),
    ("other (ms/patch)", "other_ms_per_patch", "{:.1f}"),
    ("whole patch (ms; 160 ms of audio)", "patch_ms", "{:.0f}"),
    ("time to first audio (ms)", "time_to_first_audio_ms", "{:.0f}"),
    ("RTF steady (patch / audio)", "rtf_steady", "{:.2f}"),
    ("RTF whole run (wall / audio)", "rtf_whole", "{:.2f}"),
    ("RSS while streaming - before (MB)", "rss_growth_mb", "{:.0f}"),
]


def print_table(result: dict) -> None:
    """A markdown table: one column per mode."""
    modes = [m for m in MODES if m in result["modes"]]
    print(
        f"\n{result['impl']} {result['dtype']}, {result['threads']} threads, "
        f"{result['patches']} patches, load average {result['load_average_end']}"
    )
    print("| measure | " + " | ".join(MODE_LABEL[m] for m in modes) + " |")
    print("|---|" + "--:|" * len(modes))
    for label, key, fmt in ROWS:
        cells = []
        for m in modes:
            value = result["modes"][m].get(key, result.get(key))
            cells.append("-" if value is None else fmt.format(value))
        print(f"| {label} | " + " | ".join(cells) + " |")
    print(
        f"| peak RSS (MB, whole process) | {result['peak_rss_mb']:.0f} |" + " |" * (len(modes) - 1)
    )
    batching = result.get("batching")
    if batching:
        print(
            f"\ncontinuous batching, {result['patches']} patches a stream "
            f"(load average {result['load_average_end']})"
        )
        print(
            "| mode | streams | wall (s) | audio (s) | audio s / wall s | TTFA mean (ms) | "
            "identical to alone |"
        )
        print("|---|--:|--:|--:|--:|--:|---|")
        for mode, runs in batching.items():
            for run_ in runs:
                print(
                    f"| {MODE_LABEL[mode]} | {run_['label']} | {run_['wall_s']:.2f} | "
                    f"{run_['audio_s']:.2f} | {run_['audio_per_wall_s']:.3f} | "
                    f"{run_['ttfa_ms']:.0f} | {run_['identical']} |"
                )


def finish(result: dict, path: Path | None) -> None:
    result["load_average_end"] = load_average()
    result["peak_rss_mb"] = peak_rss_mb()
    print_table(result)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {path}")


def stream_once(model, voice, patches: int) -> dict:
    start = time.perf_counter()
    ttfa, produced, samples, stop, rss = None, 0, 0, None, 0.0
    for chunk in model.stream(
        TEXT,
        voice,
        seed=SEED,
        cfg_value=CFG,
        inference_timesteps=TIMESTEPS,
        max_len=patches,
        chunk_patches=1,
    ):
        if ttfa is None and chunk.audio.size:
            ttfa = time.perf_counter() - start
        produced += chunk.patches
        samples += chunk.audio.size
        stop = chunk.stop_reason or stop
        rss = max(rss, rss_mb())  # while the stream's state is alive
    whole = time.perf_counter() - start
    if produced != patches or stop != "length_cap":
        raise RuntimeError(f"asked for {patches} patches, got {produced} ({stop})")
    return {"whole_s": whole, "ttfa_s": ttfa, "audio_s": samples / model.sample_rate, "rss_mb": rss}


def time_parts(model, voice, patches: int) -> dict:
    """One timed `model.stream` of `patches` patches after a 2-patch warm-up, its parts timed."""
    net = model.net
    prefill = wrap(net, "prefill")
    lm = wrap(net, "advance")
    dit = wrap(net.feat_decoder, "solve_requests")
    locenc = wrap(net, "encode_patches", lambda a, k: a[0].shape[1])
    vae = wrap(model.vae, "decode_step")
    stream_once(model, voice, 2)  # warm-up
    for calls in (prefill, lm, dit, locenc, vae):
        calls.clear()
    before = rss_mb()
    run_ = stream_once(model, voice, patches)
    growth = run_["rss_mb"] - before
    for obj, name in (
        (net, "prefill"),
        (net, "advance"),
        (net.feat_decoder, "solve_requests"),
        (net, "encode_patches"),
        (model.vae, "decode_step"),
    ):
        delattr(obj, name)  # back to the class methods
    return {
        **summarize(
            patches=patches,
            audio_s=run_["audio_s"],
            whole_s=run_["whole_s"],
            ttfa_s=run_["ttfa_s"],
            prefill_ms=sum(prefill.ms()),
            lm=lm.ms(),
            dit=dit.ms(),
            locenc=locenc.ms(lambda n: n == 1),  # the prompt's LocEnc is in prefill
            vae=vae.ms(),
        ),
        "rss_growth_mb": growth,
    }


def _consume(stream, start: float, into: dict) -> None:
    """A stream's chunks (on its own thread): audio, and the time of its first audio."""
    pieces = []
    for chunk in stream:
        if "ttfa_s" not in into and chunk.audio.size:
            into["ttfa_s"] = time.perf_counter() - start
        pieces.append(chunk.audio)
    into["audio"] = b"".join(piece.tobytes() for piece in pieces)
    into["samples"] = sum(piece.size for piece in pieces)


def run_streams(scheduler, voice, requests: list[dict]) -> tuple[float, list[dict]]:
    """These requests submitted together to the scheduler, each consumed on its own thread:
    (wall seconds from the first submit to the last chunk, each stream's audio and TTFA)."""
    start = time.perf_counter()
    streams = [scheduler.submit(TEXT, voice, **kwargs) for kwargs in requests]
    outs: list[dict] = [{} for _ in requests]
    threads = [
        threading.Thread(target=_consume, args=(stream, start, out))
        for stream, out in zip(streams, outs, strict=True)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.perf_counter() - start, outs


def batching(model, voice, patches: int, counts: list[int]) -> list[dict]:
    """Alone one after the other, then each count of streams at once (see the module doc)."""
    from tts_core.serving import EngineLoop

    most = max(counts)
    requests = [
        {
            "seed": SEED + k,
            "cfg_value": CFG,
            "inference_timesteps": TIMESTEPS,
            "max_len": patches,
            "chunk_patches": 1,
        }
        for k in range(most)
    ]
    scheduler = EngineLoop(model.runner(most), make_request=model.request, thread_name="tts-voxcpm")
    try:
        run_streams(scheduler, voice, [{**r, "max_len": 2} for r in requests])  # warm-up
        alone = [run_streams(scheduler, voice, [r]) for r in requests]
        runs = []
        for count in counts:
            if count == 1:
                label, wall, outs = "1", alone[0][0], alone[0][1]
            else:
                label, (wall, outs) = str(count), run_streams(scheduler, voice, requests[:count])
            runs.append(_run_row(label, wall, outs, alone, model.sample_rate))
            if count > 1:  # the same streams one after the other, for comparison
                seq_wall = sum(a[0] for a in alone[:count])
                seq_outs = [a[1][0] for a in alone[:count]]
                runs.append(
                    _run_row(f"{count} one by one", seq_wall, seq_outs, alone, model.sample_rate)
                )
            print(json.dumps(runs[-1]), flush=True)
    finally:
        scheduler.close()
    return runs


def _run_row(label: str, wall: float, outs: list[dict], alone: list, rate: int) -> dict:
    audio_s = sum(out["samples"] for out in outs) / rate
    identical = all(out["audio"] == alone[i][1][0]["audio"] for i, out in enumerate(outs))
    return {
        "label": label,
        "streams": len(outs),
        "wall_s": wall,
        "audio_s": audio_s,
        "audio_per_wall_s": audio_s / wall,
        "ttfa_ms": 1000 * mean([out["ttfa_s"] for out in outs]),
        "identical": identical,
        "load_average": load_average(),
    }


def run(args: argparse.Namespace) -> dict:
    import soundfile as sf
    import torch

    from tts_core.engine.model_thread import run_on_passing_thread
    from tts_core.models.voxcpm import VoxCPMModel

    torch.set_num_threads(args.threads)
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[args.dtype]
    result = {
        "impl": "ours",
        "checkpoint": str(args.checkpoint),
        "dtype": args.dtype,
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "patches": args.patches,
        "load_average_start": load_average(),
        "modes": {},
        "batching": {},
    }
    start = time.perf_counter()
    model = run_on_passing_thread(
        lambda: VoxCPMModel.from_folder(args.checkpoint, device="cpu", dtype=dtype)
    )
    result["load_s"] = time.perf_counter() - start
    result["rss_after_load_mb"] = rss_mb()
    result["peak_rss_after_load_mb"] = peak_rss_mb()
    ref, rate = sf.read(REF_CLIP, dtype="float32")
    for mode in args.modes:
        voice, voice_s = None, None
        if mode == "ref_text":
            start = time.perf_counter()
            voice = run_on_passing_thread(lambda: model.create_voice(ref, rate, ref_text=REF_TEXT))
            voice_s = time.perf_counter() - start
        entry = {"voice_s": voice_s, "load_average": load_average()}
        if args.parts:
            parts = partial(time_parts, model, voice, args.patches)
            entry.update(run_on_passing_thread(parts))
            entry["load_average"] = load_average()
            print(f"{mode}: {json.dumps(entry)}", flush=True)
        result["modes"][mode] = entry
        if args.streams:
            result["batching"][mode] = batching(model, voice, args.patches, args.streams)
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoint", type=Path, default=Path("/tmp/voxcpm2-random"))
    ap.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    ap.add_argument("--patches", type=int, default=10)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument(
        "--streams",
        type=int,
        nargs="*",
        default=[1, 4],
        help="continuous batching: these numbers of streams at once (none: skip)",
    )
    ap.add_argument(
        "--no-parts", dest="parts", action="store_false", help="skip the timed parts of one stream"
    )
    args = ap.parse_args()
    finish(run(args), args.json)


if __name__ == "__main__":
    main()
