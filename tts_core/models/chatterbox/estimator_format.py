"""The weight format of S3Gen's flow estimator (issue 38, item 5), chosen by `auto` at load.

The estimator's transformer projections (attn1.to_q/k/v/to_out.0, ff.net.0.proj, ff.net.2: 56
blocks, ~1 M weights each at the released size) are most of its FLOPs, and a stream's passes
run them over ~74-170 rows (a pass: the prompt's last 25 tokens + context + chunk, 2 mel frames
a token), where the GEMMs are compute bound. Two formats may replace them (one block's six
projections, 2 threads, Zen 5, best of 9, load average 1.9 on the 2 cores;
benchmarks/chatterbox_estimator_formats.py's layers table):

| rows | float32 | int8, native AVX-512 VNNI kernel | bfloat16 | bf16, ONEDNN_MAX_CPU_ISA=AVX512_CORE_VNNI |
| --- | --- | --- | --- | --- |
| 74 (a first pass) | 0.885 ms | 0.177 | 0.385 | 1.159 |
| 148 | 1.588 | 0.312 | 0.558 | 2.092 |
| 300 | 3.074 | 0.558 | 0.943 | 3.964 |

(int8 through torch._int_mm instead of our kernel: 0.67 / 1.10 / 1.87 ms, busier box.) The
first S3Gen pass of a stream (12 tokens), same run, median of 9: float32 255 ms (estimator
173), int8 163 (82), bfloat16 185 (103); model.stream's first audio, 6 seeds interleaved:
float32 546 ms, int8 439, bfloat16 459 (emulated bf16: 556, float32 550, int8 440).

* "int8": Int8Linear (quant/linear.py: int8 weights per output channel, activations per row,
  exact int32 sums: a row's output does not depend on the other rows, so padded passes stay
  row-exact). Our kernel is not built for one row only: it is the fastest at every row count.
* "bfloat16": the weights and the input rounded to bfloat16, oneDNN's bf16 GEMM, the output
  back in float32 (the bias added in float32). Where bf16 is emulated (no avx512_bf16 / AMX,
  or ONEDNN_MAX_CPU_ISA below AVX512_CORE_BF16: "emulated" above) it is slower than float32
  and the speed check drops it.

The gate (`auto`): a format is kept only where the estimator's mel over a fixed calibration
pass (the built-in voice's prompt as a stream's pass sees it, CALIBRATION_TOKENS of its own
speech tokens as the generated ones, fixed noise) keeps >= MIN_MEL_SNR_DB against float32,
AND one estimator call of that pass (98 rows: between a stream's first pass, 74, and its later
ones, up to ~170) is faster than float32's, timed here. Of the formats that hold both the
fastest is kept; none: the float32 modules stay. Tiny estimators (the test checkpoints, whose
calls cost Python, not FLOPs) are not timed and stay float32 unless a test gives the speed
verdict (`timer`). Released size, random weights: mel int8 37.3 dB, bfloat16 51.4-52.1 dB;
tiny-a / tiny-b int8 41.7 / 38.8 dB, bf16 52.0 / 51.2.

The decision is saved once per checkpoint content, code and machine (the toolkit's store
folder, DECISIONS_FILE): a later start converts to the saved format without the calibration
pass or the timing (released size: 1.4 s; the first decision 2.8-3.1 s at load average 2 on
the 2 cores, 37-49 s at 4-5); `model.estimator_format` holds the report, `model.format_decision`
says it after T3's where a format is kept (logged; the backend's weight_format_reason, which
/v1/models shows).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from ...quant import speed, store
from ...quant.linear import Int8Linear, int8_matmul_available, sqnr_db
from ...quant.quantize import MIN_SQNR_DB, requested_mode, set_module
from .. import native
from .checkpoint import CONDS_FILE
from .estimator import ConditionalDecoder
from .quant import calibration_tokens

log = logging.getLogger(__name__)

FORMATS = ("int8", "bfloat16")
# The mel's gate. The 8-bit layers' gate (quantize.MIN_SQNR_DB, every int8 T3 layer and its
# logits; the Qwen3 codec decoder's int8 audio) is 30 dB, and a stream's own approximation of
# the whole-utterance audio is held to 30 dB too (tests/chatterbox/test_streaming.py
# STREAM_SNR_DB; measured 38-48 dB on the tiny checkpoints, 41.9 at the released size). A
# format's error adds to that one: at >= 35 dB it moves the stream's measured ~40 dB by < 1.2 dB
# (uncorrelated errors add in power: 10 log10(10^-4 + 10^-3.5) = -34 dB at worst; at 40 dB
# each, 37 dB), leaving the stream's 30 dB bound its margin.
MIN_MEL_SNR_DB = MIN_SQNR_DB + 5.0
CALIBRATION_PROMPT_TOKENS = 25  # StreamChunking.flow_prompt: what a pass sees of the prompt
CALIBRATION_TOKENS = 24  # generated tokens: with the prompt's 25, 98 rows
CALIBRATION_SEED = 0
MIN_TIMED_WEIGHTS = 8 << 20  # projections' weights below this (the tiny checkpoints): not timed
TIMING_REPEATS = 5  # best of, formats alternated: with 3 a busy box once put bf16 (246.6 ms)
# before int8 (303.0) at 98 rows, where the interleaved benchmark has int8 ahead by ~20%
DECISIONS_FILE = "s3gen_estimator_format.json"
KEPT_DECISIONS = 16  # the most recent (checkpoints x machines x thread counts) in the file

# (estimator, its inputs, {format: its layers}) -> {format or "float32": ms a call}: the verdict
Timer = Callable[[nn.Module, tuple, dict], dict[str, float]]


class BF16Linear(nn.Module):
    """A linear layer over bfloat16 weights for float32 activations: the input rounded to
    bfloat16, oneDNN's bf16 GEMM (float32 sums), the product back in float32 plus the float32
    bias (CPU torch has no bf16 GEMM writing float32: the product is rounded to bf16 once)."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.register_buffer("weight", linear.weight.detach().to(torch.bfloat16))
        bias = linear.bias
        self.register_buffer("bias", None if bias is None else bias.detach().float())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.linear(x.to(torch.bfloat16), self.weight).to(x.dtype)
        return out if self.bias is None else out.add_(self.bias)


