"""The code predictor in 4 bits (quant/int4.py) and `auto`'s gate for it.

The code predictor's 5 layers are read at each of its 15 passes a frame: where they do not stay
in cache (0.6B: 81 MB in int8 against a 32 MB L3) the passes are bandwidth work, and 4-bit
weights halve their bytes. `int4_predictor` converts the loaded 8-bit predictor's layers (their
weights as they compute, smoothing folded in); its heads stay 8-bit.

The gate (`compare_predictors`, measured at load on the checkpoint's own weights): a greedy run
of GATE_FRAMES frames drives the model with its loaded (int8) code predictor; at every frame the
4-bit predictor sees the same talker state and
* teacher-forced (fed the reference's codes), picks its own argmax for each of the 15 groups:
  `agreement` = the share of those codes equal to the reference's;
* free (fed its own codes, as it would run), gives the frame's 15 codes: the audio decoded from
  the frames with its codes beside the reference's gives `audio_snr_db`.
On the random 0.6B (benchmarks/results/int4_bench-busy.json) int4 agrees with int8 on 59.1 % of
the codes (int8 with float32: 93.6 %), audio SNR under 2 dB: `auto` keeps int8 there. Random
weights (logits std ~4, no outliers) prove the measure runs, not what a trained checkpoint gives:
the gate measures that at its first load. `auto` takes int4 only where both bounds hold
(MIN_CODE_AGREEMENT, MIN_AUDIO_SNR_DB), the 4-bit kernel runs here (native.int4_linear, where it
was measured faster) and the predictor's int8 layers do not stay in cache (MIN_STREAMED_BYTES):
decided by the CPU's flags and the weights, never by timing. "int4" forces it, "int8" forbids it.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ...quant import int4 as quant_int4
from ...quant.int4 import int4_in_place
from ...quant.linear import Int8Linear, sqnr_db
from ...quant.speed import update_json
from ..native import INT4_SOURCE, SOURCE_DIR, cache_path, int4_linear
from .code_predictor import CodePredictor

GATE_TEXT = (
    "The gate: a few sentences of speech, long enough that every code group is chosen many "
    "times, and short enough to run at every start."
)
GATE_FRAMES = 32  # x 15 groups = 480 codes compared
# As close to int8 as int8 (what `auto` ships) is to float32: on the random 0.6B the int8
# predictor picks 93.6 % of float32's teacher-forced greedy codes (benchmarks/int4_bench.py).
MIN_CODE_AGREEMENT = 0.90
# The free-running frames' audio: where codes differ, the differences carry <= 10 % of the
# energy. Random codebooks decode any other code to unrelated audio (the random 0.6B, int8
# against float32: 1.6 dB), so only real weights can pass this.
MIN_AUDIO_SNR_DB = 10.0
# 4 bits pay where the predictor's int8 layers are read from memory at each pass: larger than
# the L3 (32 MB on the Zen 5 measured; the 0.6B's are 81 MB). The tiny test checkpoints' stay
# in cache, and in 8 bits.
MIN_STREAMED_BYTES = 32 * 2**20

Qwen3TTSModel = Any  # reached through its public members only (model.py imports this module)


@dataclass
class PredictorAgreement:
    codes: int = 0  # codes compared (frames x 15)
    agreed: int = 0  # teacher-forced argmax equal to the reference's
    frames: int = 0
    frames_equal: int = 0  # free-running frames whose 15 codes all equal the reference's
    audio_snr_db: float | None = None  # free-running frames' audio against the reference's

    @property
    def agreement(self) -> float:
        return self.agreed / max(self.codes, 1)

    def describe(self) -> str:
        snr = "n/a" if self.audio_snr_db is None else f"{self.audio_snr_db:.1f} dB"
        return (
            f"greedy codes {100 * self.agreement:.1f} % equal over {self.frames} frames "
            f"(whole frames {self.frames_equal}/{self.frames}), audio SNR {snr}"
        )

    def holds(self) -> bool:
        return (
            self.agreement >= MIN_CODE_AGREEMENT
            and self.audio_snr_db is not None
            and self.audio_snr_db >= MIN_AUDIO_SNR_DB
        )


def _int8_buffers(predictor: CodePredictor) -> list[torch.Tensor]:
    return [b for m in predictor.modules() if isinstance(m, Int8Linear) for b in m.buffers()]


def int4_predictor(predictor: CodePredictor) -> CodePredictor:
    """A copy of the (8-bit) `predictor` with its layers' Int8Linear projections in 4 bits; the
    heads stay 8-bit (each pass reads one, 2 MB of its 81 at 0.6B, and its error would go
    straight into the logits)."""
    four = copy.deepcopy(predictor)
    if not int4_in_place(four.model):
        raise ValueError("the code predictor has no 8-bit layers to make 4-bit")
    return four


def _greedy(logits: torch.Tensor) -> torch.Tensor:
    return logits.argmax(-1)


@torch.inference_mode()
def compare_predictors(
    model: Qwen3TTSModel,
    candidates: dict[str, CodePredictor],
    frames: int = GATE_FRAMES,
    text: str = GATE_TEXT,
) -> tuple[dict[str, PredictorAgreement], torch.Tensor]:
    """Each candidate against `model`'s own code predictor on a greedy run of `frames` frames
    (module doc); returns the agreements and the reference frames (T, G)."""
    reference = model.talker.code_predictor
    seen = {name: PredictorAgreement() for name in candidates}
    free = {name: [] for name in candidates}
    own_caches: dict[str, list] = {}
    predict = reference.predict

    def compared(past_hidden, c0_embed, caches, choose, by_row=False):  # noqa: ANN001, ANN202
        codes = predict(past_hidden, c0_embed, caches, choose, by_row)
        for name, candidate in candidates.items():
            mine = own_caches.setdefault(name, candidate.new_caches(past_hidden.shape[0]))
            chosen = []
            candidate.predict(past_hidden, c0_embed, mine, _forced(codes, chosen), by_row)
            seen[name].codes += codes.numel()
            seen[name].agreed += int((torch.stack(chosen, dim=1) == codes).sum())
            free[name].append(candidate.predict(past_hidden, c0_embed, mine, _greedy, by_row))
        return codes

    voice = model.silent_voice()
    prompt, settings = model.plan(
        text, voice, "english", greedy=True, length_cap=False, max_new_tokens=frames
    )
    reference.predict = compared
    try:
        ref = torch.stack(list(model.frames(prompt, settings)))  # (T, G)
    finally:
        del reference.predict
    codec = model.speech_tokenizer
    ref_audio = None if codec is None else codec.decode(ref)
    for name, agreement in seen.items():
        theirs = torch.cat([ref[:, :1], torch.cat(free[name])[: len(ref)]], dim=1)
        agreement.frames = len(ref)
        agreement.frames_equal = int((theirs == ref).all(dim=1).sum())
        if ref_audio is not None:
            agreement.audio_snr_db = sqnr_db(ref_audio, codec.decode(theirs))
    return seen, ref


def _forced(codes: torch.Tensor, chosen: list) -> Callable[[torch.Tensor], torch.Tensor]:
    """A chooser that records each pass's argmax in `chosen` and returns the reference's code
    for that group (codes (B, G-1)), so the next pass sees what the reference's saw."""
    groups = iter(codes.unbind(dim=1))

    def choose(logits: torch.Tensor) -> torch.Tensor:
        chosen.append(logits.argmax(-1))
        return next(groups)

    return choose


