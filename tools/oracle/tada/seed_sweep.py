"""Which seeds the official hume-tada 0.1.9 can generate on the tiny checkpoints at its default
InferenceOptions (noise temperature 0.9), and what each gives: the oracle of
tests/tada/test_seed_sweep.py (`tests/fixtures/tada-tiny-seed-sweep.json`).

    PYTHONPATH=tools/oracle/tada/stubs:tools/oracle/tada .tada-venv/bin/python \
        tools/oracle/tada/seed_sweep.py [--fixtures DIR] [--out FILE] [--threads 1]

Per fixture (a, b), prompt (the goldens' 2 s clip with its transcript; the app test's 3 s clip
with "a short reference clip"), text and flow steps (10, the default; 2), one official
`generate()` per seed 0..N-1 after torch.manual_seed(seed): either its output ids and durations,
or the exception it raised (type, message). The prompt's tensors are stored too, so a test feeds
our generate() the very same prompt. One thread by default (rebuild.sh); a second run gives the
same file, byte for byte; two threads (2026-11-28): every case's outcome, ids and durations
equal, the prompt's token values within 6.6e-7 (the encoder's float32 rounding), positions equal.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import soundfile as sf
import torch
from make_goldens import GEN_TEXT, PROMPT_TEXT, REPO, load
from tada.modules.tada import InferenceOptions

APP_TEXT, APP_TRANSCRIPT = "Hello there.", "a short reference clip"  # tests/tada/test_app_tada
TEXTS = (GEN_TEXT, APP_TEXT)
FLOW_STEPS = (10, 2)
PROMPT_SEED = 11  # make_goldens.SEEDS["encoder"]


def prompts(encoder) -> dict:
    """name -> the official EncoderOutput: the goldens' (2 s) and the app test's (3 s) clip."""
    audio, rate = sf.read(REPO / "tests" / "fixtures" / "ref_clip_24k.wav", dtype="float32")
    out = {}
    for name, seconds, text in (("golden", 2.0, PROMPT_TEXT), ("app", None, APP_TRANSCRIPT)):
        clip = torch.from_numpy(audio[: int(seconds * rate)] if seconds else audio)[None]
        torch.manual_seed(PROMPT_SEED)
        out[name] = encoder(
            clip, text=[text], audio_length=torch.tensor([clip.shape[1]]), sample_rate=rate
        )
    return out


def outcome(model, prompt, text: str, steps: int, seed: int) -> dict:
    torch.manual_seed(seed)
    options = InferenceOptions(num_flow_matching_steps=steps)
    try:
        out = model.generate(prompt=replace(prompt), text=text, inference_options=options)
    except Exception as error:  # noqa: BLE001 - the outcome recorded
        return {"error": type(error).__name__, "message": str(error)}
    return {
        "output_ids": out.output_text_ids[0].tolist(),
        "time_before": out.time_before[0].tolist(),
        "samples": int(out.audio[0].numel()),
    }


def sweep(root: Path, seeds: int) -> dict:
    model, encoder = load(root)
    result = {"prompts": {}, "cases": []}
    with torch.no_grad():
        for name, prompt in prompts(encoder).items():
            result["prompts"][name] = {
                "token_values": prompt.token_values[0].tolist(),
                "token_positions": prompt.token_positions[0].tolist(),
                "text": prompt.text[0],
                "audio_len": int(prompt.audio_len[0]),
            }
            for text in TEXTS:
                for steps in FLOW_STEPS:
                    for seed in range(seeds):
                        case = {"prompt": name, "text": text, "flow_steps": steps, "seed": seed}
                        result["cases"].append(case | outcome(model, prompt, text, steps, seed))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fixtures", type=Path, default=REPO / "tests/fixtures")
    parser.add_argument("--out", type=Path, help="default: FIXTURES/tada-tiny-seed-sweep.json")
    parser.add_argument("--seeds", type=int, default=12)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    out = {v: sweep(args.fixtures / f"tada-tiny-{v}", args.seeds) for v in "ab"}
    args.out = args.out or args.fixtures / "tada-tiny-seed-sweep.json"
    args.out.write_text(json.dumps(out, separators=(",", ":")) + "\n")
    for v, result in out.items():
        failed = {}
        for case in result["cases"]:
            key = (case["prompt"], case["text"], case["flow_steps"])
            failed.setdefault(key, [])
            if "error" in case:
                failed[key].append(f"{case['seed']}:{case['error']}")
        for key, seeds in failed.items():
            print(v, key, "failed:", " ".join(seeds) or "none")
    print(f"{args.out}: {np.mean([len(r['cases']) for r in out.values()]):.0f} cases per fixture")


if __name__ == "__main__":
    main()
