"""Shared fixtures for the Qwen3-TTS parity tests: tiny checkpoints and official goldens.

Stable names (other tests depend on them):

* `tiny_checkpoint`  -> Path of a tiny checkpoint folder (released layout); parametrized over
  TINY_CHECKPOINTS, so a test using it runs once per checkpoint.
* `goldens`          -> Goldens for that checkpoint: a dict of torch tensors (keys in
  tests/fixtures/README.md) with `.cases` ({"icl": {...}, "xvec": {...}} from cases.json),
  `.meta` (the whole cases.json), `.folder` and `.name`.
* `ref_clip`         -> (audio float32 (S,), 24000): tests/fixtures/ref_clip_24k.wav.
* `ref_clip_16k_stereo` -> (audio float32 (S, 2), 16000): the same voice, 16 kHz stereo int16.
* `tokenizer_cases`  -> list of {"text": str, "ids": list[int]} from the official tokenizer.

Every test under tests/qwen3 runs with `torch.set_num_threads(1)` (autouse session fixture), for
speed only: no bound below assumes a thread count or a CPU (see "Float error model").

Weight formats: `served_weights()` is the `quantize` this CPU serves ("int8", or "none" without
an int8 matmul), `weight_formats(what)` the values to parametrize a test over (int8 skipped
where missing), `needs_int8(what)` the skip mark of an int8-only test; `what` names what a CPU
without int8 leaves unchecked.

The plain functions `load_goldens(name)`, `load_ref_clip()`, `fixture_path(name)` do the same
outside pytest; `shared_model(folder)` is one float32 CPU model per folder for tests that only
read it, and `golden_voice(goldens, mode)` the official voice ("icl" or "xvec") of the goldens. Nothing here imports qwen_tts or transformers.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch
from conftest import one_torch_thread
from safetensors.torch import load_file

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
TINY_CHECKPOINTS = ("qwen3-tiny-a", "qwen3-tiny-b")


class Goldens(dict):
    """Golden tensors of one tiny checkpoint (dict) plus its cases.json metadata."""

    def __init__(self, name: str, tensors: dict[str, torch.Tensor], meta: dict) -> None:
        super().__init__(tensors)
        self.name = name
        self.folder = fixture_path(name)
        self.meta = meta
        self.cases = {case["key"]: case for case in meta["cases"]}


def fixture_path(name: str) -> Path:
    """tests/fixtures/<name> (a checkpoint folder or any other fixture file)."""
    return FIXTURES / name


@cache
def _load_goldens_cached(name: str) -> Goldens:
    folder = FIXTURES / f"{name}.golden"
    meta = json.loads((folder / "cases.json").read_text(encoding="utf-8"))
    return Goldens(name, load_file(str(folder / "goldens.safetensors")), meta)


def load_goldens(name: str) -> Goldens:
    """Goldens of checkpoint `name`; tensors are cloned so callers may modify them."""
    cached = _load_goldens_cached(name)
    return Goldens(name, {k: v.clone() for k, v in cached.items()}, cached.meta)


@cache
def shared_model(folder: Path):
    """One model per checkpoint folder for the whole session; tests must not change it."""
    import tts_core

    return tts_core.load_model(folder, device="cpu", dtype=torch.float32)


def golden_voice(goldens: Goldens, mode: str):
    """The official voice (speaker embedding, and for ICL reference codes + transcript)."""
    from tts_core.models.qwen3_tts.model import Voice

    if mode == "xvec":
        return Voice(speaker_embedding=goldens["speaker_embedding"])
    return Voice(
        speaker_embedding=goldens["speaker_embedding"],
        ref_codes=goldens["ref_codes"],
        ref_text=goldens.cases["icl"]["ref_text"],
    )


# --- Float error model -------------------------------------------------------------------------
# A float32 golden and our float32 result are two evaluations of the same function with different
# operation orders and kernels (another CPU, thread count, SIMD width, oneDNN vs MKL). Each errs
# from the exact value x by rounding alone; no bound may assume the two round alike. The oracle
# records, per float golden `key`, E = max |golden_fp32 - x| (cases.json "fp32_error"; x from the
# official modules in pure float64, tools/oracle/pure_fp64.py) and for the codec audio x itself
# (`<key>_fp64`). From E:
# * our float32 error: |ours_fp32 - x| <= FP32_SPREAD x E. Measured on the goldens' decoder audio
#   across 8 float32 evaluations (the Intel-made goldens, the official run and ours on an AMD EPYC
#   with 1/2 threads, AVX512/AVX2/default kernels, oneDNN on/off) the largest max-error was at
#   most 1.85x the smallest; FP32_SPREAD = 4 leaves 2x on top. (bf16 never enters a float32 run:
#   oneDNN's fpmath mode stays "strict" unless someone sets it, and then these tests should fail.)
# * against the float32 golden: |ours - golden| <= |ours - x| + |golden - x| <= (1 + 4) E.
# * two of our own float32 evaluations (static vs eager, cached vs full, stream vs full pass):
#   <= 2 x 4 E, E taken from the golden of the same network.
# * float64: each run errs by the same amplification A = E / u32 times u64 (A: measured float32
#   error over float32 unit roundoff; for the tiny decoders A ~ 700), so ours_fp64 vs x64 is
#   <= 2 x 4 x A x u64 = 8 E x 2^-29. (Measured: ~8e-14 against a ~7e-13 bound.)
# * bfloat16 (8 significant bits: eps 2^-7, unit roundoff U_BF16 = 2^-8): a bf16 run rounds each
#   weight, activation and output once at U_BF16 (float32 accumulation) where a float32 run rounds
#   at u32, so it errs by about A x U_BF16 with the network's own amplification A = E / u32
#   (measured: 0.2-0.75 A U_BF16 on the tiny talkers, the VoxCPM2 stacks and VAE, and the
#   well-conditioned codec decoder). With FP32_SPREAD as the margin, |ours_bf16 - x| <= 4 A U_BF16
#   (bf16_bound), E from the golden or measured at test time (run_error).
# E is floored at 4 roundings of the tensor's largest value: for tensors of a few values the max
# error of one run is a poor estimate of another's (it can be a lucky 0.5 ulp).
U32 = 2.0**-24  # float32 unit roundoff
U64 = 2.0**-53  # float64 unit roundoff
U_BF16 = 2.0**-8  # bfloat16 unit roundoff (eps 2^-7)
FP32_SPREAD = 4


def fp32_error(goldens: Goldens, key: str) -> float:
    """E for golden `key`: the golden machine's float32 error, floored (see above)."""
    floor = 4 * U32 * float(goldens[key].abs().max())
    return max(goldens.meta["fp32_error"][key], floor)


