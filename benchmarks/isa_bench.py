"""One streamed clip per instruction set, in one run: which CPU format serves fastest here?

    .venv/bin/python benchmarks/isa_bench.py --checkpoint /tmp/qwen3-0.6B-random \
        [--frames 20 --threads 2] --out benchmarks/results/isa

Runs benchmarks/engine_bench.py (`load_model` + `create_voice` + `stream`: the served engine
with one row) once per configuration, each in its own process:
- int8 on each native 8-bit kernel this CPU runs (TTS_CORE_NATIVE_ISA forces one at a time)
  and on torch._int_mm, with the codec decoder as the app's `auto` picks it (bfloat16 where
  the CPU has native bf16, else float32);
- float32 and bfloat16 weights (what `auto` falls back to, and the GPU format);
- "as an AVX2 machine": oneDNN and ATen limited to AVX2 (ONEDNN_MAX_CPU_ISA=AVX2,
  ATEN_CPU_CAPABILITY=avx2) with our AVX2 kernel, float32 weights, and the decoder in float32
  and in bfloat16 (bf16 is then converted, not native). This is an emulation on this CPU's
  caches and memory, not a measurement of a Zen 3 or Intel client part.
Prints a table with the load average and writes one JSON per configuration plus summary.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from tts_core.models import native

HERE = Path(__file__).parent
AS_AVX2 = {"ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2"}
COLUMNS = (
    "talker_step_ms",
    "code_predictor_ms",
    "decoder_ms_per_frame",
    "frame_ms",
    "rtf_steady",
    "time_to_first_audio_ms",
    "load_s",
)


def bf16_native() -> bool:
    import torch

    return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


def configurations() -> list[tuple[str, dict[str, str], list[str]]]:
    """(label, environment, engine_bench arguments)."""
    decoder = "bfloat16" if bf16_native() else "same"
    runs = [
        (
            f"int8 {isa}",
            {"TTS_CORE_NATIVE_ISA": isa},
            ["--dtype", "int8", "--decoder-dtype", decoder],
        )
        for isa in native.int8_isas_here()
    ]
    runs += [
        (
            "int8 torch._int_mm",
            {"TTS_CORE_NATIVE_ISA": "torch"},
            ["--dtype", "int8", "--decoder-dtype", decoder],
        ),
        ("float32", {}, ["--dtype", "float32", "--decoder-dtype", decoder]),
        ("bfloat16", {}, ["--dtype", "bfloat16"]),
        (
            "as AVX2: int8 avx2, decoder fp32",
            {**AS_AVX2, "TTS_CORE_NATIVE_ISA": "avx2"},
            ["--dtype", "int8"],
        ),
        (
            "as AVX2: int8 avx2, decoder bf16",
            {**AS_AVX2, "TTS_CORE_NATIVE_ISA": "avx2"},
            ["--dtype", "int8", "--decoder-dtype", "bfloat16"],
        ),
        ("as AVX2: float32", AS_AVX2, ["--dtype", "float32"]),
    ]
    return runs


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoint", type=Path, required=True)
    ap.add_argument("--frames", type=int, default=20)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--only", nargs="*", default=None, help="labels to run (default: all)")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "isa")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for label, env, extra in configurations():
        if args.only and label not in args.only:
            continue
        path = args.out / (label.replace(" ", "_").replace(":", "").replace(",", "") + ".json")
        before = load_average()
        command = [
            sys.executable,
            str(HERE / "engine_bench.py"),
            "--checkpoint",
            str(args.checkpoint),
            "--frames",
            str(args.frames),
            "--threads",
            str(args.threads),
            "--json",
            str(path),
            *extra,
        ]
        done = subprocess.run(command, env={**os.environ, **env}, capture_output=True, text=True)
        if done.returncode != 0:
            print(f"{label}: failed\n{done.stderr[-2000:]}", file=sys.stderr)
            continue
        result = json.loads(path.read_text())
        rows.append(
            {
                "label": label,
                "env": env,
                "load_before": before,
                **{k: result[k] for k in (*COLUMNS, "decoder_dtype")},
            }
        )
        print(
            f"{label:36s} " + " ".join(f"{result[k]:9.1f}" for k in COLUMNS) + f"  load {before}",
            flush=True,
        )
    print_table(rows)
    (args.out / "summary.json").write_text(json.dumps(rows, indent=2) + "\n")


def print_table(rows: list[dict]) -> None:
    print(
        "\n| configuration | decoder | talker step ms | code predictor ms | decoder ms/frame | "
        "frame ms | RTF | first audio ms | load s | load avg before |"
    )
    print("|---|---|--:|--:|--:|--:|--:|--:|--:|---|")
    for row in rows:
        print(
            f"| {row['label']} | {row['decoder_dtype']} | "
            + " | ".join(
                f"{row[k]:.2f}"
                if k == "rtf_steady"
                else f"{row[k]:.0f}"
                if k != "load_s"
                else f"{row[k]:.1f}"
                for k in COLUMNS
            )
            + f" | {row['load_before']} |"
        )


if __name__ == "__main__":
    main()
