"""Chatterbox Turbo's T3 (GPT-2 medium) on the project's 8-bit CPU path: the projections of every
GPT-2 block become qwen3_tts/int8.py's `Int8Linear` (int8 weights per output channel, int8
activations per row, exact int32 sums on the models/native kernel this CPU runs: AVX-512 VNNI,
AVX-VNNI, AVX2, NEON, else torch._int_mm; all equal bit for bit), with Qwen3-TTS's SmoothQuant
step where GPT-2 has something linear to fold it into.

`quantize_turbo(model, quantize)` (ChatterboxTurboModel.from_pretrained's `quantize`, the same
modes as Qwen3-TTS's load_model: None / "none", "int8", "auto"):

1. calibrate: T3 teacher-forced on CALIBRATION_TEXT in the checkpoint's built-in voice (its
   speech prompt tokens are the forced tokens), the prefill and CALIBRATION_STEPS steps in
   float32; the inputs of every projection and the speech head's logits are kept;
2. smooth (alpha 0.5, qwen3_tts/quantize.py's scales): c_attn's input folded into ln_1 (weight
   and bias), c_fc's into ln_2, attn.c_proj's into the value columns of c_attn (attention mixes
   positions, not channels, so a value channel's scale passes through it exactly). mlp.c_proj
   reads gelu(c_fc(x)), which is not linear: no smoothing there;
3. every c_attn, attn.c_proj, c_fc and mlp.c_proj becomes an Int8Linear over the (out, in)
   transpose of GPT-2's [in, out] Conv1D weight and its bias. wpe, the embeddings, the layer
   norms, cond_enc and the speech head stay float32 (the head makes the logits directly and is
   2% of T3's weight bytes);
4. report each layer's output SQNR on the calibration inputs, and the SNR of the int8 speech
   head logits against the float32 ones over the same forced run (`logits_snr_db`).

"auto" keeps int8 only on a CPU where it is faster than float32 at one row (T3 decodes each
request as one row; qwen3_tts/quantize.py's speed check, cached in int8_speed.json under its own
key) and where every layer AND the logits hold MIN_SQNR_DB (30 dB); otherwise T3 stays exactly
as loaded (the float modules are put back). "int8" quantizes whatever the figures (they are
still reported). `model.t3_quantization` holds the report (None: float32), the model's
`format_decision` why, in words. Nothing is saved (Qwen3's int8_store is not used): the work at
load is the speed check (cached), a float32 and an int8 teacher-forced pass over ~400
positions + 16 steps and the rounding: 11.7 s in all at the released size, one thread.

Measured (BENCHMARKS.md, benchmarks/chatterbox_int8_bench.py): logits 38.8-39.5 dB on the tiny
checkpoints, 31.6-32.7 dB at the released size with random weights, and 2.5x faster per token
at one thread (100 -> 40 ms). Int8Linear rows are independent of their batch, as T3's float
1-row addmm is not (serving.py): so the served engine runs one T3 step for every row where T3
is int8, each row's bits those of its step alone (attention per row over its own cache).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass

import torch
from torch import nn

from .. import native
from ..qwen3_tts.int8 import Int8Linear, int8_matmul_available, sqnr_db
from ..qwen3_tts.quantize import (
    MAX_ROWS,
    MIN_SQNR_DB,
    MIN_TIMED_BYTES,
    SPEED_REPEATS,
    SPEED_RETRIES,
    TIMED_BYTES,
    QuantizationReport,
    SpeedCheck,
    _best_ms_alternated,
    _best_of,
    _cpu_model,
    _last_level_cache_bytes,
    _read_json,
    _scales,
    _speed_cache_path,
    _spread,
    _write_json_entry,
    applied_because,
)
from .gpt2 import Conv1D, GPT2Block
from .sampling import TurboSampling

log = logging.getLogger(__name__)

QUANTIZE_MODES = ("none", "int8", "auto")
CALIBRATION_TEXT = (
    "Calibration: the quick brown fox jumps over the lazy dog, and then it asks, quietly, "
    "whether 42 numbers and a few names still sound right. [chuckle] Okay."
)
CALIBRATION_STEPS = 16  # forced draws after the prefill: decode rows in every layer's inputs
# and 17 rows of logits for the end-to-end SNR
PROJECTIONS = ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj")
ROWS_KEPT = 64  # per call recorded (the prefill: ~400 positions at the released size)
SPEED_ROWS = (1,)  # T3 decodes every request as its own row (serving.py)


@dataclass
class T3QuantizationReport(QuantizationReport):
    """QuantizationReport (per-layer SQNR, speed, decision) + the logits' end-to-end SNR."""

    logits_snr_db: float | None = None  # int8 vs float32 speech-head logits, calibration run

    def to_json(self) -> dict:
        return {**super().to_json(), "logits_snr_db": self.logits_snr_db}


