"""The 8-bit flow, written once for every model; a model declares its part (Int8Target).

quantize(target):
1. decide by speed (`check_speed`, as `auto` asks): where int8 is not faster on this CPU
   (speed.py), nothing changes and nothing is calibrated;
2. calibrate: the model's own short run records the inputs of its projections (calibration.py);
3. plan: the model smooths (SmoothQuant, folded where it has something linear to fold into)
   and names each layer to quantize: its (out, in) float weight, bias and calibration inputs;
4. every planned layer becomes an Int8Linear (int8 weights per output channel, int8
   activations per row: linear.py) and its output SQNR on the calibration inputs is measured
   against the float layer; with `min_sqnr_db` (`auto`), nothing changes unless every layer
   holds it. An `optional` layer decides nothing: it is installed only where it holds
   its own bound;
5. install, then the model's own end-to-end check (e.g. the logits' SNR): where that falls
   short of `min_sqnr_db`, the model puts its float modules back.

`report.decision` (logged) says what was chosen and why. store.py saves the outcome once per
checkpoint; `load_int8` there is the whole flow at load: saved outcome, or quantize and save.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from ..models import native
from . import speed
from .linear import Int8Linear, int8_matmul_available, sqnr_db
from .speed import SpeedCheck, Timed, TimedStack

log = logging.getLogger(__name__)

MIN_SQNR_DB = 30.0  # `auto` keeps int8 only if every layer holds this on the calibration run
QUANTIZE_MODES = ("none", "int8", "auto")


@dataclass
class QuantizationReport:
    mode: str
    layer_sqnr_db: dict[str, float] = field(default_factory=dict)
    applied: bool = False
    speed: SpeedCheck | None = None  # `auto`: int8 against float on this CPU (None: not timed)
    decision: str = ""  # what was chosen and why, in words (logged)
    saved_in: str | None = None  # the store file this report was read from (None: made now)

    @property
    def min_sqnr_db(self) -> float:
        return min(self.layer_sqnr_db.values(), default=float("inf"))

    @property
    def described(self) -> str:
        """The decision, and where it was read from (a model's `format_decision`)."""
        if self.saved_in is None:
            return self.decision
        return f"{self.decision} (saved in {self.saved_in} at an earlier load)"

    def to_json(self) -> dict:
        """Every field but `saved_in` (store.py keeps it beside the weights); floats as JSON
        writes them (repr: they read back exactly, infinities included)."""
        entry = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "saved_in"}
        entry["speed"] = self.speed and {**self.speed.to_json(), "source": self.speed.source}
        return entry

    @classmethod
    def from_json(cls, entry: dict, saved_in: str | None = None) -> QuantizationReport:
        report = cls(**{f.name: entry.get(f.name) for f in fields(cls) if f.name in entry})
        report.layer_sqnr_db = {str(k): float(v) for k, v in entry["layer_sqnr_db"].items()}
        speed = entry["speed"]
        report.speed = speed and SpeedCheck.from_json(speed, str(speed["source"]))
        report.saved_in = saved_in
        return report

    def worst(self, count: int = 3) -> list[tuple[str, float]]:
        return sorted(self.layer_sqnr_db.items(), key=lambda item: item[1])[:count]


@dataclass
class Candidate:
    """A layer to quantize: its name in the report, the (out, in) float32 weight as it will be
    rounded (smoothing folded in), its bias, and its calibration inputs (rows, in) as the
    quantized layer will see them (None: not seen by the calibration run, not measured)."""

    name: str
    weight: torch.Tensor
    bias: torch.Tensor | None = None
    x: torch.Tensor | None = None
    optional_bound: float | None = None  # optional: installed only if it holds this alone
    path: str = ""  # where it goes under the target's root, if not at `name`


@dataclass
class Plan:
    candidates: list[Candidate]
    folds: list[tuple[str, torch.Tensor]]  # (parameter under the root, the scale it is divided by)


@dataclass
class Block:
    """A layer whose projections are smoothed together: `name` prefixes their names in the
    report, `path` is where it sits under the target's root, and its recorded inputs are keyed
    `key` + (input group,)."""

    name: str
    path: str
    module: nn.Module
    key: tuple


def set_module(root: nn.Module, name: str, module: nn.Module) -> None:
    """`module` at `name` under `root` (a target's `replace` unless it fuses layers)."""
    parent_name, _, attr = name.rpartition(".")
    setattr(root.get_submodule(parent_name), attr, module)


