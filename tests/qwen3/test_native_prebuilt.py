"""Kernels built ahead (tts_core/models/native: prebuild, TTS_CORE_NATIVE_PREBUILT): what the
container image ships instead of a compiler. A process with no compiler finds them, runs the
same numbers as the torch path, writes nothing to its cache, and never loads a prebuilt file
of other sources."""

from __future__ import annotations

import platform
from pathlib import Path

import pytest
import torch

from tts_core.models import native
from tts_core.quant.linear import Int8Linear, int8_matmul_available

ISAS = native.int8_isas_here()
pytestmark = [
    pytest.mark.skipif(native.compiler() is None, reason="no C compiler to prebuild with"),
    pytest.mark.skipif(not ISAS, reason="no native kernel for this architecture"),
]


@pytest.fixture
def prebuilt(tmp_path, monkeypatch):
    """Every kernel prebuilt into tmp_path/prebuilt, then the compiler taken away and an empty
    cache: only the prebuilt files can give a kernel."""
    native.int8_linear.cache_clear()
    built = native.prebuild(tmp_path / "prebuilt")
    monkeypatch.setenv("TTS_CORE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("CC", "/nonexistent/cc")
    monkeypatch.setenv(native.PREBUILT_ENV, str(tmp_path / "prebuilt"))
    assert native.compiler() is None
    yield built
    native.int8_linear.cache_clear()


def test_every_kernel_of_the_architecture_is_prebuilt(prebuilt, tmp_path) -> None:
    sources = [source for _, source in native.kernels_here()]
    if platform.machine().lower() in native.X86:  # the 4-bit code predictor's kernel too
        assert native.SOURCE_DIR / native.INT4_SOURCE in sources
    assert prebuilt == [tmp_path / "prebuilt" / native.prebuilt_name(s) for s in sources]
    assert sorted((tmp_path / "prebuilt").iterdir()) == sorted(prebuilt)  # no scratch left
    for source, path in zip(sources, prebuilt, strict=True):
        assert native.build(source) == path  # found without a compiler
    assert not (tmp_path / "cache").exists()  # nothing compiled, nothing cached


def _cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    return {
        flag
        for line in text.splitlines()
        if line.startswith(("flags", "Features"))
        for flag in line.split()
    }


def test_without_a_compiler_the_prebuilt_kernel_runs(prebuilt) -> None:
    if not int8_matmul_available():
        pytest.skip("no int8 matmul here")
    kernel = native.int8_linear()
    if kernel is None:  # only where the CPU lacks every kernel's instructions
        flags = _cpu_flags()
        assert not any(set(native.INT8_ISAS[isa].cpu_flags) <= flags for isa in ISAS), flags
        pytest.skip("this CPU runs none of the prebuilt kernels")
    layer = Int8Linear(torch.randn(24, 40), torch.randn(24))
    assert layer.packed
    x = torch.randn(5, 40)
    assert torch.equal(layer(x), layer.forward_reference(x))


def test_a_prebuilt_kernel_of_other_sources_is_not_loaded(prebuilt, tmp_path) -> None:
    sources = tmp_path / "src"
    sources.mkdir()
    for path in {*native.SOURCE_DIR.glob("int8_*"), *native.SOURCE_DIR.glob("*.h")}:
        (sources / path.name).write_bytes(path.read_bytes())  # every header is in the key
    source = sources / native.INT8_ISAS[ISAS[-1]].source
    assert native.build(source) is not None  # the same bytes: the same prebuilt file
    header = sources / "int8_common.h"
    header.write_text(header.read_text() + "\n/* changed */\n")
    assert native.build(source) is None  # new sources, no compiler: the torch path


def test_prebuild_needs_a_compiler(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("CC", "/nonexistent/cc")
    with pytest.raises(RuntimeError, match="no C compiler"):
        native.prebuild(tmp_path)


def test_without_a_compiler_the_prebuilt_4bit_kernel_loads(prebuilt) -> None:
    """The image has no compiler: the 4-bit code predictor's kernel comes from its prebuilt file
    (before, only the 8-bit kernels were prebuilt, so an image ran 4-bit layers as int8)."""
    native.int4_linear.cache_clear()
    needs = set(native.INT8_ISAS[native.INT4_ISA].cpu_flags)
    if platform.machine().lower() not in native.X86 or not needs <= _cpu_flags():
        pytest.skip("this CPU runs no 4-bit kernel")
    assert native.int4_linear() is not None
