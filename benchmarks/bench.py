"""Side-by-side benchmark: our engine vs the official qwen-tts, against the memory-bandwidth floor.

    .venv/bin/python benchmarks/bench.py                      # full run (see run_full.sh)
    .venv/bin/python benchmarks/bench.py --quick --out-dir /tmp/b   # tiny fixture, seconds

Every configuration runs in its own process (so peak RSS is its own): our engine in .venv
(`engine_bench.py`), the official implementation in .oracle-venv (`official_bench.py`), the
decoder modes once per dtype (`decoder_modes.py`), and the read bandwidth first (`membw.py`).
Both implementations read the same random-weight checkpoint folders (make_random_checkpoint.py).
Writes results.json and results.md to --out-dir and, unless --no-markdown-update, the table
into BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shlex
import subprocess
import sys
import time
from pathlib import Path

from common import REPO
from report import render_markdown
from weight_bytes import floor_ms, frame_params

BENCH = REPO / "benchmarks"
ORACLE_PYTHON = REPO / ".oracle-venv" / "bin" / "python"
ORACLE_STUBS = REPO / "tools" / "oracle" / "stubs"
QUICK_CHECKPOINT = REPO / "tests" / "fixtures" / "qwen3-tiny-a"


def run_json(command: list[str], out: Path, env: dict | None = None, timeout: float = 3600) -> dict:
    """Run one benchmark process that writes `--json out`; return what it wrote."""
    full = [*command, "--json", str(out)]
    print("$", shlex.join(full), flush=True)
    started = time.perf_counter()
    done = subprocess.run(full, env=env, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(
            f"{shlex.join(full)} failed:\n{done.stdout[-2000:]}{done.stderr[-4000:]}"
        )
    print(f"  ({time.perf_counter() - started:.0f} s)", flush=True)
    return json.loads(out.read_text())


def measure_bandwidth(threads: int, size_mb: int) -> dict:
    command = [sys.executable, str(BENCH / "membw.py"), "--threads", str(threads)]
    command += ["--size-mb", str(size_mb)]
    print("$", shlex.join(command), flush=True)
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def machine(threads: int) -> dict:
    cpu = platform.processor() or platform.machine()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        names = [
            ln.split(":", 1)[1].strip()
            for ln in cpuinfo.read_text().splitlines()
            if ln.startswith("model name")
        ]
        cpu = names[0] if names else cpu
    memory_gb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "threads": threads,
        "memory_gb": round(memory_gb, 1),
        "python": platform.python_version(),
        "os": platform.platform(),
        "load_average_start": [round(x, 2) for x in os.getloadavg()],
    }


def floors(checkpoints: dict[str, Path], dtypes: list[str], bandwidth: float) -> dict:
    out = {}
    for name, folder in checkpoints.items():
        params = frame_params(folder)
        entry = {"params_per_frame": params.total}
        for dtype in dtypes:
            size = params.bytes(dtype)
            entry[dtype] = {"bytes": size, "floor_ms": floor_ms(size["total"], bandwidth)}
        out[name] = entry
    return out


def engine_command(args, folder: Path, dtype: str, sampled: bool) -> list[str]:
    command = [sys.executable, str(BENCH / "engine_bench.py"), "--checkpoint", str(folder)]
    command += ["--dtype", dtype, "--frames", str(args.frames), "--threads", str(args.threads)]
    command += ["--first-chunk", str(args.first_chunk), "--chunk", str(args.chunk)]
    return command + (["--sampled"] if sampled else [])


def official_command(args, folder: Path, dtype: str, sampled: bool) -> list[str]:
    command = [str(ORACLE_PYTHON), str(BENCH / "official_bench.py"), "--checkpoint", str(folder)]
    command += ["--dtype", dtype, "--frames", str(args.frames), "--threads", str(args.threads)]
    command += ["--short-frames", str(args.short_frames)]
    return command + (["--sampled"] if sampled else [])


def official_env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ORACLE_STUBS), env.get("PYTHONPATH")]))
    return env


def attempt(command: list[str], out: Path, failures: list, env: dict | None = None) -> dict | None:
    """run_json, but a failed configuration is recorded and the run goes on."""
    try:
        return run_json(command, out, env=env)
    except (RuntimeError, subprocess.TimeoutExpired, json.JSONDecodeError) as error:
        print(f"  FAILED: {str(error)[-600:]}", flush=True)
        failures.append({"command": shlex.join(command), "error": str(error)[-3000:]})
        return None


def run_all(args, checkpoints: dict[str, Path], out_dir: Path) -> tuple[list, list, list]:
    runs, decoder, failures = [], [], []
    for dtype in [d for d in args.dtypes if d != "int8"]:
        first = next(iter(checkpoints.values()))
        command = [sys.executable, str(BENCH / "decoder_modes.py"), "--checkpoint", str(first)]
        command += ["--dtype", dtype, "--frames", str(args.decoder_frames)]
        command += ["--threads", str(args.threads)]
        modes = attempt(command, out_dir / f"decoder-{dtype}.json", failures)
        decoder += [modes] if modes else []
    for name, folder in checkpoints.items():
        for dtype in args.dtypes:
            for mode in args.modes:
                sampled = mode == "sampled"
                tag = f"{name}-{dtype}-{mode}"
                command = engine_command(args, folder, dtype, sampled)
                ours = attempt(command, out_dir / f"ours-{tag}.json", failures)
                official = None
                if args.official and dtype != "int8":
                    command = official_command(args, folder, dtype, sampled)
                    out = out_dir / f"official-{tag}.json"
                    official = attempt(command, out, failures, env=official_env())
                if ours:
                    row = {"model": name, "dtype": dtype, "mode": mode, "ours": ours}
                    runs.append(row | ({"official": official} if official else {}))
    return runs, decoder, failures


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["0.6B", "1.7B"])
    ap.add_argument(
        "--checkpoint-root",
        type=Path,
        default=Path("/tmp"),
        help="holds qwen3-<model>-random folders (make_random_checkpoint.py)",
    )
    ap.add_argument(
        "--dtypes",
        nargs="+",
        choices=["float32", "bfloat16", "int8"],
        default=["float32", "bfloat16", "int8"],
        help="weight formats; int8 is ours only (the official has none)",
    )
    ap.add_argument(
        "--modes", nargs="+", choices=["greedy", "sampled"], default=["greedy", "sampled"]
    )
    ap.add_argument("--frames", type=int, default=20)
    ap.add_argument("--short-frames", type=int, default=4, help="official per-frame slope base")
    ap.add_argument("--decoder-frames", type=int, default=48)
    ap.add_argument("--first-chunk", type=int, default=2)
    ap.add_argument("--chunk", type=int, default=6)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--membw-mb", type=int, default=1024)
    ap.add_argument(
        "--official",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="also time the official qwen-tts in .oracle-venv (default: on, off with --quick)",
    )
    ap.add_argument(
        "--quick",
        action="store_true",
        help="tiny fixture, 4 frames, float32 greedy, ours only unless --official (test suite)",
    )
    ap.add_argument("--out-dir", type=Path, default=BENCH / "results")
    ap.add_argument("--markdown", type=Path, default=REPO / "BENCHMARKS.md")
    ap.add_argument("--no-markdown-update", dest="update_markdown", action="store_false")
    args = ap.parse_args(argv)
    if args.quick:
        args.models, args.dtypes, args.modes = ["tiny-a"], ["float32", "int8"], ["greedy"]
        args.frames, args.short_frames, args.decoder_frames, args.membw_mb = 4, 2, 24, 64
        args.update_markdown = False
    if not 1 <= args.short_frames < args.frames:
        ap.error("need 1 <= --short-frames < --frames (the official per-frame slope)")
    if args.official is None:
        args.official = not args.quick
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    command = shlex.join([Path(sys.executable).name, "benchmarks/bench.py", *sys.argv[1:]])
    if args.quick:
        checkpoints = {"tiny-a": QUICK_CHECKPOINT}
    else:
        checkpoints = {m: args.checkpoint_root / f"qwen3-{m}-random" for m in args.models}
    missing = [str(p) for p in checkpoints.values() if not (p / "model.safetensors").is_file()]
    if missing:
        raise SystemExit(
            f"missing checkpoints (build them with make_random_checkpoint.py): {missing}"
        )
    args.out_dir.mkdir(parents=True, exist_ok=True)

    started = time.perf_counter()
    info = machine(args.threads)
    if info["load_average_start"][0] > 0.5 * (info["cores"] or 1):
        print(f"WARNING: load average {info['load_average_start']}: timings will be inflated")
    measured = measure_bandwidth(args.threads, args.membw_mb)
    bandwidth = measured["read_bandwidth_gbps"]
    runs, decoder, failures = run_all(args, checkpoints, args.out_dir)
    info["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    result = {
        "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "command": command,
        "duration_s": round(time.perf_counter() - started),
        "machine": info,
        "read_bandwidth_gbps": bandwidth,
        "bandwidth_kernels_gbps": measured.get("kernels_gbps", {}),
        "settings": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "floors": floors(checkpoints, args.dtypes, bandwidth),
        "runs": runs,
        "decoder_modes": decoder,
        "failures": failures,
    }
    markdown = render_markdown(result)
    (args.out_dir / "results.json").write_text(json.dumps(result, indent=2) + "\n")
    (args.out_dir / "results.md").write_text(markdown)
    if args.update_markdown:
        args.markdown.write_text(markdown)
    print(markdown)
    print(f"wrote {args.out_dir / 'results.json'} and results.md")
    if failures:
        raise SystemExit(f"{len(failures)} configuration(s) failed: see 'failures' in results.json")


if __name__ == "__main__":
    main()
