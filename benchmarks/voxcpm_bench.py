"""Times our VoxCPM2 (`tts_core.models.voxcpm.VoxCPMModel`) streaming fixed work: one dtype
per process. voxcpm_official_bench.py runs the same work through the official voxcpm==2.0.3.

    .venv/bin/python benchmarks/voxcpm_bench.py --checkpoint /tmp/voxcpm2-random \
        --dtype float32 --patches 10 --threads 2 --json benchmarks/results/voxcpm/ours-float32.json

The work (shared with the official script, which imports it from here): the text of
benchmarks/common.py, seed 0, cfg 2.0, 10 CFM steps, streamed one patch per chunk, in two
modes: zero-shot (no voice) and reference + transcript (tests/fixtures/ref_clip_24k.wav and
common.REF_TEXT as both the reference and the continuation prompt). Each mode runs once with 2
patches (warm-up), then timed with exactly `--patches` patches: `max_len` caps the run and the
random checkpoint's stop head never fires (make_random_voxcpm.py); the run fails if another
number of patches comes out.

Parts are timed by wrapping methods of the loaded objects (no library code is changed):
`net.prefill` (prompt), `net.advance` (one LM step: base LM 28 layers + FSQ + residual LM 8
layers), `net.feat_decoder.forward` (DiT: the Euler CFM solve, 10 steps, CFG batch of 2),
`net.encode_patches` on one patch (LocEnc of the new patch) and `vae.decode_step` (the
streaming VAE decode of one patch). Time to first audio = from the `stream` call to the first
chunk with audio (prompt building, prefill, one DiT solve, one VAE decode).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import time
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
    *, patches: int, audio_s: float, whole_s: float, ttfa_s: float, prefill_ms: float,
    lm: list[float], dit: list[float], locenc: list[float], vae: list[float],
) -> dict:  # fmt: skip
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
    print(f"\n{result['impl']} {result['dtype']}, {result['threads']} threads, "
          f"{result['patches']} patches, load average {result['load_average_end']}")  # fmt: skip
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
    for chunk in model.stream(TEXT, voice, seed=SEED, cfg_value=CFG,
                              inference_timesteps=TIMESTEPS, max_len=patches, chunk_patches=1):  # fmt: skip
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


def run(args: argparse.Namespace) -> dict:
    import soundfile as sf
    import torch

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
    }
    start = time.perf_counter()
    model = VoxCPMModel.from_folder(args.checkpoint, device="cpu", dtype=dtype)
    result["load_s"] = time.perf_counter() - start
    result["rss_after_load_mb"] = rss_mb()
    result["peak_rss_after_load_mb"] = peak_rss_mb()
    net = model.net
    ref, rate = sf.read(REF_CLIP, dtype="float32")
    for mode in args.modes:
        voice, voice_s = None, None
        if mode == "ref_text":
            start = time.perf_counter()
            voice = model.create_voice(ref, rate, ref_text=REF_TEXT)
            voice_s = time.perf_counter() - start
        prefill = wrap(net, "prefill")
        lm = wrap(net, "advance")
        dit = wrap(net.feat_decoder, "forward")
        locenc = wrap(net, "encode_patches", lambda a, k: a[0].shape[1])
        vae = wrap(model.vae, "decode_step")
        stream_once(model, voice, 2)  # warm-up
        for calls in (prefill, lm, dit, locenc, vae):
            calls.clear()
        before = rss_mb()
        run_ = stream_once(model, voice, args.patches)
        growth = run_["rss_mb"] - before
        for obj, name in ((net, "prefill"), (net, "advance"), (net.feat_decoder, "forward"),
                          (net, "encode_patches"), (model.vae, "decode_step")):  # fmt: skip
            delattr(obj, name)  # back to the class methods
        result["modes"][mode] = {
            "voice_s": voice_s,
            **summarize(
                patches=args.patches,
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
            "load_average": load_average(),
        }
        print(f"{mode}: {json.dumps(result['modes'][mode])}", flush=True)
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoint", type=Path, default=Path("/tmp/voxcpm2-random"))
    ap.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    ap.add_argument("--patches", type=int, default=10)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    finish(run(args), args.json)


if __name__ == "__main__":
    main()