def fp32_bound(goldens: Goldens, key: str) -> float:
    """Largest |ours_fp32 - golden_fp32| a correct float32 implementation gives on any CPU."""
    return (1 + FP32_SPREAD) * fp32_error(goldens, key)


def fp32_pair_bound(goldens: Goldens, key: str) -> float:
    """Largest difference between two of our float32 evaluations of the network behind `key`."""
    return 2 * FP32_SPREAD * fp32_error(goldens, key)


def fp64_bound(goldens: Goldens, key: str) -> float:
    """Largest |ours_fp64 - official pure float64| for `key` (float64 rounding only)."""
    return 2 * FP32_SPREAD * fp32_error(goldens, key) * (U64 / U32)


def run_error(ours: torch.Tensor, exact: torch.Tensor) -> float:
    """E measured at test time: max |ours - exact| of one float32 run, floored as above."""
    exact = torch.as_tensor(exact).double()
    error = float((torch.as_tensor(ours).double() - exact).abs().max())
    return max(error, 4 * U32 * float(exact.abs().max()))


def bf16_bound(fp32_error: float) -> float:
    """Largest |ours_bf16 - exact| for a network whose float32 error is `fp32_error` (E)."""
    return FP32_SPREAD * (fp32_error / U32) * U_BF16


def check_fp32(ours: torch.Tensor, goldens: Goldens, key: str) -> str:
    """Assert our float32 `ours` is as close to golden `key` as the error model allows: to the
    float32 golden within fp32_bound and, where the float64 golden exists, to the exact value
    within FP32_SPREAD x E. Returns the measured numbers (for -s reports)."""
    ours = torch.as_tensor(ours).double()
    golden = goldens[key].double()
    assert ours.shape == golden.shape, (ours.shape, golden.shape)
    error, bound = float((ours - golden).abs().max()), fp32_bound(goldens, key)
    report = f"{key}: max|ours - golden| {error:.3g} (bound {bound:.3g}"
    assert error <= bound, report + ")"
    if f"{key}_fp64" in goldens:
        exact_error = float((ours - goldens[f"{key}_fp64"]).abs().max())
        exact_bound = FP32_SPREAD * fp32_error(goldens, key)
        report += f"), max|ours - exact| {exact_error:.3g} (bound {exact_bound:.3g}"
        assert exact_error <= exact_bound, report + ")"
    return report + ")"