def predictor_format(model: Qwen3TTSModel, forced: bool) -> str:
    """Put the 4-bit code predictor in place where `forced` ("int4") or, for `auto`, where the
    4-bit kernel runs and the gate holds on this checkpoint; returns the choice in words. The
    gate's outcome is kept (`gate_record`): a later load neither converts to measure nor runs it."""
    kernel = int4_linear() is not None
    if not forced and not kernel:
        return "code predictor int8 (no 4-bit kernel on this CPU)"
    streamed = sum(b.nbytes for b in _int8_buffers(model.talker.code_predictor))
    if not forced and streamed < MIN_STREAMED_BYTES:
        return f"code predictor int8 ({streamed / 1e6:.1f} MB: stays in cache)"
    if forced:
        why = "int4 asked for" + ("" if kernel else " (no 4-bit kernel here: int8's speed)")
    else:
        holds, why = _gate(model)
        if not holds:
            return f"code predictor int8 ({why})"
    model.talker.code_predictor = int4_predictor(model.talker.code_predictor)
    return f"code predictor {why}"


def _gate(model: Qwen3TTSModel) -> tuple[bool, str]:
    """(whether the 4-bit predictor holds the gate, in words), measured now or kept earlier."""
    record = gate_record(model)
    if record is not None and record.is_file():
        kept = json.loads(record.read_text())
        return bool(kept["holds"]), f"{kept['why']} (measured at an earlier load)"
    agreement = compare_predictors(model, {"int4": int4_predictor(model.talker.code_predictor)})
    int4 = agreement[0]["int4"]
    holds = int4.holds()
    bounds = f"{100 * MIN_CODE_AGREEMENT:g} % and {MIN_AUDIO_SNR_DB:g} dB"
    why = f"int4 against int8: {int4.describe()}; " + ("holds " if holds else "below ") + bounds
    if record is not None:  # where it cannot be written, the next load measures again
        update_json(record, lambda _: {"holds": holds, "why": why})
    return holds, why


def gate_record(model: Qwen3TTSModel) -> Path | None:
    """Where the gate's outcome for this model is kept ($TTS_CORE_CACHE/int4/<key>.json; None
    without a cache folder): the key hashes the code predictor's int8 buffers, the talker's
    head (the run that drives the gate) and the code that measures and computes the format."""
    folder = cache_path("int4")
    if folder is None:
        return None
    digest = hashlib.sha256()
    for source in (Path(__file__), Path(quant_int4.__file__), SOURCE_DIR / INT4_SOURCE):
        digest.update(source.read_bytes())
    for tensor in [*_int8_buffers(model.talker.code_predictor), model.talker.codec_head.weight]:
        digest.update(tensor.detach().contiguous().view(torch.uint8).numpy().tobytes())
    return folder / f"{digest.hexdigest()[:32]}.json"