def quantize_turbo(model, quantize: str | None) -> T3QuantizationReport | None:
    """Apply `quantize` to `model.t3` in place (module doc); sets `model.t3_quantization` and
    `model.format_decision` and returns the report (None for "none")."""
    mode = "none" if quantize is None else str(quantize).lower()
    if mode not in QUANTIZE_MODES:
        raise ValueError(f"quantize must be one of {QUANTIZE_MODES}, got {quantize!r}")
    model.t3_quantization, model.format_decision = None, ""
    if mode == "none":
        return None
    device = torch.device(model.device)
    if device.type != "cpu":
        if mode == "int8":
            raise ValueError("quantize='int8' is the CPU path (Chatterbox Turbo runs float32)")
        model.format_decision = f"kept float32: no int8 path on {device}"
        return None
    if mode == "auto" and native.int8_linear() is None and not int8_matmul_available():
        model.format_decision = "kept float32: no int8 matmul on this CPU"
        return None
    speaker_emb, prompt_tokens = calibration_voice(model)
    text_ids = model._ids(CALIBRATION_TEXT)
    auto = mode == "auto"
    report = quantize_t3(model.t3, speaker_emb, prompt_tokens, text_ids,
                         min_sqnr_db=MIN_SQNR_DB if auto else None, check_speed=auto)  # fmt: skip
    model.t3_quantization = report if report.applied else None
    model.format_decision = report.decision
    return report


def t3_weight_format(model) -> str:
    """ "int8" when T3's blocks run Int8Linear, else "float32" (S3Gen and HiFT stay float32)."""
    return "int8" if any(isinstance(m, Int8Linear) for m in model.t3.modules()) else "float32"


def calibration_voice(model) -> tuple[torch.Tensor, torch.Tensor]:
    """(speaker_emb (1, 256), speech prompt tokens (1, P)): the built-in voice's, else a fixed
    random one (a checkpoint without conds.pt)."""
    voice = model.builtin_voice
    if voice is not None:
        return voice.speaker_emb, voice.t3_prompt_tokens
    g = torch.Generator().manual_seed(0)
    return (torch.randn(1, 256, generator=g).to(model.device),
            torch.randint(0, 6561, (1, 375), generator=g).to(model.device))  # fmt: skip


@torch.inference_mode()
def quantize_t3(
    t3: nn.Module,
    speaker_emb: torch.Tensor,
    prompt_tokens: torch.Tensor,
    text_ids: torch.Tensor,
    smooth: bool = True,
    min_sqnr_db: float | None = None,
    check_speed: bool | None = None,
) -> T3QuantizationReport:
    """Make T3's GPT-2 projections int8 in place (module doc); with `min_sqnr_db` only if every
    layer and the logits hold it (T3 is left exactly as loaded otherwise); `check_speed`
    (default: with `min_sqnr_db`) first times int8 against float32 and keeps float32 where
    int8 is not faster."""
    try:
        return _quantize_t3(t3, speaker_emb, prompt_tokens, text_ids, smooth, min_sqnr_db,
                            check_speed)  # fmt: skip
    finally:  # voice prefixes computed by the calibration or with the old weights
        t3.forget_prefixes()