# --- Output level -------------------------------------------------------------------------------
# The tiny checkpoints' networks are random, yet their audio has a steady level: RMS 0.13-0.17 for
# both Qwen3 codec decoders, 0.2-0.5 for VoxCPM2's VAE, peaks 0.65-0.99 (measured over the tests'
# generations, float32 and bfloat16). What a broken stage gives is far from that: NaN, silence
# (a zeroed or collapsed signal, RMS ~0) or a clipped one (peak > 1; both decoders end in a clamp or
# tanh). RMS_FLOOR = 0.02 sits 16 dB under the quietest output measured, far above silence.
RMS_FLOOR = 0.02


def check_audio(audio: np.ndarray | torch.Tensor) -> None:
    """Assert model output is finite, within [-1, 1], not empty and not silent (RMS_FLOOR)."""
    audio = torch.as_tensor(audio).double()
    assert audio.numel() > 0, "no audio"
    assert bool(torch.isfinite(audio).all()), "non-finite samples"
    peak, rms = float(audio.abs().max()), float(audio.pow(2).mean().sqrt())
    assert peak <= 1.0, f"peak {peak:.3g} > 1"
    assert rms >= RMS_FLOOR, f"RMS {rms:.3g} < {RMS_FLOOR} (silent?)"


# --- Weight formats -----------------------------------------------------------------------------
# The served CPU model (quantize="auto") has int8 layers where torch._int_mm runs on the CPU
# (int8.int8_matmul_available) and float ones elsewhere. A test of what both share runs on the
# float weights everywhere and on the int8 ones where they exist (`weight_formats`); a test of
# the int8 layers themselves skips elsewhere (`needs_int8`), saying what is then not covered.
@cache
def int8_available() -> bool:
    from tts_core.quant.linear import int8_matmul_available

    return int8_matmul_available()


def served_weights() -> str:
    """The `quantize` the served CPU model has here: "int8", or "none" without an int8 matmul."""
    return "int8" if int8_available() else "none"


def needs_int8(uncovered: str) -> pytest.MarkDecorator:
    """Skip without an int8 matmul; `uncovered`: what this CPU's run then does not check."""
    reason = f"no int8 matmul on this CPU (torch._int_mm): {uncovered} not checked here"
    return pytest.mark.skipif(not int8_available(), reason=reason)


def weight_formats(uncovered: str) -> list:
    """`quantize` values to parametrize over: "int8" (skipped without an int8 matmul, with
    `uncovered` in its reason) and "none"."""
    return [pytest.param("int8", marks=needs_int8(uncovered)), "none"]


def load_ref_clip() -> tuple[np.ndarray, int]:
    audio, sr = sf.read(FIXTURES / "ref_clip_24k.wav", dtype="float32")
    return audio, sr


_one_torch_thread = pytest.fixture(scope="session", autouse=True, name="_one_torch_thread")(
    one_torch_thread
)


@pytest.fixture(params=TINY_CHECKPOINTS, scope="session")
def tiny_checkpoint(request: pytest.FixtureRequest) -> Path:
    return fixture_path(request.param)


@pytest.fixture
def goldens(tiny_checkpoint: Path) -> Goldens:
    return load_goldens(tiny_checkpoint.name)


@pytest.fixture(scope="session")
def ref_clip() -> tuple[np.ndarray, int]:
    return load_ref_clip()


@pytest.fixture(scope="session")
def ref_clip_16k_stereo() -> tuple[np.ndarray, int]:
    audio, sr = sf.read(FIXTURES / "ref_clip_16k_stereo.wav", dtype="float32")
    return audio, sr


@pytest.fixture(scope="session")
def tokenizer_cases() -> list[dict]:
    doc = json.loads((FIXTURES / "tokenizer_cases.json").read_text(encoding="utf-8"))
    return doc["cases"]