CONVERTERS: dict[str, Callable[[nn.Linear], nn.Module]] = {
    "int8": Int8Linear.from_linear,
    "bfloat16": BF16Linear,
}


@dataclass
class EstimatorFormatReport:
    """What `auto` measured and chose for the estimator's projections."""

    chosen: str = "float32"
    mel_snr_db: dict[str, float] = field(default_factory=dict)  # per format, vs float32
    call_ms: dict[str, float] = field(default_factory=dict)  # one calibration call, float32 too
    decision: str = ""
    saved_in: str | None = None

    @property
    def described(self) -> str:
        where = "" if self.saved_in is None else f" (saved in {self.saved_in} at an earlier load)"
        return f"S3Gen estimator {self.decision}{where}"


def projections(estimator: ConditionalDecoder) -> dict[str, nn.Linear]:
    """{path under the estimator: nn.Linear} of its transformer blocks' projections."""
    return {
        name: module
        for name, module in estimator.named_modules()
        if isinstance(module, nn.Linear) and (".attn1." in name or ".ff." in name)
    }


def convert(
    estimator: ConditionalDecoder, fmt: str, layers: dict[str, nn.Module] | None = None
) -> Callable[[], None]:
    """Replace the projections by `fmt`'s layers (`layers`: made already by `converted`) in
    place; returns what puts the float32 ones back."""
    floats = projections(estimator)
    for path, layer in (layers or converted(floats, fmt)).items():
        set_module(estimator, path, layer)

    def restore() -> None:
        for path, linear in floats.items():
            set_module(estimator, path, linear)

    return restore


def converted(floats: dict[str, nn.Linear], fmt: str) -> dict[str, nn.Module]:
    return {path: CONVERTERS[fmt](linear) for path, linear in floats.items()}


def estimator_format(estimator: ConditionalDecoder) -> str:
    """The format its projections run in now: "int8", "bfloat16" or "float32"."""
    for module in estimator.modules():
        if isinstance(module, Int8Linear):
            return "int8"
        if isinstance(module, BF16Linear):
            return "bfloat16"
    return "float32"


def candidate_formats() -> list[str]:
    """The formats this CPU has a path for: int8 where an int8 matmul runs (our native kernel,
    else torch._int_mm), bfloat16 where oneDNN runs bf16 (native or emulated: timing decides)."""
    formats = []
    if native.int8_linear() is not None or int8_matmul_available():
        formats.append("int8")
    if torch.ops.mkldnn._is_mkldnn_bf16_supported():
        formats.append("bfloat16")
    return formats