def _quantize_t3(
    t3: nn.Module,
    speaker_emb: torch.Tensor,
    prompt_tokens: torch.Tensor,
    text_ids: torch.Tensor,
    smooth: bool,
    min_sqnr_db: float | None,
    check_speed: bool | None,
) -> T3QuantizationReport:
    report = T3QuantizationReport("int8")
    if check_speed is None:
        check_speed = min_sqnr_db is not None
    if check_speed:
        report.speed = speed_check(t3)
        if report.speed is not None and not report.speed.int8_faster:
            return _decided(report, f"kept float32: int8 is slower here "
                                    f"({report.speed.describe()})")  # fmt: skip
    forced = calibration_tokens(prompt_tokens)
    inputs, float_logits = calibrate(t3, speaker_emb, prompt_tokens, text_ids, forced)
    plans = []
    for index, block in enumerate(t3.tfmr.h):
        mine = {name: inputs[(index, name)] for name in PROJECTIONS if (index, name) in inputs}
        scales = smoothing_scales(block, mine) if smooth else {}
        weights = smoothed_weights(block, scales)
        modules = {}
        for name, (weight, bias) in weights.items():
            modules[name] = Int8Linear(weight, bias)
            if name in mine:
                x = mine[name] / scales[name] if name in scales else mine[name]
                report.layer_sqnr_db[f"tfmr.h.{index}.{name}"] = sqnr_db(
                    torch.addmm(bias, x, weight.t()), modules[name](x)
                )
        plans.append((block, scales, modules))
    if min_sqnr_db is not None and report.min_sqnr_db < min_sqnr_db:
        name, worst = report.worst(1)[0]
        return _decided(report, f"kept float32: layer {name} keeps {worst:.1f} dB SQNR "
                                f"< {min_sqnr_db:g} dB")  # fmt: skip
    saved = [_install(block, scales, modules) for block, scales, modules in plans]
    _, int8_logits = calibrate(t3, speaker_emb, prompt_tokens, text_ids, forced, record=False)
    report.logits_snr_db = sqnr_db(float_logits, int8_logits)
    if min_sqnr_db is not None and report.logits_snr_db < min_sqnr_db:
        for block, original in zip(t3.tfmr.h, saved, strict=True):
            _restore(block, original)
        return _decided(report, f"kept float32: the int8 logits keep {report.logits_snr_db:.1f} "
                                f"dB SNR < {min_sqnr_db:g} dB")  # fmt: skip
    report.applied = True
    logits = f", logits {report.logits_snr_db:.1f} dB SNR"
    return _decided(report, "T3 int8: " + applied_because(report, min_sqnr_db, check_speed, logits))


def _decided(report: T3QuantizationReport, decision: str) -> T3QuantizationReport:
    report.decision = decision
    log.info("quantize: %s", decision)
    return report


