"""Shared fixtures for the TADA parity tests (tests/fixtures/tada-tiny-*).

* `tiny_folder` (parametrized a/b) and `goldens`: a checkpoint root in the released layout
  (`model/` like HumeAI/tada-1b, `codec/` like HumeAI/tada-codec) and its
  `<name>.golden.npz`, both written by `bash tools/oracle/tada/rebuild.sh` (the official
  hume-tada 0.1.9, one thread; tools/oracle/tada/make_goldens.py says what each key holds).
  Nothing here imports tada, transformers or torchaudio.

Float error model: tests/qwen3/conftest.py's ("Float error model"). The oracle records per float
golden `key` E = max |golden_fp32 - official_fp64| (`fp32_error_<key>`: the official modules
rerun in float64 on the same inputs with the same float32-drawn noise); E is floored at 4
roundings of the golden's largest value. Our float32 result then lies within (1 + FP32_SPREAD) E
of the float32 golden (`check_fp32`). Integer outputs (token ids, durations, alignments) must be
equal, and so must lengths.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import one_torch_thread
from qwen3.conftest import FP32_SPREAD, U32

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
TINY = ("tada-tiny-a", "tada-tiny-b")


@cache
def load_goldens(name: str) -> dict[str, np.ndarray]:
    with np.load(FIXTURES / f"{name}.golden.npz") as data:
        return {key: data[key] for key in data.files}


def fp32_error(goldens: dict[str, np.ndarray], key: str) -> float:
    """E for `key`, floored at 4 float32 roundings of the golden's largest value."""
    floor = 4 * U32 * float(np.abs(goldens[key]).max())
    return max(float(goldens[f"fp32_error_{key}"]), floor)


def check_fp32(ours, goldens: dict[str, np.ndarray], key: str) -> str:
    """|ours - golden| <= |ours - x| + |golden - x| <= (FP32_SPREAD + 1) E (x: exact value)."""
    ours = np.asarray(torch.as_tensor(ours).detach().cpu(), dtype=np.float64)
    golden = goldens[key].astype(np.float64)
    assert ours.shape == golden.shape, (key, ours.shape, golden.shape)
    e = fp32_error(goldens, key)
    error, bound = float(np.abs(ours - golden).max()), (1 + FP32_SPREAD) * e
    report = f"{key}: max|ours - golden| {error:.3g} = {error / e:.2f} E (bound {bound:.3g})"
    assert error <= bound, report
    return report


def tensor(goldens: dict[str, np.ndarray], key: str) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(goldens[key]))


_one_torch_thread = pytest.fixture(scope="session", autouse=True, name="_one_torch_thread")(
    one_torch_thread
)


@pytest.fixture(params=TINY, scope="session")
def tiny_folder(request: pytest.FixtureRequest) -> Path:
    return FIXTURES / request.param


@pytest.fixture(scope="session")
def goldens(tiny_folder: Path) -> dict[str, np.ndarray]:
    return load_goldens(tiny_folder.name)