# ------------------------------------------------------------------------------ the gate
def calibration_voice(model) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(prompt tokens (1, P), prompt mel (1, Tm, 80), x-vector (1, E)) as a stream's pass sees
    them: the built-in voice's last CALIBRATION_PROMPT_TOKENS tokens and their mel, else a
    fixed random voice (a checkpoint without conds.pt)."""
    voice = model.builtin_voice
    if voice is None:
        g = torch.Generator().manual_seed(CALIBRATION_SEED)
        width = model.flow.spk_embed_affine_layer.in_features
        tokens = torch.randint(0, 6561, (1, CALIBRATION_PROMPT_TOKENS), generator=g)
        feat = torch.randn(1, 2 * CALIBRATION_PROMPT_TOKENS, 80, generator=g)
        return tokens.to(model.device), feat.to(model.device), torch.randn(1, width).to(feat)
    keep = min(CALIBRATION_PROMPT_TOKENS, voice.prompt_token.shape[1])
    feat = voice.prompt_feat[:, -min(2 * keep, voice.prompt_feat.shape[1]) :]
    return voice.prompt_token[:, -keep:], feat, voice.embedding


@torch.inference_mode()
def calibration_mel(model, calls: list[tuple] | None = None) -> torch.Tensor:
    """The generated mel (1, 80, 2 CALIBRATION_TOKENS) of the calibration pass, fixed noise;
    the estimator's inputs of each call appended to `calls` where given."""
    prompt, feat, embedding = calibration_voice(model)
    speech = calibration_tokens(prompt, CALIBRATION_TOKENS)[None]  # (1, count)
    generator = torch.Generator().manual_seed(CALIBRATION_SEED)
    if calls is None:
        return model.flow.inference(speech, prompt, feat, embedding, generator)
    estimator = model.flow.decoder.estimator
    hook = estimator.register_forward_pre_hook(lambda _, args: calls.append(args))
    try:
        return model.flow.inference(speech, prompt, feat, embedding, generator)
    finally:
        hook.remove()


@torch.inference_mode()
def timed_call_ms(
    estimator: ConditionalDecoder, inputs: tuple, layers: dict[str, dict[str, nn.Module]]
) -> dict[str, float]:
    """{format: best ms of one estimator call on `inputs`} with each format's `layers`
    (float32's among them) swapped in, alternated in the same loop (a busy machine slows them
    alike); the estimator is left float32."""
    best = dict.fromkeys(layers, float("inf"))
    try:
        for fmt, made in layers.items():  # warm: first calls allocate
            convert(estimator, fmt, made)
            estimator(*inputs)
        for _ in range(TIMING_REPEATS):
            for fmt, made in layers.items():
                convert(estimator, fmt, made)
                start = time.perf_counter()
                estimator(*inputs)
                best[fmt] = min(best[fmt], (time.perf_counter() - start) * 1000)
    finally:
        convert(estimator, "float32", layers["float32"])
    return best


def too_small_to_time(estimator: ConditionalDecoder) -> bool:
    return sum(m.weight.numel() for m in projections(estimator).values()) < MIN_TIMED_WEIGHTS