class Int8Target(Timed):
    """A model's declaration: a loaded float model offered to the flow (what it quantizes and
    how it calibrates, `root`: the module its int8 layers live under) and, on the class, what
    store.py keys and checks a saved outcome by.

    Its layers are Blocks of projections, each projection's input recorded at `record_at` (one
    of the float projections that read it) and smoothed where the block folds its 1/s into
    parameters (`folds`: norms); a model may add layers of its own (`other_candidates`)."""

    part = ""  # what the decision names before "int8: ", e.g. "T3 "
    report_type: type[QuantizationReport] = QuantizationReport
    root: nn.Module
    replace = staticmethod(set_module)  # puts a saved int8 module (or a placeholder) in place
    record_at: dict[str, str] = {}  # projection -> the float module (in a block) recorded
    folds: dict[str, tuple[str, ...]] = {}  # projection -> the block's parameters divided by s

    # ---------------------------------------------------------------- the store (class-level)
    @classmethod
    def identity_files(cls, checkpoint: Path) -> tuple[str, ...]:
        """The checkpoint's files the quantized layers are computed from (hashed: store.py)."""
        raise NotImplementedError

    @classmethod
    def weights_file(cls, checkpoint: Path) -> str:
        """The one of identity_files whose hash starts the saved file's name."""
        raise NotImplementedError

    @classmethod
    def code_paths(cls) -> list[Path]:
        """The model's sources the calibration run and the folding are computed by."""
        raise NotImplementedError

    @classmethod
    def calibration_key(cls) -> dict:
        """The model's calibration constants (its text, steps, rows kept)."""
        raise NotImplementedError

    @classmethod
    def storage_free(cls, checkpoint: Path, dtype: torch.dtype) -> Int8Target:
        """The target over the checkpoint's float model built on the meta device (no weights):
        its plan and saved_floats say what a saved file must hold (store.layout_of)."""
        raise NotImplementedError

    def saved_floats(self) -> dict[str, torch.Tensor]:
        """The float tensors under `root` that quantizing changes (smoothing folded in)."""
        return {
            f"{block.path}.{name}": block.module.get_parameter(name)
            for block in self.blocks()
            for names in self.folds.values()
            for name in names
        }

    # ---------------------------------------------------------------- the model's part
    # (block, {projection: its recorded inputs (rows, in)}) -> {projection: (in,) scale}
    smoothing_scales: Callable[[nn.Module, dict], dict[str, torch.Tensor]]
    # (block, scales) -> {projection: ((out, in) float32 weight, bias)}, the scales folded in
    smoothed_weights: Callable[[nn.Module, dict], dict[str, tuple]]

    def blocks(self) -> list[Block]:
        raise NotImplementedError

    def other_candidates(self, inputs: dict) -> list[Candidate]:
        return []

    def calibrate(self) -> dict:
        """The recorded inputs `plan` reads, from the model's calibration run."""
        raise NotImplementedError

    def check_output(
        self, report: QuantizationReport, min_sqnr_db: float | None
    ) -> tuple[str, str]:
        """After install: (what the decision adds, why int8 fails the model's end-to-end check
        or "") (e.g. its logits' SNR against the float run's)."""
        return "", ""

    # ---------------------------------------------------------------- the flow's steps
    def recorded_modules(self) -> dict[tuple, nn.Module]:
        """{block key + (group,): the projection whose input calibration records}."""
        return {
            (*block.key, group): block.module.get_submodule(at)
            for block in self.blocks()
            for group, at in self.record_at.items()
        }

    def plan(self, inputs: dict, smooth: bool) -> Plan:
        """The layers to quantize, smoothed with `inputs` where `smooth` (inputs {}: the
        layers as they are; store.layout_of reads their names and shapes)."""
        candidates, folds = [], []
        for block in self.blocks():
            mine = {g: inputs[(*block.key, g)] for g in self.record_at if (*block.key, g) in inputs}
            scales = self.smoothing_scales(block.module, mine) if smooth else {}
            for attr, (weight, bias) in self.smoothed_weights(block.module, scales).items():
                x = mine.get(attr)
                if x is not None and attr in scales:
                    x = x / scales[attr]
                name, path = f"{block.name}.{attr}", f"{block.path}.{attr}"
                candidates.append(Candidate(name, weight, bias, x, path=path))
            for group, names in self.folds.items():
                folds += [(f"{block.path}.{n}", scales[group]) for n in names if group in scales]
        return Plan(candidates + self.other_candidates(inputs), folds)

    @torch.no_grad()
    def install(self, plan: Plan, modules: dict[str, Int8Linear]) -> Callable[[], None] | None:
        """Fold the scales and put the int8 `modules` (by candidate name; optional ones that
        failed are absent) in place; returns what puts the float model back (None where a
        layer was fused: no float module to put back)."""
        placed = {c.path or c.name: modules[c.name] for c in plan.candidates if c.name in modules}
        restore = self._restorer(placed, plan.folds)
        for name, scale in plan.folds:
            parameter = self.root.get_parameter(name)
            parameter.div_(scale.to(parameter.dtype))
        for path, module in placed.items():
            self.replace(self.root, path, module)
        return restore

    def _restorer(self, placed: dict, folds: list) -> Callable[[], None] | None:
        try:
            floats = {path: self.root.get_submodule(path) for path in placed}
        except AttributeError:  # fused: qkv_proj is made of q/k/v_proj
            return None
        folded = {name: self.root.get_parameter(name).clone() for name, _ in folds}

        @torch.no_grad()
        def restore() -> None:
            for path, module in floats.items():
                self.replace(self.root, path, module)
            for name, value in folded.items():
                self.root.get_parameter(name).copy_(value)

        return restore

    def timed_stack(self, layers: list[nn.Module], passes: int, floats: Callable) -> TimedStack:
        """The speed check's stack: `floats` as the float model runs them, against the int8
        layers quantizing installs (unsmoothed)."""

        def int8s(layer: nn.Module) -> list[tuple[torch.Tensor, torch.Tensor | None]]:
            return list(self.smoothed_weights(layer, {}).values())

        return TimedStack(list(layers), passes, floats, int8s)


