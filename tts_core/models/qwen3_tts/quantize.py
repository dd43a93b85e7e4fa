"""Quantize a loaded Qwen3-TTS model to 8-bit decoder stacks, with outlier smoothing.

quantize_model(model):
1. calibrate: a short greedy generation in the loaded float dtype records, per linear layer,
   the inputs it saw (the prefill and a few frames: talker and code-predictor activations);
2. smooth (SmoothQuant, alpha 0.5): per input channel j, s_j = sqrt(max|x_j| / max|W[:, j]|);
   x_j / s_j and W[:, j] * s_j give the same product, while an activation outlier channel no
   longer sets the per-row scale of every other channel. The 1/s is folded exactly into what
   produces x: the RMSNorm weight before q/k/v and before gate/up, the rows of v_proj before
   o_proj (per kv head, shared by the query heads that read it), the rows of up_proj before
   down_proj;
3. fuse q/k/v and gate/up, and replace every projection of the talker's and the code
   predictor's layers by an Int8Linear (per-row activation scales: see int8.py);
4. the code predictor's 15 lm_heads become Int8Linear too (each is read once a frame: 15 of
   them weigh as much as 1.6 of its layers); the talker's codec_head, the embeddings and the
   text projection stay in the float dtype;
5. the talker -> code predictor projection (1.7B: 2048 -> 1024, run by all 15 passes, ~13 ms
   of a float32 frame) becomes Int8Linear only where it holds the SQNR bound on its own: it has
   no norm to fold smoothing into, so it never decides for the other layers;
6. report each layer's output SQNR on the calibration inputs against the float layer.

`auto` (load_model(quantize="auto"), i.e. min_sqnr_db given) decides by speed as well as
accuracy: before calibrating, `speed_check` times the model's own layer shapes through
Int8Linear (on the kernel this CPU would use: native AVX-512 VNNI / AVX-VNNI / AVX2, or
torch._int_mm) against its float nn.Linear layers, at 1 and 8 rows, over enough layers that the
weights stream from memory as in decoding. int8 is kept only where it is faster at every row
count and every layer holds MIN_SQNR_DB; the measurement is cached per CPU model, kernel, torch
version, threads, dtype and shapes in `$TTS_CORE_CACHE` (default ~/.cache/tts_core)/
int8_speed.json. `report.decision` and the log say what was chosen and why.

load_model saves the outcome (the int8 layers, the folded norms and this report, or a float
decision alone) at the first load, and later loads read it instead of calling quantize_model:
int8_store.py.
"""

from __future__ import annotations

import json
import logging
import os
import platform
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

from .. import native
from ..layers import DecoderLayer, DecoderStack
from .int8 import Int8Linear, sqnr_db

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from .model import Qwen3TTSModel

CALIBRATION_TEXT = (
    "Calibration: the quick brown fox jumps over the lazy dog, and then it asks, quietly, "
    "whether 42 numbers and a few names like Zoë or Ünal still sound right."
)
CALIBRATION_FRAMES = 4  # + the prefill: each code-predictor layer sees 60 passes, each talker
# layer the prompt (~50 positions) and 4 steps: enough rows for channel maxima and SQNR
MAX_ROWS_KEPT = 32  # per call recorded
MAX_ROWS = 128  # per layer in all: the SQNR products run at M = rows, and load time counts
SMOOTH_ALPHA = 0.5
# Each input is recorded once, at one of the projections that read it: q/k/v share theirs, as
# do gate/up (the keys are the groups smoothing_scales and fused_weights use).
RECORD_AT = {"attn_in": "self_attn.q_proj", "o_in": "self_attn.o_proj",
             "mlp_in": "mlp.gate_proj", "down_in": "mlp.down_proj"}  # fmt: skip
