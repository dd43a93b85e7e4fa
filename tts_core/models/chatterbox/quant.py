"""Chatterbox Turbo's T3 (GPT-2 medium) on the shared 8-bit CPU path (tts_core/quant): this
module is the declaration (T3Int8: which layers, how calibration runs); the flow is the
toolkit's. `quantize_turbo(model, quantize)` takes the modes of Qwen3-TTS's load_model (None /
"none", "int8", "auto"):

1. calibrate: T3 teacher-forced on CALIBRATION_TEXT in the checkpoint's built-in voice (its
   speech prompt tokens are the forced tokens), the prefill and CALIBRATION_STEPS steps in
   float32; the inputs of every projection and the speech head's logits are kept;
2. smooth: c_attn's input folded into ln_1 (weight and bias), c_fc's into ln_2, attn.c_proj's
   into the value columns of c_attn (attention mixes positions, not channels, so a value
   channel's scale passes through it exactly). mlp.c_proj reads gelu(c_fc(x)), which is not
   linear: no smoothing there;
3. every c_attn, attn.c_proj, c_fc and mlp.c_proj becomes an Int8Linear over the (out, in)
   transpose of GPT-2's [in, out] Conv1D weight. wpe, the embeddings, the layer norms, cond_enc
   and the speech head stay float32 (the head makes the logits directly and is 2% of T3's
   weight bytes);
4. report each layer's output SQNR and the SNR of the int8 speech head logits against the
   float32 ones over the same forced run (`logits_snr_db`).

"auto" keeps int8 only where it is faster than float32 at one row (T3 decodes each request as
one row) and every layer AND the logits hold MIN_SQNR_DB; otherwise T3 stays exactly as loaded
(the float modules are put back). `model.t3_quantization` holds the report (None: float32),
`model.format_decision` why. The outcome is saved once per checkpoint (quant/store.py, keyed by
the T3 file, conds.pt, the tokenizer files and chatterbox_sizes.json): a later start skips the
11.7 s of the first (released size, one thread).

Measured (BENCHMARKS.md, benchmarks/chatterbox_int8_bench.py): logits 38.8-39.5 dB on the tiny
checkpoints, 31.6-32.7 dB at the released size with random weights, 2.5x faster per token at
one thread (100 -> 40 ms). Int8Linear rows are independent of their batch, as T3's float 1-row
addmm is not (runner.py): so the served engine runs one T3 step for every row where T3 is int8.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from ...quant import quantize as toolkit
from ...quant.calibration import record_inputs, smoothing_scale, spread
from ...quant.linear import Int8Linear, sqnr_db
from ...quant.quantize import (
    MIN_SQNR_DB,
    Block,
    Int8Target,
    QuantizationReport,
    requested_mode,
    why_not_int8,
)
from ...quant.speed import TimedStack
from ...quant.store import load_int8
from .checkpoint import CONDS_FILE, TOKENIZER_FILES
from .config import SIZES_FILE, ChatterboxSizes, t3_file
from .gpt2 import GPT2Block
from .sampling import TurboSampling

__all__ = ["MIN_SQNR_DB", "T3Int8", "quantize_t3", "quantize_turbo", "t3_weight_format"]

CALIBRATION_TEXT = (
    "Calibration: the quick brown fox jumps over the lazy dog, and then it asks, quietly, "
    "whether 42 numbers and a few names still sound right. [chuckle] Okay."
)
CALIBRATION_STEPS = 16  # forced draws after the prefill: decode rows in every layer's inputs
# and 17 rows of logits for the end-to-end SNR
PROJECTIONS = ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj")
ROWS_KEPT = 64  # per call recorded (the prefill: ~400 positions at the released size)
# The files the int8 T3 is computed from: its weights and sizes, the calibration voice, the
# tokenizer that reads CALIBRATION_TEXT.
IDENTITY_FILES = (
    CONDS_FILE,
    *TOKENIZER_FILES,
    "added_tokens.json",
    "special_tokens_map.json",
    "tokenizer_config.json",
    SIZES_FILE,
)


@dataclass
class T3QuantizationReport(QuantizationReport):
    """QuantizationReport (per-layer SQNR, speed, decision) + the logits' end-to-end SNR."""

    logits_snr_db: float | None = None  # int8 vs float32 speech-head logits, calibration run