@torch.inference_mode()
def decide(
    model, timer: Timer | None = None, min_snr_db: float = MIN_MEL_SNR_DB
) -> EstimatorFormatReport:
    """Measure every candidate (module doc) and leave the estimator in the chosen format;
    `timer` gives the speed verdict (tests), default `timed_call_ms` where the estimator is
    large enough to time."""
    estimator = model.flow.decoder.estimator
    report = EstimatorFormatReport()
    formats = candidate_formats()
    if not formats:
        report.decision = "float32: no int8 or bf16 path on this CPU"
        return report
    calls: list[tuple] = []
    reference = calibration_mel(model, calls)
    floats = projections(estimator)
    layers = {"float32": floats} | {fmt: converted(floats, fmt) for fmt in formats}
    held = []
    for fmt in formats:
        restore = convert(estimator, fmt, layers[fmt])
        report.mel_snr_db[fmt] = sqnr_db(reference, calibration_mel(model))
        restore()
        if report.mel_snr_db[fmt] >= min_snr_db:
            held.append(fmt)
    snrs = ", ".join(f"{f} {report.mel_snr_db[f]:.1f} dB" for f in formats)
    if not held:
        report.decision = f"float32: no format keeps the mel >= {min_snr_db:g} dB SNR ({snrs})"
        return report
    if timer is None and too_small_to_time(estimator):
        report.decision = f"float32: too small to time ({snrs} mel SNR)"
        return report
    report.call_ms = (timer or timed_call_ms)(estimator, calls[0], layers)
    faster = [f for f in held if report.call_ms[f] < report.call_ms["float32"]]
    if not faster:  # timed again before "slower" is believed and saved (a busy machine)
        again = (timer or timed_call_ms)(estimator, calls[0], layers)
        report.call_ms = {f: min(ms, again[f]) for f, ms in report.call_ms.items()}
        faster = [f for f in held if report.call_ms[f] < report.call_ms["float32"]]
    times = ", ".join(f"{f} {ms:.1f}" for f, ms in report.call_ms.items())
    if not faster:
        report.decision = f"float32: no format holding the gate is faster ({times} ms a call)"
        return report
    report.chosen = min(faster, key=report.call_ms.__getitem__)
    convert(estimator, report.chosen, layers[report.chosen])
    report.decision = (
        f"{report.chosen}: mel {report.mel_snr_db[report.chosen]:.1f} dB SNR against float32 "
        f"(>= {min_snr_db:g}), fastest here ({times} ms a call)"
    )
    return report


# ------------------------------------------------------------------------------ the store
def decision_key(model, min_snr_db: float) -> str:
    """sha256 of what the decision depends on: the S3Gen weights and the calibration voice,
    this code and the toolkit's, the constants, the machine (CPU, kernels, threads, oneDNN's
    cap) and torch."""
    folder, memo = Path(model.folder), store.folder() / store.HASHES_FILE  # the store is on
    package = Path(__file__).resolve().parent
    code = [
        package / n
        for n in ("estimator_format.py", "estimator.py", "flow.py", "flow_encoder.py", "quant.py")
    ]  # quant.py: the calibration tokens
    key = {
        "checkpoint": store.checkpoint_identity(folder, (model.s3gen_file, CONDS_FILE), memo),
        "code": store.code_digest(tuple(code)),
        "gate": [min_snr_db, CALIBRATION_PROMPT_TOKENS, CALIBRATION_TOKENS, MIN_TIMED_WEIGHTS],
        "machine": [speed.cpu_model(), speed.kernel_name(), torch.__version__],
        "threads": torch.get_num_threads(),
        "onednn_isa": os.environ.get("ONEDNN_MAX_CPU_ISA", "ALL"),
    }
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:32]


def kept_entries(data: dict) -> dict:
    """The file's newest KEPT_DECISIONS - 1 entries (a dict keeps its insertion order)."""
    return dict(list(data.items())[-(KEPT_DECISIONS - 1) :])


def saved_decision(path: Path, key: str) -> EstimatorFormatReport | None:
    entry = speed.read_json(path).get(key)
    try:
        report = EstimatorFormatReport(**entry)
    except TypeError:  # absent or not ours
        return None
    report.saved_in = str(path)
    return report if report.chosen in ("float32", *FORMATS) else None


def choose_estimator_format(
    model, quantize: str | None, timer: Timer | None = None, min_snr_db: float = MIN_MEL_SNR_DB
) -> EstimatorFormatReport | None:
    """`auto` (module doc) on a CPU model: the saved decision where there is one, else
    `decide` and save it; sets `model.estimator_format` (None: not tried, float32) and returns
    it. "none" and "int8" (T3's request) leave the estimator float32."""
    model.estimator_format = None
    if requested_mode(quantize) != "auto" or model.device.type != "cpu":
        return None
    where = store.folder()
    path, key = (where / DECISIONS_FILE, decision_key(model, min_snr_db)) if where else (None, "")
    report = saved_decision(path, key) if path else None
    if report is not None and report.chosen != "float32":
        convert(model.flow.decoder.estimator, report.chosen)
    if report is None:
        report = decide(model, timer, min_snr_db)
        if path is not None:
            entry = {k: v for k, v in asdict(report).items() if k != "saved_in"}
            speed.update_json(path, lambda data: kept_entries(data) | {key: entry})
    log.info("chatterbox: %s", report.described)
    model.estimator_format = report
    return report