MIN_SQNR_DB = 30.0  # `auto` keeps int8 only if every layer holds this on the calibration run
# `auto`'s speed check (module doc):
SPEED_ROWS = (1, 8)  # one stream, and the default batch of streams decoded together
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
    """A frame's decoder-layer projections on this CPU (talker step + code-predictor passes;
    the heads are left out), estimated from timed layers: each stack's time x its layers /
    layers timed x its passes per frame, in ms by number of rows."""

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
        return {"kernel": self.kernel, "float_dtype": self.float_dtype,
                "int8_ms": self.int8_ms, "float_ms": self.float_ms}  # fmt: skip

    @classmethod
    def from_json(cls, entry: dict, source: str) -> SpeedCheck:
        def ms(d: dict) -> dict[int, float]:
            return {int(rows): float(v) for rows, v in d.items()}

        return cls(entry["kernel"], entry["float_dtype"], ms(entry["int8_ms"]),
                   ms(entry["float_ms"]), source)  # fmt: skip


@dataclass
class QuantizationReport:
    mode: str
    layer_sqnr_db: dict[str, float] = field(default_factory=dict)
    applied: bool = False
    speed: SpeedCheck | None = None  # `auto`: int8 against float on this CPU (None: not timed)
    decision: str = ""  # what was chosen and why, in words (logged)
    saved_in: str | None = None  # the int8_store file this report was read from (None: made now)

    @property
    def min_sqnr_db(self) -> float:
        return min(self.layer_sqnr_db.values(), default=float("inf"))

    def to_json(self) -> dict:
        """Everything but `saved_in` (int8_store.py keeps it beside the weights); floats as
        JSON writes them (repr: they read back exactly, infinities included)."""
        speed = self.speed and {**self.speed.to_json(), "source": self.speed.source}
        return {"mode": self.mode, "layer_sqnr_db": self.layer_sqnr_db, "applied": self.applied,
                "speed": speed, "decision": self.decision}  # fmt: skip

    @classmethod
    def from_json(cls, entry: dict, saved_in: str | None = None) -> QuantizationReport:
        speed = entry["speed"]
        return cls(
            mode=str(entry["mode"]),
            layer_sqnr_db={str(k): float(v) for k, v in entry["layer_sqnr_db"].items()},
            applied=bool(entry["applied"]),
            speed=None if speed is None else SpeedCheck.from_json(speed, str(speed["source"])),
            decision=str(entry["decision"]),
            saved_in=saved_in,
        )

    def worst(self, count: int = 3) -> list[tuple[str, float]]:
        return sorted(self.layer_sqnr_db.items(), key=lambda item: item[1])[:count]


def stacks(model: Qwen3TTSModel) -> dict[str, DecoderStack]:
    return {"talker": model.talker.model, "code_predictor": model.talker.code_predictor.model}