def quantize_turbo(model, quantize: str | None) -> T3QuantizationReport | None:
    """Apply `quantize` to `model.t3` in place (module doc): the outcome saved at an earlier
    start, else quantized now and saved; sets `model.t3_quantization` and
    `model.format_decision` and returns the report (None where nothing was tried)."""
    mode = requested_mode(quantize)
    model.t3_quantization, model.format_decision = None, ""
    why_not = why_not_int8(mode, model.device, " (Chatterbox Turbo runs float32)")
    if mode == "none" or why_not:
        model.format_decision = why_not and f"kept float32: {why_not}"
        return None
    auto = mode == "auto"
    speaker_emb, prompt_tokens = calibration_voice(model)
    target = T3Int8(model.t3, (speaker_emb, prompt_tokens, model.text_ids(CALIBRATION_TEXT)))

    def load(saved):  # noqa: ANN001, ANN202 - the float T3 is loaded already
        if saved is not None:
            saved.install(model.t3)
        return target

    try:
        _, report = load_int8(
            T3Int8, model.folder, torch.float32, MIN_SQNR_DB if auto else None, auto, load
        )
    finally:  # voice prefixes computed by the calibration or with the old weights
        model.t3.forget_prefixes()
    model.t3_quantization = report if report.applied else None
    model.format_decision = report.described
    return report


def t3_weight_format(model) -> str:
    """ "int8" when T3's blocks run Int8Linear, else "float32" (HiFT stays float32; S3Gen's
    estimator: `model.estimator_format`, estimator_format.py)."""
    return "int8" if any(isinstance(m, Int8Linear) for m in model.t3.modules()) else "float32"


def calibration_voice(model) -> tuple[torch.Tensor, torch.Tensor]:
    """(speaker_emb (1, 256), speech prompt tokens (1, P)): the built-in voice's, else a fixed
    random one (a checkpoint without conds.pt)."""
    voice = model.builtin_voice
    if voice is not None:
        return voice.speaker_emb, voice.t3_prompt_tokens
    g = torch.Generator().manual_seed(0)
    return (
        torch.randn(1, 256, generator=g).to(model.device),
        torch.randint(0, 6561, (1, 375), generator=g).to(model.device),
    )


def quantize_t3(
    t3: nn.Module,
    speaker_emb: torch.Tensor,
    prompt_tokens: torch.Tensor,
    text_ids: torch.Tensor,
    smooth: bool = True,
    min_sqnr_db: float | None = None,
    check_speed: bool | None = None,
) -> T3QuantizationReport:
    """Make T3's GPT-2 projections int8 in place (module doc; nothing saved or read); with
    `min_sqnr_db` only if every layer and the logits hold it (T3 is left exactly as loaded
    otherwise); `check_speed` (default: with `min_sqnr_db`) first times int8 against float32
    and keeps float32 where int8 is not faster."""
    target = T3Int8(t3, (speaker_emb, prompt_tokens, text_ids))
    try:
        return toolkit.quantize(target, smooth, min_sqnr_db, check_speed)
    finally:  # voice prefixes computed by the calibration or with the old weights
        t3.forget_prefixes()


