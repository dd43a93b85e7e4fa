"""Native kernels checked where torch cannot run them: the NEON (ARMv8.2 dot product) 8-bit
kernel, cross-compiled for aarch64 and run under qemu-user (or natively on an ARM64 machine),
is bit-equal to a scalar C reference of the torch path (int8_reference.c), and that reference
is bit-equal to the torch path itself (Int8Linear.forward_reference) on this machine.

Needs, on x86: Debian's `gcc-aarch64-linux-gnu` and `qemu-user` (apt-get install
gcc-aarch64-linux-gnu qemu-user; `make test` does as root); without them the NEON tests skip
and say so, or fail where REQUIRE_CROSS is set (CI)."""

from __future__ import annotations

import ctypes
import os
import platform
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from tts_core.models import native
from tts_core.quant.linear import Int8Linear, int8_matmul_available

HERE = Path(__file__).parent
# the kernels' own flags (no FMA: -ffp-contract=off), for a static executable
FLAGS = [f for f in native.CFLAGS if f not in ("-shared", "-fPIC")]
CROSS_CC, QEMU = "aarch64-linux-gnu-gcc", "qemu-aarch64"
INSTALL = "apt-get install gcc-aarch64-linux-gnu qemu-user"


def _aarch64() -> tuple[str, list[str]]:
    """(compiler, command prefix to run its output): native on ARM64, else cross + qemu."""
    if platform.machine().lower() in native.ARM64:
        cc = native.compiler()
        if cc is None:
            pytest.skip("no C compiler")
        return cc, []
    cross, qemu = shutil.which(CROSS_CC), shutil.which(QEMU)
    if cross is None or qemu is None:
        missing = " and ".join(n for n, p in ((CROSS_CC, cross), (QEMU, qemu)) if p is None)
        why = f"no {missing}: the NEON kernel is not checked here ({INSTALL})"
        if os.environ.get("REQUIRE_CROSS"):  # CI: .ci/run installs them (make cross)
            pytest.fail(why)
        pytest.skip(why)
    return cross, [qemu]


@pytest.fixture(scope="module")
def neon_harness(tmp_path_factory) -> tuple[Path, list[str]]:
    cc, runner = _aarch64()
    harness = tmp_path_factory.mktemp("neon") / "int8_neon_harness"
    static = ["-static"] if runner else []
    subprocess.run(
        [
            cc,
            *FLAGS,
            *static,
            "-I",
            str(native.SOURCE_DIR),
            str(HERE / "int8_neon_harness.c"),
            "-o",
            str(harness),
            "-lm",
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return harness, runner


def _run(runner: list[str], cpu: str | None, *args: str) -> subprocess.CompletedProcess:
    prefix = [*runner, "-cpu", cpu] if runner and cpu else runner
    return subprocess.run([*prefix, *args], capture_output=True, text=True, timeout=600)


def test_the_neon_kernel_equals_the_scalar_reference(neon_harness):
    harness, runner = neon_harness
    done = _run(runner, "max", str(harness))  # qemu's "max" CPU has the dot product
    assert done.returncode == 0 and done.stdout.startswith("ok "), done.stdout + done.stderr


def test_the_neon_kernel_runs_only_where_the_cpu_has_the_dot_product(neon_harness):
    harness, runner = neon_harness
    if not runner:
        pytest.skip("native ARM64: the CPU is what it is (the test above ran the kernel)")
    assert _run(runner, "max", str(harness), "supported").stdout.strip() == "supported 1"
    # Cortex-A53: ARMv8.0, NEON without the dot product
    assert _run(runner, "cortex-a53", str(harness), "supported").stdout.strip() == "supported 0"


@pytest.mark.skipif(native.compiler() is None, reason="no C compiler")
@pytest.mark.skipif(not int8_matmul_available(), reason="no torch int8 matmul here")
def test_the_scalar_reference_equals_the_torch_path(tmp_path):
    """Closes the chain NEON == reference == torch._int_mm path."""
    library = tmp_path / "int8_reference.so"
    subprocess.run(
        [
            native.compiler(),
            *native.CFLAGS,
            str(HERE / "int8_reference.c"),
            "-o",
            str(library),
            "-lm",
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    reference = ctypes.CDLL(str(library)).int8_linear_reference
    reference.restype = None
    reference.argtypes = [
        ctypes.c_void_p,
        ctypes.c_int64,
        ctypes.c_int64,
        ctypes.c_int64,
        ctypes.c_void_p,
        ctypes.c_void_p,
        ctypes.c_void_p,
        ctypes.c_void_p,
        ctypes.c_void_p,
    ]
    for out, inp in [(1024, 3072), (17, 5), (40, 130), (33, 1023), (100, 31)]:
        g = torch.Generator().manual_seed(out * inp)
        for bias in (None, torch.randn(out, generator=g)):
            layer = Int8Linear(torch.randn(out, inp, generator=g), bias)
            w = layer.int8_weight().contiguous()
            for rows in (0, 1, 3, 8, 17):
                x = (
                    torch.randn(rows, inp, generator=g)
                    * torch.logspace(-3, 3, max(rows, 1))[:rows, None]
                )
                if rows > 2:
                    x[1] = 0
                    x[2, inp - 1] = float("nan")
                if rows > 3:
                    x[3, 0] = float("inf")
                y = torch.empty(rows, out)
                q = torch.empty(inp, dtype=torch.int8)
                reference(
                    x.data_ptr(),
                    rows,
                    inp,
                    out,
                    w.data_ptr(),
                    layer.weight_scale.data_ptr(),
                    None if bias is None else layer.bias.data_ptr(),
                    y.data_ptr(),
                    q.data_ptr(),
                )
                expected = layer.forward_reference(x)
                assert torch.equal(y.isnan(), expected.isnan()), (out, inp, rows)
                assert torch.equal(y.nan_to_num(0.0), expected.nan_to_num(0.0)), (out, inp, rows)