@torch.inference_mode()
def quantize_model(
    model: Qwen3TTSModel,
    smooth: bool = True,
    min_sqnr_db: float | None = None,
    check_speed: bool | None = None,
) -> QuantizationReport:
    """Make the decoder stacks int8 in place (see module doc) and return per-layer SQNR.

    With `min_sqnr_db`, nothing is changed unless every layer reaches it on the calibration
    run (`report.applied` says which): the float model stays exactly as loaded otherwise.
    `check_speed` (default: when `min_sqnr_db` is given, as `auto` does) first times int8
    against the float layers on this CPU (speed_check) and, where int8 is slower, changes
    nothing and does not calibrate. `report.decision` says what was chosen and why.
    """
    report, plans = QuantizationReport("int8"), []
    float_name = str(model.dtype).removeprefix("torch.")
    if check_speed is None:
        check_speed = min_sqnr_db is not None
    if check_speed:
        report.speed = speed_check(model)
        if report.speed is not None and not report.speed.int8_faster:
            return _decided(report, f"kept {float_name}: int8 is slower here "
                                    f"({report.speed.describe()})")  # fmt: skip
    inputs = calibrate(model)
    for stack_name, stack in stacks(model).items():
        for index, layer in enumerate(stack.layers):
            prefix = f"{stack_name}.layers.{index}"
            mine = {
                g: inputs[(stack_name, index, g)]
                for g in RECORD_AT
                if (stack_name, index, g) in inputs
            }
            scales = smoothing_scales(layer, mine) if smooth else {}
            modules = {}
            for group, (attr, weight) in fused_weights(layer, scales).items():
                modules[attr] = Int8Linear(weight)
                if group in mine:
                    x = mine[group] / scales[group] if group in scales else mine[group]
                    report.layer_sqnr_db[f"{prefix}.{attr}"] = sqnr_db(
                        x @ weight.t(), modules[attr](x)
                    )
            plans.append((layer, scales, modules))
    heads = model.talker.code_predictor.lm_head
    quantized_heads = [Int8Linear.from_linear(head) for head in heads]
    for index, (head, quantized) in enumerate(zip(heads, quantized_heads, strict=True)):
        x = inputs.get(("code_predictor", "lm_head", index))
        if x is not None:
            report.layer_sqnr_db[f"code_predictor.lm_head.{index}"] = sqnr_db(
                x @ head.weight.detach().float().t(), quantized(x)
            )
    if min_sqnr_db is not None and report.min_sqnr_db < min_sqnr_db:
        name, worst = report.worst(1)[0]
        return _decided(report, f"kept {float_name}: layer {name} keeps {worst:.1f} dB SQNR "
                                f"< {min_sqnr_db:g} dB")  # fmt: skip
    for layer, scales, modules in plans:
        _install(layer, scales, modules)
    for index, quantized in enumerate(quantized_heads):
        heads[index] = quantized
    _quantize_projection(model, inputs.get(("code_predictor", "projection")), report)
    report.applied = True
    return _decided(report, "int8: " + applied_because(report, min_sqnr_db, check_speed))


def applied_because(report, min_sqnr_db: float | None, check_speed: bool, checked: str = "") -> str:  # noqa: ANN001 - any report with min_sqnr_db and speed
    """Why int8 was kept, for the decision line: asked for, or every layer's SQNR (and what
    else was `checked`), and the speed check's outcome."""
    if min_sqnr_db is None:
        why = "asked for"
    else:
        why = f"every layer >= {min_sqnr_db:g} dB SQNR (min {report.min_sqnr_db:.1f})"
    why += checked
    if report.speed is not None:
        why += f", faster here ({report.speed.describe()})"
    elif check_speed:
        why += ", not timed (layers too small for speed to matter)"
    return why


def _decided(report: QuantizationReport, decision: str) -> QuantizationReport:
    report.decision = decision
    log.info("quantize: %s", decision)
    return report


