"""The native 8-bit kernel (tts_core/models/native/int8_linear.c): equal to the torch path bit
for bit wherever it runs, and a clean fallback to that path where it cannot be built or run."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tts_core.models import native
from tts_core.quant.linear import (
    Int8Linear,
    int8_matmul_available,
    pack_for_kernel,
    unpack_from_kernel,
)

pytestmark = pytest.mark.skipif(not int8_matmul_available(), reason="no int8 matmul here")
needs_kernel = pytest.mark.skipif(
    native.int8_linear() is None, reason="no C compiler, or no native kernel for this CPU"
)


@pytest.fixture
def fresh_kernel_lookup():
    native.int8_linear.cache_clear()
    yield
    native.int8_linear.cache_clear()


def _rows(count: int, width: int, g: torch.Generator) -> torch.Tensor:
    """Rows over 6 decades of scale, one all zero: each row sets its own activation scale."""
    x = torch.randn(count, width, generator=g) * torch.logspace(-3, 3, max(count, 1))[:count, None]
    if count > 2:
        x[1] = 0
    return x


# widths: the model's (1024 -> 6144), and odd ones that exercise the padding of the packed
# layout (in not a multiple of 4, out not a multiple of 16) and the masked tails
@needs_kernel
@pytest.mark.parametrize(
    "out_features,in_features", [(6144, 1024), (1024, 3072), (17, 5), (1, 3), (40, 130)]
)
@pytest.mark.parametrize("bias", [False, True])
def test_kernel_equals_the_torch_path_bit_for_bit(out_features, in_features, bias):
    g = torch.Generator().manual_seed(out_features + in_features)
    layer = Int8Linear(
        torch.randn(out_features, in_features, generator=g),
        torch.randn(out_features, generator=g) if bias else None,
    )
    assert layer.packed
    for count in (0, 1, 2, 3, 7, 8, 9, 16, 17):  # tiles of 8 rows, and what is left
        x = _rows(count, in_features, g)
        assert torch.equal(layer(x), layer.forward_reference(x)), count


@needs_kernel
def test_kernel_takes_bf16_strided_and_batched_inputs():
    g = torch.Generator().manual_seed(5)
    layer = Int8Linear(torch.randn(64, 96, generator=g))
    x = torch.randn(3, 4, 192, generator=g)[..., ::2]  # (3, 4, 96), not contiguous
    assert torch.equal(layer(x), layer.forward_reference(x))
    y = x.bfloat16()
    assert layer(y).dtype == torch.bfloat16 and torch.equal(layer(y), layer.forward_reference(y))


@needs_kernel
def test_a_non_finite_row_stays_non_finite_and_alone():
    g = torch.Generator().manual_seed(6)
    layer = Int8Linear(torch.randn(32, 64, generator=g))
    x = torch.randn(3, 64, generator=g)
    x[1, 7] = float("nan")
    out = layer(x)
    assert torch.isnan(out[1]).all()
    assert torch.equal(out[[0, 2]], layer.forward_reference(x[[0, 2]]))


def test_packing_round_trips():
    q = torch.randint(-127, 128, (37, 70), dtype=torch.int8)
    packed = pack_for_kernel(q)
    assert packed.shape == (3, 18, 16, 4)  # out 37 -> 48, in 70 -> 72
    assert torch.equal(unpack_from_kernel(packed, 37, 70), q)


@pytest.mark.skipif(native.compiler() is None, reason="no C compiler")
def test_the_kernel_builds_once_into_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TTS_CORE_CACHE", str(tmp_path))
    built = native.build(native.SOURCE_DIR / "int8_linear.c")
    assert built is not None and built.parent == tmp_path / "native"
    stamp = built.stat().st_mtime_ns
    assert native.build(native.SOURCE_DIR / "int8_linear.c") == built
    assert built.stat().st_mtime_ns == stamp and list(built.parent.iterdir()) == [built]


@pytest.mark.parametrize(
    "setting",
    [("CC", "/nonexistent/cc"), ("TTS_CORE_NATIVE", "0"), ("TTS_CORE_CACHE", "/dev/null/cache")],
)
def test_without_the_kernel_layers_run_on_torch(
    setting, fresh_kernel_lookup, monkeypatch, tmp_path
):
    monkeypatch.setenv("TTS_CORE_CACHE", str(tmp_path))  # nothing built earlier is found
    monkeypatch.setenv(*setting)
    assert native.int8_linear() is None
    layer = Int8Linear(torch.randn(24, 40), torch.randn(24))
    assert not layer.packed and layer.weight_q.shape == (24, 40)
    x = torch.randn(5, 40)
    assert torch.equal(layer(x), layer.forward_reference(x))


def _cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    return {flag for line in text.splitlines() if line.startswith("flags") for flag in line.split()}


@pytest.mark.skipif(native.compiler() is None or not native.enabled(), reason="no C compiler")
def test_the_kernel_runs_wherever_the_cpu_has_its_instructions():
    """Guards the skips above: a kernel that stopped building must fail here, not skip."""
    needed = {"avx512f", "avx512bw", "avx512vl", "avx512_vnni"}
    if not needed <= _cpu_flags():
        pytest.skip("this CPU has no AVX-512 VNNI")
    assert native.int8_linear() is not None


@needs_kernel
def test_a_bfloat16_default_dtype_does_not_reach_the_kernel_buffers():
    """The output buffer is float32 on the CPU whatever torch's defaults say."""
    layer = Int8Linear(torch.randn(48, 64))
    x = torch.randn(3, 64)
    expected = layer.forward_reference(x)
    saved = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        out = layer(x)
    finally:
        torch.set_default_dtype(saved)
    assert out.dtype == torch.float32 and torch.equal(out, expected)


@needs_kernel
def test_a_layer_cast_to_another_dtype_takes_the_torch_path():
    """Its scales are no longer float32: the kernel would read them as float32 pointers."""
    layer = Int8Linear(torch.randn(48, 64), torch.randn(48)).to(torch.bfloat16)
    assert layer.weight_scale.dtype == torch.bfloat16
    x = torch.randn(3, 64)
    assert torch.equal(layer(x), layer.forward_reference(x))
