"""Load time and peak memory of an int8 load: the first start (calibrate, quantize, save) against
the next ones (read the saved int8 model, quant/store.py), and the float32 load beside them.

Each load runs in a fresh process (nothing earlier counts) with its own cache folder, empty at
the first start, so the first start pays what a real one does (the checkpoint hashed, `auto`'s
speed check measured). Before the timed load each process loads the tiny fixture the same way
(imports, the native kernel built, the allocator's first arenas). Peak = VmHWM reset just
before the load (`5 > /proc/self/clear_refs`), minus VmRSS then; resident = VmRSS growth.

    .venv/bin/python benchmarks/int8_store_load.py --model /tmp/qwen3-0.6B-random
    .venv/bin/python benchmarks/int8_store_load.py --model /tmp/qwen3-1.7B-random --modes int8
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TINY = REPO / "tests" / "fixtures" / "qwen3-tiny-a"

MEASURE = r"""
import json, os, sys, time
import torch
import tts_core

def status():
    values = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                values[key] = int(rest.split()[0]) * 1024
    return values

folder, warmup, quantize = sys.argv[1], sys.argv[2], sys.argv[3]
tts_core.load_model(warmup, quantize=quantize, warm_chunks=())
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")
before, load = status(), os.getloadavg()[0]
start = time.perf_counter()
model = tts_core.load_model(folder, quantize=quantize)
seconds = time.perf_counter() - start
after = status()
report = model.quantization
print(json.dumps({"load_s": round(seconds, 2), "peak_mib": (after["VmHWM"] - before["VmRSS"]) >> 20,
                  "resident_mib": (after["VmRSS"] - before["VmRSS"]) >> 20,
                  "format": model.weight_format, "decision": model.format_decision,
                  "saved_in": None if report is None else report.saved_in,
                  "loadavg_before": load, "loadavg_after": os.getloadavg()[0],
                  "threads": torch.get_num_threads()}))
"""


def measure(folder: str, quantize: str, cache: Path, store: bool) -> dict:
    env = {**os.environ, "PYTHONPATH": str(REPO), "TTS_CORE_CACHE": str(cache)}
    env["TTS_CORE_INT8_CACHE"] = "1" if store else "0"
    done = subprocess.run(
        [sys.executable, "-c", MEASURE, folder, str(TINY), quantize],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
    )
    if done.returncode != 0:
        raise SystemExit(done.stderr[-4000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--modes", default="int8,auto", help="quantize values, comma-separated")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="int8-store-bench-") as scratch:
        plan = [("none", "float32", False, "plain")]
        for mode in args.modes.split(","):
            plan += [
                (mode, "store off (calibrates every start)", False, "off"),
                (mode, "first start (calibrates, saves)", True, "store"),
                (mode, "next start (reads the saved file)", True, "store"),
            ]
        for quantize, what, store, cache in plan:
            row = {
                "quantize": quantize,
                "start": what,
                **measure(args.model, quantize, Path(scratch) / cache, store),
            }
            rows.append(row)
            print(f"{quantize:5} {what:36} load {row['load_s']:6.1f} s  peak {row['peak_mib']:6} "
                  f"MiB  resident {row['resident_mib']:6} MiB  {row['format']:8} load average "
                  f"{row['loadavg_before']:.2f} -> {row['loadavg_after']:.2f}", flush=True)  # fmt: skip
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"model": args.model, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
