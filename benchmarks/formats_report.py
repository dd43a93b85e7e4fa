"""Markdown table of the weight-format runs in a results folder (engine_bench.py JSON files),
with the floor of each format (weight bytes per frame / read bandwidth) beside it.

    .venv/bin/python benchmarks/formats_report.py benchmarks/results/int8 --bandwidth 16.4
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from weight_bytes import floor_ms, frame_params

CONFIGS = {"0.6B": "Qwen3-TTS-12Hz-0.6B-Base", "1.7B": "Qwen3-TTS-12Hz-1.7B-Base"}
ASSETS = Path(__file__).resolve().parents[1] / "assets" / "checkpoints"


def floor_for(model: str, fmt: str, decoder_dtype: str, bandwidth: float) -> float:
    params = frame_params(ASSETS / CONFIGS[model])
    size = params.bytes(fmt)
    decoder_fmt = fmt if decoder_dtype == "same" else decoder_dtype
    decoder_fmt = "float32" if decoder_fmt == "int8" else decoder_fmt
    total = size["total"] - size["decoder_frame"] + params.bytes(decoder_fmt)["decoder_frame"]
    return floor_ms(total, bandwidth)


def rows(folder: Path, bandwidth: float) -> list[str]:
    out = [
        "| model | weights | decoder | talker step ms | code predictor ms | decoder ms/frame "
        "| frame ms | floor ms | × floor | RTF | first chunk decode ms | time to first audio ms "
        "| load s | peak RSS MB |",
        "|---|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for path in sorted(folder.glob("ours-*.json")):
        run = json.loads(path.read_text())
        model = path.name.split("-")[1]
        decoder = run.get("decoder_dtype", "same")
        floor = floor_for(model, run["dtype"], decoder, bandwidth)
        decoder_label = run["dtype"] if decoder == "same" else decoder
        decoder_label = "float32" if decoder_label == "int8" else decoder_label
        out.append(
            f"| {model} | {run['dtype']} | {decoder_label} | {run['talker_step_ms']:.0f} "
            f"| {run['code_predictor_ms']:.0f} | {run['decoder_ms_per_frame']:.0f} "
            f"| {run['frame_ms']:.0f} | {floor:.0f} | {run['frame_ms'] / floor:.2f} "
            f"| {run['rtf_steady']:.2f} | {run['decoder_first_chunk_ms']:.0f} "
            f"| {run['time_to_first_audio_ms']:.0f} | {run['load_s']:.1f} "
            f"| {run['peak_rss_mb']:.0f} |"
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("--bandwidth", type=float, required=True, help="read GB/s for the floor")
    args = ap.parse_args()
    print("\n".join(rows(args.folder, args.bandwidth)))


if __name__ == "__main__":
    main()