# ------------------------------------------------------------------------------ speed (auto)
def speed_check(model: Qwen3TTSModel) -> SpeedCheck | None:
    """int8 against float on this CPU for this model's layers: from the cache, else measured
    (measure_speed) and cached; None for a model too small to time (MIN_TIMED_BYTES)."""
    total = sum(_int8_bytes(layer) for stack in stacks(model).values() for layer in stack.layers)
    if total < MIN_TIMED_BYTES:
        return None
    key = _speed_key(model)
    path = _speed_cache_path()
    cached = _read_json(path).get(key) if path is not None else None
    if cached is not None:
        try:
            return SpeedCheck.from_json(cached, f"cached in {path}")
        except (KeyError, TypeError, ValueError, AttributeError):
            pass  # an entry of an older layout: measure again
    check = measure_speed(model)
    for _ in range(SPEED_RETRIES):  # "slower" is kept for good: make sure it is not noise
        if check.int8_faster:
            break
        check = _best_of(check, measure_speed(model))
    if path is not None:
        _write_json_entry(path, key, check.to_json())
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
def measure_speed(model: Qwen3TTSModel, repeats: int = SPEED_REPEATS) -> SpeedCheck:
    """Time each stack's first layers (TIMED_BYTES of int8 weights, or all) as the model runs
    them: its float nn.Linear projections (q, k, v, o, gate, up, down) against Int8Linear over
    the fused ones (qkv, o, gate_up, down: what quantize_model installs), on random rows, at
    each of SPEED_ROWS; best of `repeats`, the two alternated."""
    kernel = native.int8_linear()
    int8_ms = dict.fromkeys(SPEED_ROWS, 0.0)
    float_ms = dict.fromkeys(SPEED_ROWS, 0.0)
    budget = max(TIMED_BYTES, 2 * _last_level_cache_bytes())
    passes = {"talker": 1, "code_predictor": len(model.talker.code_predictor.lm_head)}
    for name, stack in stacks(model).items():
        layers, timed, size = list(stack.layers), [], 0
        for layer in layers:
            timed.append(layer)
            size += _int8_bytes(layer)
            if size >= budget:
                break
        floats = [m for layer in timed for m in _float_projections(layer)]
        int8s = [Int8Linear(w) for layer in timed for _, w in fused_weights(layer, {}).values()]
        scale = passes[name] * len(layers) / len(timed)
        for rows in SPEED_ROWS:
            xs = {m.in_features: torch.randn(rows, m.in_features, dtype=model.dtype,
                                             device=model.device) for m in floats}  # fmt: skip
            times = _best_ms_alternated([_runner(int8s, xs), _runner(floats, xs)], repeats)
            int8_ms[rows] += times[0] * scale
            float_ms[rows] += times[1] * scale
        del int8s
    return SpeedCheck(
        kernel="torch._int_mm" if kernel is None else f"native {kernel.isa.name}",
        float_dtype=str(model.dtype).removeprefix("torch."),
        int8_ms={rows: round(ms, 3) for rows, ms in int8_ms.items()},
        float_ms={rows: round(ms, 3) for rows, ms in float_ms.items()},
    )


def _runner(modules: list[nn.Module], xs: dict[int, torch.Tensor]) -> Callable[[], object]:
    return lambda: [m(xs[m.in_features]) for m in modules]


def _float_projections(layer: DecoderLayer) -> list[nn.Linear]:
    attn, mlp = layer.self_attn, layer.mlp
    return [attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj,
            mlp.gate_proj, mlp.up_proj, mlp.down_proj]  # fmt: skip


def _int8_bytes(layer: DecoderLayer) -> int:
    return sum(m.weight.numel() for m in _float_projections(layer))


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


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith(("model name", "hardware", "cpu model")):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _speed_key(model: Qwen3TTSModel) -> str:
    """What the timing depends on: the CPU, the int8 kernel, torch, threads, dtype, shapes."""
    kernel = native.int8_linear()
    shapes = {
        name: [
            len(stack.layers),
            *(tuple(m.weight.shape) for m in _float_projections(stack.layers[0])),
        ]
        for name, stack in stacks(model).items()
    }
    return json.dumps({
        "cpu": _cpu_model(),
        "kernel": "torch._int_mm" if kernel is None else kernel.isa.name,
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "dtype": str(model.dtype),
        "passes": len(model.talker.code_predictor.lm_head),
        "shapes": shapes,
        "rows": list(SPEED_ROWS),
    }, sort_keys=True)  # fmt: skip


