"""Shared fixtures for the VoxCPM2 parity tests (phase 1: AudioVAE V2).

* `tiny_folder`   -> tests/fixtures/voxcpm2-tiny (released layout, tools/oracle/voxcpm/build_tiny.py)
* `vae_goldens`   -> its official goldens (tools/oracle/voxcpm/make_goldens.py): a `Goldens` dict
  of tensors with `.meta` (cases.json), read by tests/qwen3's `load_goldens`.
* `tiny_vae`      -> one float32 CPU AudioVAE for the session; tests must not change it.
* `release_config_folder` -> tests/fixtures/voxcpm2-release (the released config.json only).

Float error model: the one written in tests/qwen3/conftest.py ("Float error model"), imported
from there rather than copied. It holds for this network as it does for the Qwen codec: a
golden and our result are two float32 evaluations of the same function whose operation order
and kernels may differ by CPU, so each is bounded by its distance to the exact (float64) value
E recorded per key by the oracle (`fp32_error`, floored at 4 roundings of the largest value),
times FP32_SPREAD = 4 for the spread of float32 error between machines and kernels. Measured
E for the tiny VAE (single-threaded, x86-64): see cases.json; bounds follow from it:
`check_fp32` (ours vs golden <= 5 E, ours vs exact <= 4 E), `fp32_pair_bound` (two of our
float32 evaluations, e.g. stream vs full pass <= 8 E), `fp64_bound` (our float64 vs the
official float64, <= 8 E x 2^-29). Nothing here imports voxcpm.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import pytest
import torch
from conftest import one_torch_thread
from qwen3.conftest import FIXTURES, Goldens, load_goldens  # shared error model + golden reader

from tts_core.models.voxcpm import AudioVAE

TINY = "voxcpm2-tiny"
RELEASE = "voxcpm2-release"


@cache
def shared_vae(folder: Path) -> AudioVAE:
    return AudioVAE.from_folder(folder, device="cpu", dtype=torch.float32)


_one_torch_thread = pytest.fixture(scope="session", autouse=True, name="_one_torch_thread")(
    one_torch_thread
)


@pytest.fixture(scope="session")
def tiny_folder() -> Path:
    return FIXTURES / TINY


@pytest.fixture(scope="session")
def release_config_folder() -> Path:
    return FIXTURES / RELEASE


@pytest.fixture
def vae_goldens() -> Goldens:
    return load_goldens(TINY)


@pytest.fixture(scope="session")
def tiny_vae(tiny_folder: Path) -> AudioVAE:
    return shared_vae(tiny_folder)


# --- phase 2: the whole model ------------------------------------------------------------------
# Checkpoints: voxcpm2-tiny and voxcpm2-tiny-b (tools/oracle/voxcpm/build_tiny.py) with goldens
# `<name>-model.golden` (tools/oracle/voxcpm/make_model_goldens.py): components, the three
# modes' audio, and their float64 exact values; same error model as above.
MODEL_CHECKPOINTS = ("voxcpm2-tiny", "voxcpm2-tiny-b")


@cache
def shared_model(folder: Path, dtype: torch.dtype = torch.float32):
    from tts_core.models.voxcpm.model import VoxCPMModel

    return VoxCPMModel.from_folder(folder, device="cpu", dtype=dtype)


@pytest.fixture(params=MODEL_CHECKPOINTS, scope="session")
def model_folder(request: pytest.FixtureRequest) -> Path:
    return FIXTURES / request.param


@pytest.fixture
def model_goldens(model_folder: Path) -> Goldens:
    return load_goldens(f"{model_folder.name}-model")


def golden_voice(model, goldens: Goldens, kind: str):
    """The voice of a golden case: None, reference only, or reference + transcript."""
    if kind == "none":
        return None
    clip, rate = goldens["ref_clip"].numpy(), goldens.meta["clip_rate"]
    ref_text = goldens.meta["ref_text"] if kind == "ref_text" else None
    return model.create_voice(clip, rate, ref_text)


def run_case(model, goldens: Goldens, case: dict, voice):
    return model.generate(
        case["text"],
        voice,
        seed=case["seed"],
        cfg_value=case["cfg_value"],
        inference_timesteps=case["inference_timesteps"],
        max_len=case["max_len"],
    )
