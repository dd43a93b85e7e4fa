"""`auto`'s speed check: a model's own layer shapes through Int8Linear (on the kernel this CPU
would use: native AVX-512 VNNI / AVX-VNNI / AVX2 / NEON, or torch._int_mm) against its float
layers, at each of the model's row counts, over enough layers that the weights stream from
memory as in decoding. int8 counts as faster only where it is at every row count. The
measurement is cached per CPU model, kernel, torch version, threads and what the model adds to
the key (dtype, shapes, ...) in `$TTS_CORE_CACHE` (default ~/.cache/tts_core)/int8_speed.json.
"""

from __future__ import annotations

import json
import logging
import os
import platform
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import BinaryIO

import torch
from torch import nn

from ..models import native
from .linear import Int8Linear

log = logging.getLogger(__name__)

MIN_TIMED_BYTES = 32 << 20  # int8 layers smaller than this (the test fixtures) are not timed:
# their calls cost Python overhead, not weight reads, and SQNR alone decides
TIMED_BYTES = 64 << 20  # per stack at least this many int8 bytes timed (and twice the last-level
# cache): the weights come from memory, as a real model's do at every step
SPEED_REPEATS = 5  # best of, int8 and float alternated
# Measured again (each format's best kept) before "int8 is slower" is believed and cached: on a
# busy machine one measurement once put int8 at 3137 ms a frame against ~60 ms idle
SPEED_RETRIES = 2
SPEED_CACHE_FILE = "int8_speed.json"


@dataclass
class SpeedCheck:
    """A frame's (or token's) quantized projections on this CPU, estimated from timed layers:
    each stack's time x its layers / layers timed x its passes per frame, in ms by rows."""

    kernel: str  # what the int8 layers run on: "native avx2", ..., "torch._int_mm"
    float_dtype: str  # the float layers' dtype: "float32", "bfloat16"
    int8_ms: dict[int, float]
    float_ms: dict[int, float]
    source: str = "measured"  # or "cached in PATH"

    @property
    def int8_faster(self) -> bool:
        return all(self.int8_ms[rows] < self.float_ms[rows] for rows in self.float_ms)

    def describe(self) -> str:
        times = ", ".join(
            f"{rows} row{'s' * (rows > 1)} {self.int8_ms[rows]:.1f} vs {self.float_ms[rows]:.1f} ms"
            for rows in sorted(self.float_ms)
        )
        return f"int8 on {self.kernel} vs {self.float_dtype}: {times} a frame, {self.source}"

    def to_json(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "source"}

    @classmethod
    def from_json(cls, entry: dict, source: str) -> SpeedCheck:
        def ms(d: dict) -> dict[int, float]:
            return {int(rows): float(v) for rows, v in d.items()}

        return cls(
            entry["kernel"],
            entry["float_dtype"],
            ms(entry["int8_ms"]),
            ms(entry["float_ms"]),
            source,
        )


@dataclass
class TimedStack:
    """One stack of a model's layers as the speed check times it."""

    layers: list[nn.Module]
    passes: int  # runs of the stack per frame (token)
    # (float projection, its input width) of a layer, as the float model runs them
    floats: Callable[[nn.Module], list[tuple[nn.Module, int]]]
    # ((out, in) weight, bias or None) of the Int8Linear layers quantizing installs for a layer
    int8s: Callable[[nn.Module], list[tuple[torch.Tensor, torch.Tensor | None]]]

    def layer_bytes(self, layer: nn.Module) -> int:
        return sum(module.weight.numel() for module, _ in self.floats(layer))


class Timed:
    """What a model declares for the speed check (quantize.Int8Target derives from it)."""

    float_dtype: torch.dtype
    device: torch.device
    speed_rows: tuple[int, ...] = (1,)

    def timed_stacks(self) -> list[TimedStack]:
        raise NotImplementedError

    def speed_key(self) -> dict:
        """What the timing depends on besides the CPU, kernel, torch, threads and rows."""
        raise NotImplementedError


def speed_check(target: Timed) -> SpeedCheck | None:
    """int8 against float on this CPU for `target`'s layers: from the cache, else measured
    (measure_speed) and cached; None for a model too small to time (MIN_TIMED_BYTES)."""
    stacks = target.timed_stacks()
    if sum(s.layer_bytes(layer) for s in stacks for layer in s.layers) < MIN_TIMED_BYTES:
        return None
    key = _speed_key(target)
    path = native.cache_path(SPEED_CACHE_FILE)
    cached = read_json(path).get(key) if path is not None else None
    if cached is not None:
        try:
            return SpeedCheck.from_json(cached, f"cached in {path}")
        except (KeyError, TypeError, ValueError, AttributeError):
            pass  # an entry of an older layout: measure again
    check = measure_speed(target)
    for _ in range(SPEED_RETRIES):  # "slower" is kept for good: make sure it is not noise
        if check.int8_faster:
            break
        check = _best_of(check, measure_speed(target))
    if path is not None:
        update_json(path, lambda data: {**data, key: check.to_json()})
    return check