def calibration_tokens(prompt_tokens: torch.Tensor) -> torch.Tensor:
    """CALIBRATION_STEPS + 1 forced speech tokens: the voice's own prompt tokens (speech as
    the model reads it), repeated if the prompt is shorter."""
    tokens = prompt_tokens.reshape(-1)
    reps = -(-(CALIBRATION_STEPS + 1) // max(len(tokens), 1))
    return tokens.repeat(reps)[: CALIBRATION_STEPS + 1].clone()


@torch.inference_mode()
def calibrate(
    t3: nn.Module,
    speaker_emb: torch.Tensor,
    prompt_tokens: torch.Tensor,
    text_ids: torch.Tensor,
    forced: torch.Tensor,
    record: bool = True,
) -> tuple[dict[tuple[int, str], torch.Tensor], torch.Tensor]:
    """({(block index, projection): (rows, in) float32 inputs}, (steps, V) logits) of a
    teacher-forced run (prefill + one step per forced token)."""
    recorded: dict[tuple[int, str], list[torch.Tensor]] = {}
    hooks = []
    t3.forget_prefixes()  # the voice's positions computed (and recorded) by these weights
    if record:
        for index, block in enumerate(t3.tfmr.h):
            for name in PROJECTIONS:
                sink = recorded.setdefault((index, name), [])
                hooks.append(block.get_submodule(name).register_forward_pre_hook(_keeper(sink)))
    logits: list[torch.Tensor] = []
    try:
        for _ in t3.draws(speaker_emb, prompt_tokens, text_ids, TurboSampling(), None,
                          forced=forced, logits_seen=logits):  # fmt: skip
            pass
    finally:
        for hook in hooks:
            hook.remove()
    inputs = {key: _spread(torch.cat(rows), MAX_ROWS) for key, rows in recorded.items() if rows}
    return inputs, torch.cat(logits).float()


def _keeper(sink: list[torch.Tensor]):  # noqa: ANN202
    """A pre-hook keeping ROWS_KEPT evenly spaced input rows of each call: the prefill's
    first positions (speaker, voice prompt) as well as its last."""

    def hook(_module: nn.Module, args: tuple) -> None:
        x = args[0].detach().reshape(-1, args[0].shape[-1]).float()
        sink.append(_spread(x, ROWS_KEPT).clone())

    return hook


# ------------------------------------------------------------------------------ smoothing
def smoothing_scales(block: GPT2Block, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Per input channel, SmoothQuant's scale for the projections whose input can absorb it
    (module doc: not mlp.c_proj)."""
    scales = {}
    for name in ("attn.c_attn", "attn.c_proj", "mlp.c_fc"):
        if name in inputs:
            scales[name] = _scales(inputs[name], (_as_linear(block.get_submodule(name)),))
    return scales


def smoothed_weights(
    block: GPT2Block, scales: dict[str, torch.Tensor]
) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """{projection: ((out, in) float32 weight, (out,) bias)}: the columns times their input's
    scale, and c_attn's value rows (and bias) divided by attn.c_proj's input scale."""
    out = {}
    for name in PROJECTIONS:
        layer = block.get_submodule(name)
        weight, bias = (
            layer.weight.detach().float().t().clone(),
            layer.bias.detach().float().clone(),
        )
        if name in scales:
            weight *= scales[name]
        out[name] = (weight, bias)
    if "attn.c_proj" in scales:
        hidden = block.attn.c_proj.weight.shape[0]
        weight, bias = out["attn.c_attn"]
        weight[2 * hidden :] /= scales["attn.c_proj"][:, None]
        bias[2 * hidden :] /= scales["attn.c_proj"]
    return out


def _as_linear(layer: Conv1D) -> nn.Module:
    """A Conv1D seen as nn.Linear by _scales (which reads `.weight` as (out, in))."""
    view = nn.Module()
    view.weight = layer.weight.detach().t()
    return view


def _install(block: GPT2Block, scales: dict[str, torch.Tensor], modules: dict) -> dict:
    """Fold c_attn's / c_fc's input scales into ln_1 / ln_2 and put the int8 modules in place;
    returns what `_restore` needs to put the float block back."""
    saved = {"modules": {name: block.get_submodule(name) for name in PROJECTIONS},
             "norms": {n: (block.get_submodule(n).weight.detach().clone(),
                           block.get_submodule(n).bias.detach().clone())
                       for n in ("ln_1", "ln_2")}}  # fmt: skip
    with torch.no_grad():
        for norm, name in ((block.ln_1, "attn.c_attn"), (block.ln_2, "mlp.c_fc")):
            if name in scales:
                norm.weight.div_(scales[name].to(norm.weight.dtype))
                norm.bias.div_(scales[name].to(norm.bias.dtype))
    for name, module in modules.items():
        parent, attr = name.split(".")
        setattr(block.get_submodule(parent), attr, module)
    return saved


def _restore(block: GPT2Block, saved: dict) -> None:
    for name, module in saved["modules"].items():
        parent, attr = name.split(".")
        setattr(block.get_submodule(parent), attr, module)
    with torch.no_grad():
        for name, (weight, bias) in saved["norms"].items():
            block.get_submodule(name).weight.copy_(weight)
            block.get_submodule(name).bias.copy_(bias)


# ------------------------------------------------------------------------------ speed (auto)
def _block_bytes(block: GPT2Block) -> int:
    return sum(block.get_submodule(name).weight.numel() for name in PROJECTIONS)


def speed_check(t3: nn.Module) -> SpeedCheck | None:
    """int8 against float32 for T3's blocks at one row on this CPU (ms a token): cached, else
    measured; None for a model too small to time (qwen3_tts/quantize.py's MIN_TIMED_BYTES)."""
    blocks = list(t3.tfmr.h)
    if sum(_block_bytes(b) for b in blocks) < MIN_TIMED_BYTES:
        return None
    key = _speed_key(t3)
    path = _speed_cache_path()
    cached = _read_json(path).get(key) if path is not None else None
    if cached is not None:
        try:
            return SpeedCheck.from_json(cached, f"cached in {path}")
        except (KeyError, TypeError, ValueError, AttributeError):
            pass
    check = measure_speed(t3)
    for _ in range(SPEED_RETRIES):
        if check.int8_faster:
            break
        check = _best_of(check, measure_speed(t3))
    if path is not None:
        _write_json_entry(path, key, check.to_json())
    return check


@torch.inference_mode()
def measure_speed(t3: nn.Module, repeats: int = SPEED_REPEATS) -> SpeedCheck:
    """The first blocks' projections (TIMED_BYTES of int8 weights, or all) as float32 Conv1D
    and as Int8Linear on random rows, best of `repeats` alternated, scaled to every block."""
    kernel = native.int8_linear()
    blocks, timed, size = list(t3.tfmr.h), [], 0
    budget = max(TIMED_BYTES, 2 * _last_level_cache_bytes())
    for block in blocks:
        timed.append(block)
        size += _block_bytes(block)
        if size >= budget:
            break
    floats = [block.get_submodule(name) for block in timed for name in PROJECTIONS]
    int8s = [Int8Linear(m.weight.detach().t(), m.bias.detach()) for m in floats]
    scale = len(blocks) / len(timed)
    int8_ms, float_ms = {}, {}
    for rows in SPEED_ROWS:
        xs = {m.weight.shape[0]: torch.randn(rows, m.weight.shape[0]) for m in floats}
        runs = [lambda xs=xs: [m(xs[m.in_features]) for m in int8s],
                lambda xs=xs: [m(xs[m.weight.shape[0]]) for m in floats]]  # fmt: skip
        times = _best_ms_alternated(runs, repeats)
        int8_ms[rows], float_ms[rows] = round(times[0] * scale, 3), round(times[1] * scale, 3)
    return SpeedCheck(kernel="torch._int_mm" if kernel is None else f"native {kernel.isa.name}",
                      float_dtype="float32", int8_ms=int8_ms, float_ms=float_ms)  # fmt: skip


def _speed_key(t3: nn.Module) -> str:
    kernel = native.int8_linear()
    block = t3.tfmr.h[0]
    return json.dumps({
        "model": "chatterbox_turbo_t3",
        "cpu": _cpu_model(),
        "kernel": "torch._int_mm" if kernel is None else kernel.isa.name,
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "layers": len(t3.tfmr.h),
        "shapes": [tuple(block.get_submodule(n).weight.shape) for n in PROJECTIONS],
        "rows": list(SPEED_ROWS),
    }, sort_keys=True)  # fmt: skip