def _speed_cache_path() -> Path | None:
    try:
        return native.cache_root() / SPEED_CACHE_FILE
    except RuntimeError:  # no home directory
        return None


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write_json_entry(path: Path, key: str, entry: dict) -> None:
    """Add one entry, written beside the file and renamed (readers never see half a file); a
    cache that cannot be written is only logged: the next load measures again."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        data = _read_json(path)
        data[key] = entry
        with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, suffix=".tmp") as f:
            json.dump(data, f, indent=1)
        os.replace(f.name, path)
    except OSError as error:
        log.info("could not cache the int8 speed check in %s (%s)", path, error)


def _quantize_projection(model: Qwen3TTSModel, x: torch.Tensor | None,
                         report: QuantizationReport) -> None:  # fmt: skip
    """Step 5 of the module doc: in place, and in the report, only if it holds MIN_SQNR_DB."""
    predictor = model.talker.code_predictor
    projection = predictor.small_to_mtp_projection
    if not isinstance(projection, nn.Linear) or x is None:
        return
    quantized = Int8Linear.from_linear(projection)
    sqnr = sqnr_db(F.linear(x, projection.weight.detach().float(),
                            projection.bias.detach().float()), quantized(x))  # fmt: skip
    if sqnr >= MIN_SQNR_DB:
        report.layer_sqnr_db["code_predictor.small_to_mtp_projection"] = sqnr
        predictor.small_to_mtp_projection = quantized


@torch.inference_mode()
def calibrate(model: Qwen3TTSModel) -> dict[tuple, torch.Tensor]:
    """(rows, in) float32 inputs from a greedy run, keyed (stack, layer index, input group)
    for the layers (see RECORD_AT) and ("code_predictor", "lm_head", i) for the heads."""
    recorded: dict[tuple, list[torch.Tensor]] = defaultdict(list)
    hooks = []
    for stack_name, stack in stacks(model).items():
        for index, layer in enumerate(stack.layers):
            for group, name in RECORD_AT.items():
                sink = recorded[(stack_name, index, group)]
                hooks.append(layer.get_submodule(name).register_forward_pre_hook(_recorder(sink)))
    for index, head in enumerate(model.talker.code_predictor.lm_head):
        sink = recorded[("code_predictor", "lm_head", index)]
        hooks.append(head.register_forward_pre_hook(_recorder(sink)))
    projection = model.talker.code_predictor.small_to_mtp_projection
    if isinstance(projection, nn.Linear):
        sink = recorded[("code_predictor", "projection")]
        hooks.append(projection.register_forward_pre_hook(_recorder(sink)))
    try:
        voice = model.silent_voice()
        prompt, settings = model.plan(CALIBRATION_TEXT, voice, "english", greedy=True,
                                      length_cap=False, max_new_tokens=CALIBRATION_FRAMES + 1)  # fmt: skip
        for _ in model.frames(prompt, settings):
            pass
    finally:
        for hook in hooks:
            hook.remove()
    return {key: _spread(torch.cat(rows), MAX_ROWS) for key, rows in recorded.items() if rows}


def _spread(rows: torch.Tensor, count: int) -> torch.Tensor:
    """At most `count` rows, evenly spaced (prefill and decode steps both represented)."""
    if rows.shape[0] <= count:
        return rows
    return rows[torch.linspace(0, rows.shape[0] - 1, count).round().long()]


def _recorder(sink: list[torch.Tensor]):  # noqa: ANN202
    def hook(_module: nn.Module, args: tuple) -> None:
        x = args[0].detach().reshape(-1, args[0].shape[-1]).float()
        sink.append(x[-MAX_ROWS_KEPT:].clone())

    return hook


# ------------------------------------------------------------------------------ smoothing
def smoothing_scales(
    layer: DecoderLayer, inputs: dict[str, torch.Tensor]
) -> dict[str, torch.Tensor]:
    """Per input channel of each projection group, the SmoothQuant scale (module doc)."""
    attn, mlp = layer.self_attn, layer.mlp
    scales = {}
    if "attn_in" in inputs:
        scales["attn_in"] = _scales(inputs["attn_in"], (attn.q_proj, attn.k_proj, attn.v_proj))
    if "mlp_in" in inputs:
        scales["mlp_in"] = _scales(inputs["mlp_in"], (mlp.gate_proj, mlp.up_proj))
    if "o_in" in inputs:
        scales["o_in"] = _shared_per_kv_head(_scales(inputs["o_in"], (attn.o_proj,)), attn)
    if "down_in" in inputs:
        scales["down_in"] = _scales(inputs["down_in"], (mlp.down_proj,))
    return scales


def fused_weights(
    layer: DecoderLayer, scales: dict[str, torch.Tensor]
) -> dict[str, tuple[str, torch.Tensor]]:
    """{input group: (attribute, (out, in) float32 weight)} of the fused, smoothed projections:
    the columns times the input's scale, and the rows of v / up divided by the scale of the
    input they produce (o_proj's / down_proj's)."""
    attn, mlp = layer.self_attn, layer.mlp
    one = torch.ones(())

    def w(linear: nn.Linear) -> torch.Tensor:
        return linear.weight.detach().float()

    s_attn, s_mlp = scales.get("attn_in", one), scales.get("mlp_in", one)
    s_o, s_down = scales.get("o_in", one), scales.get("down_in", one)
    v_rows = (
        s_o.view(attn.kv_heads, attn.heads // attn.kv_heads, attn.head_dim)[:, 0]
        if s_o.dim()
        else one
    )
    qkv = (
        torch.cat([w(attn.q_proj), w(attn.k_proj), w(attn.v_proj) / v_rows.reshape(-1, 1)]) * s_attn
    )
    gate_up = torch.cat([w(mlp.gate_proj), w(mlp.up_proj) / s_down.reshape(-1, 1)]) * s_mlp
    return {
        "attn_in": ("self_attn.qkv_proj", qkv),
        "o_in": ("self_attn.o_proj", w(attn.o_proj) * s_o),
        "mlp_in": ("mlp.gate_up_proj", gate_up),
        "down_in": ("mlp.down_proj", w(mlp.down_proj) * s_down),
    }


def _install(layer: DecoderLayer, scales: dict[str, torch.Tensor], modules: dict) -> None:
    """Fold the input scales of q/k/v and gate/up into their RMSNorm weights and put the int8
    modules in place of the float projections."""
    attn, mlp = layer.self_attn, layer.mlp
    with torch.no_grad():
        for norm, group in (
            (layer.input_layernorm, "attn_in"),
            (layer.post_attention_layernorm, "mlp_in"),
        ):
            if group in scales:
                norm.weight.div_(scales[group].to(norm.weight.dtype))
    attn.qkv_sizes = (attn.q_proj.out_features, attn.k_proj.out_features, attn.v_proj.out_features)
    del attn.q_proj, attn.k_proj, attn.v_proj, mlp.gate_proj, mlp.up_proj
    attn.qkv_proj, attn.o_proj = modules["self_attn.qkv_proj"], modules["self_attn.o_proj"]
    mlp.gate_up_proj, mlp.down_proj = modules["mlp.gate_up_proj"], modules["mlp.down_proj"]


def _scales(x: torch.Tensor, consumers: tuple[nn.Linear, ...]) -> torch.Tensor:
    activation = x.abs().amax(dim=0).clamp_min(1e-5)  # (in,)
    weight = torch.stack([c.weight.detach().abs().amax(dim=0).float() for c in consumers])
    weight = weight.amax(dim=0).clamp_min(1e-5)
    return (activation**SMOOTH_ALPHA / weight ** (1 - SMOOTH_ALPHA)).clamp(1e-2, 1e2)


def _shared_per_kv_head(s: torch.Tensor, attn: nn.Module) -> torch.Tensor:
    """o_proj's input channel (head h, dim d) comes from v row (kv head h // group, d), as
    SDPA's enable_gqa pairs them: heads that share a kv head share the scale (the largest)."""
    group = attn.heads // attn.kv_heads
    per_kv = s.view(attn.kv_heads, group, attn.head_dim).amax(dim=1, keepdim=True)
    return per_kv.expand(attn.kv_heads, group, attn.head_dim).reshape(-1)