def _best_of(a: SpeedCheck, b: SpeedCheck) -> SpeedCheck:
    """Each format's best time at each row count over two measurements: other work on the
    machine only ever adds time, so the minimum is the closer estimate of the CPU's speed."""
    return SpeedCheck(
        a.kernel,
        a.float_dtype,
        {rows: min(a.int8_ms[rows], b.int8_ms[rows]) for rows in a.int8_ms},
        {rows: min(a.float_ms[rows], b.float_ms[rows]) for rows in a.float_ms},
    )


@torch.inference_mode()
def measure_speed(target: Timed, repeats: int = SPEED_REPEATS) -> SpeedCheck:
    """Time each stack's first layers (TIMED_BYTES of int8 weights, or all) as the model runs
    them: its float projections against the Int8Linear layers quantizing would install, on
    random rows, at each of the target's speed_rows; best of `repeats`, the two alternated."""
    int8_ms = dict.fromkeys(target.speed_rows, 0.0)
    float_ms = dict.fromkeys(target.speed_rows, 0.0)
    budget = max(TIMED_BYTES, 2 * _last_level_cache_bytes())
    for stack in target.timed_stacks():
        timed, size = [], 0
        for layer in stack.layers:
            timed.append(layer)
            size += stack.layer_bytes(layer)
            if size >= budget:
                break
        floats = [pair for layer in timed for pair in stack.floats(layer)]
        int8s = [Int8Linear(w, b) for layer in timed for w, b in stack.int8s(layer)]
        scale = stack.passes * len(stack.layers) / len(timed)
        for rows in target.speed_rows:
            xs = {
                width: torch.randn(rows, width, dtype=target.float_dtype, device=target.device)
                for _, width in floats
            }
            runs = [_runner([(m, m.in_features) for m in int8s], xs), _runner(floats, xs)]
            times = _best_ms_alternated(runs, repeats)
            int8_ms[rows] += times[0] * scale
            float_ms[rows] += times[1] * scale
        del int8s
    kernel = native.int8_linear()
    return SpeedCheck(
        kernel="torch._int_mm" if kernel is None else f"native {kernel.isa.name}",
        float_dtype=str(target.float_dtype).removeprefix("torch."),
        int8_ms={rows: round(ms, 3) for rows, ms in int8_ms.items()},
        float_ms={rows: round(ms, 3) for rows, ms in float_ms.items()},
    )


def _runner(
    modules: list[tuple[nn.Module, int]], xs: dict[int, torch.Tensor]
) -> Callable[[], object]:
    return lambda: [module(xs[width]) for module, width in modules]


def _best_ms_alternated(runs: list[Callable[[], object]], repeats: int) -> list[float]:
    for run in runs:  # warm: pages touched, kernels loaded, scratch allocated
        run()
    best = [float("inf")] * len(runs)
    for _ in range(repeats):
        for i, run in enumerate(runs):
            start = time.perf_counter()
            run()
            best[i] = min(best[i], time.perf_counter() - start)
    return [b * 1000 for b in best]


def _last_level_cache_bytes() -> int:
    """The L3 (or last) cache of CPU 0 from sysfs; 32 MiB where it cannot be read."""
    caches = sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"))
    for path in reversed(caches):
        try:
            text = path.read_text().strip().upper()
            factor = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
            return int(text.rstrip("KMG")) * factor
        except (OSError, ValueError):
            continue
    return 32 << 20


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith(("model name", "hardware", "cpu model")):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def kernel_name() -> str:
    """The int8 kernel this process runs: an ISA name (native.INT8_ISAS) or torch._int_mm."""
    kernel = native.int8_linear()
    return "torch._int_mm" if kernel is None else kernel.isa.name


def _speed_key(target: Timed) -> str:
    """What the timing depends on: the CPU, the int8 kernel, torch, threads, the model's part."""
    return json.dumps(
        {
            "cpu": cpu_model(),
            "kernel": kernel_name(),
            "torch": torch.__version__,
            "threads": torch.get_num_threads(),
            "rows": list(target.speed_rows),
            **target.speed_key(),
        },
        sort_keys=True,
    )


def read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def write_atomically(path: Path, write: Callable[[BinaryIO], object]) -> None:
    """`write` into a temp file beside `path`, then rename it over `path`: a reader sees the
    old file or the new one, whole; writers at once each rename a whole file."""
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


def update_json(path: Path, change: Callable[[dict], dict]) -> None:
    """The JSON object in `path` (a cache: {} where unreadable) replaced by `change` of it,
    written whole; a cache that cannot be written is only logged (it is made again)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps(change(read_json(path)), indent=1).encode()
        write_atomically(path, lambda f: f.write(text))
    except OSError as error:
        log.info("could not write %s (%s)", path, error)