def calibration_tokens(
    prompt_tokens: torch.Tensor, count: int = CALIBRATION_STEPS + 1
) -> torch.Tensor:
    """`count` (T3: CALIBRATION_STEPS + 1 forced) speech tokens: the voice's own prompt tokens
    (speech as the model reads it), repeated if the prompt is shorter."""
    tokens = prompt_tokens.reshape(-1)
    reps = -(-count // max(len(tokens), 1))
    return tokens.repeat(reps)[:count].clone()


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
    teacher-forced run (prefill + one step per forced token). Of each call ROWS_KEPT evenly
    spaced rows are kept: the prefill's first positions (speaker, voice prompt) as well as its
    last."""
    t3.forget_prefixes()  # the voice's positions computed (and recorded) by these weights
    modules = T3Int8(t3).recorded_modules() if record else {}
    logits: list[torch.Tensor] = []

    def run() -> None:
        for _ in t3.draws(
            speaker_emb,
            prompt_tokens,
            text_ids,
            TurboSampling(),
            None,
            forced=forced,
            logits_seen=logits,
        ):
            pass

    inputs = record_inputs(modules, run, keep=lambda x: spread(x, ROWS_KEPT))
    return inputs, torch.cat(logits).float()


# ------------------------------------------------------------------------------ smoothing
def smoothing_scales(block: GPT2Block, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Per input channel, SmoothQuant's scale for the projections whose input can absorb it
    (module doc: not mlp.c_proj)."""
    scales = {}
    for name in ("attn.c_attn", "attn.c_proj", "mlp.c_fc"):
        if name in inputs:
            scales[name] = smoothing_scale(inputs[name], [block.get_submodule(name).weight.t()])
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


# ------------------------------------------------------------------------------ speed check
def _timed_floats(block: GPT2Block) -> list[tuple[nn.Module, int]]:
    """The float32 Conv1D projections ([in, out] weights: the input width is dim 0)."""
    return [(block.get_submodule(n), block.get_submodule(n).weight.shape[0]) for n in PROJECTIONS]


class T3Int8(Int8Target):
    """T3's GPT-2 blocks (module doc), calibrated teacher-forced in one voice: `voice` is
    (speaker_emb, prompt tokens, text ids)."""

    part = "T3 "
    report_type = T3QuantizationReport
    float_dtype = torch.float32
    speed_rows = (1,)  # T3 decodes every request as its own row (runner.py)
    record_at = {name: name for name in PROJECTIONS}
    folds = {"attn.c_attn": ("ln_1.weight", "ln_1.bias"), "mlp.c_fc": ("ln_2.weight", "ln_2.bias")}
    smoothing_scales = staticmethod(smoothing_scales)
    smoothed_weights = staticmethod(smoothed_weights)

    def __init__(self, t3: nn.Module, voice: tuple[torch.Tensor, ...] | None = None) -> None:
        self.root = t3
        self.device = t3.speech_head.weight.device
        self.voice = voice
        self.float_logits: torch.Tensor | None = None

    def blocks(self) -> list[Block]:
        return [
            Block(f"tfmr.h.{i}", f"tfmr.h.{i}", b, (i,)) for i, b in enumerate(self.root.tfmr.h)
        ]

    # ---------------------------------------------------------------- speed check
    def timed_stacks(self) -> list[TimedStack]:
        return [self.timed_stack(self.root.tfmr.h, 1, _timed_floats)]

    def speed_key(self) -> dict:
        block = self.root.tfmr.h[0]
        return {
            "model": "chatterbox_turbo_t3",
            "layers": len(self.root.tfmr.h),
            "shapes": [tuple(block.get_submodule(n).weight.shape) for n in PROJECTIONS],
        }

    # ---------------------------------------------------------------- quantizing
    def forced(self) -> torch.Tensor:
        return calibration_tokens(self.voice[1])

    def calibrate(self) -> dict[tuple[int, str], torch.Tensor]:
        inputs, self.float_logits = calibrate(self.root, *self.voice, self.forced())
        return inputs

    def check_output(self, report: T3QuantizationReport, min_sqnr_db: float | None):  # noqa: ANN201
        """The int8 speech head's logits against the float32 ones over the same forced run."""
        _, int8_logits = calibrate(self.root, *self.voice, self.forced(), record=False)
        snr = report.logits_snr_db = sqnr_db(self.float_logits, int8_logits)
        failed = ""
        if min_sqnr_db is not None and snr < min_sqnr_db:
            failed = f"the int8 logits keep {snr:.1f} dB SNR < {min_sqnr_db:g} dB"
        return f", logits {snr:.1f} dB SNR", failed

    # ---------------------------------------------------------------- the store
    @classmethod
    def identity_files(cls, checkpoint: Path) -> tuple[str, ...]:
        return (t3_file(checkpoint), *IDENTITY_FILES)

    @classmethod
    def weights_file(cls, checkpoint: Path) -> str:
        return t3_file(checkpoint)

    @classmethod
    def code_paths(cls) -> list[Path]:
        """The package (T3 and its calibration run), the shared layers and checkpoint loader."""
        package = Path(__file__).resolve().parent
        return [
            *sorted(package.glob("*.py")),
            package.parent / "layers.py",
            package.parent / "checkpoint.py",
        ]

    @classmethod
    def calibration_key(cls) -> dict:
        return {"text": CALIBRATION_TEXT, "steps": CALIBRATION_STEPS, "rows_kept": ROWS_KEPT}

    @classmethod
    def storage_free(cls, checkpoint: Path, dtype: torch.dtype) -> T3Int8:
        from .t3 import T3Turbo

        return cls(T3Turbo(ChatterboxSizes.of_folder(checkpoint).t3))