@torch.inference_mode()
def quantize(
    target: Int8Target,
    smooth: bool = True,
    min_sqnr_db: float | None = None,
    check_speed: bool | None = None,
) -> QuantizationReport:
    """Quantize `target` in place (module doc) and return the report; with `min_sqnr_db`,
    nothing is changed unless every layer (and the end-to-end check) holds it."""
    report = target.report_type("int8")
    float_name = str(target.float_dtype).removeprefix("torch.")
    if check_speed is None:
        check_speed = min_sqnr_db is not None
    if check_speed:
        report.speed = speed.speed_check(target)
        if report.speed is not None and not report.speed.int8_faster:
            return _decided(
                report, f"kept {float_name}: int8 is slower here ({report.speed.describe()})"
            )
    plan = target.plan(target.calibrate(), smooth)
    modules, optional = {}, {}
    for candidate in plan.candidates:
        if candidate.x is None and candidate.optional_bound is not None:
            continue  # not seen by the calibration: nothing to hold a bound on
        layer = modules[candidate.name] = Int8Linear(candidate.weight, candidate.bias)
        if candidate.x is None:
            continue
        sqnr = sqnr_db(F.linear(candidate.x, candidate.weight, candidate.bias), layer(candidate.x))
        if candidate.optional_bound is None:
            report.layer_sqnr_db[candidate.name] = sqnr
        elif sqnr >= candidate.optional_bound:
            optional[candidate.name] = sqnr
        else:
            del modules[candidate.name]
    if min_sqnr_db is not None and report.min_sqnr_db < min_sqnr_db:
        name, worst = report.worst(1)[0]
        return _decided(
            report,
            f"kept {float_name}: layer {name} keeps {worst:.1f} dB SQNR < {min_sqnr_db:g} dB",
        )
    restore = target.install(plan, modules)
    report.layer_sqnr_db.update(optional)
    checked, failed = target.check_output(report, min_sqnr_db)
    if failed and min_sqnr_db is not None and restore is not None:
        restore()
        return _decided(report, f"kept {float_name}: {failed}")
    report.applied = True
    why = applied_because(report, min_sqnr_db, check_speed, checked)
    return _decided(report, f"{target.part}int8: {why}")


def applied_because(
    report: QuantizationReport, min_sqnr_db: float | None, check_speed: bool, checked: str = ""
) -> str:
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


# ------------------------------------------------------------------------------ the request
def requested_mode(quantize: str | None) -> str:
    """`quantize` (None, "none", "int8", "auto", any case) -> one of QUANTIZE_MODES."""
    mode = "none" if quantize is None else str(quantize).lower()
    if mode not in QUANTIZE_MODES:
        raise ValueError(f"quantize must be one of {QUANTIZE_MODES}, got {quantize!r}")
    return mode


def why_not_int8(mode: str, device: torch.device | str, gpu_hint: str) -> str:
    """Empty where int8 is to be tried for `mode`, else why not ("none": empty too). int8
    asked for off the CPU is a ValueError (`gpu_hint` says what to use there)."""
    device = torch.device(device)
    if mode == "none":
        return ""
    if device.type != "cpu":
        if mode == "int8":
            raise ValueError(f"quantize='int8' is the CPU path{gpu_hint}")
        return f"no int8 path on {device}"
    if mode == "auto" and native.int8_linear() is None and not int8_matmul_available():
        return "no int8 matmul on this CPU"
    return ""
