"""Every native 8-bit kernel (tts_core/models/native/int8_linear*.c: AVX-512 VNNI, AVX-VNNI,
AVX2 on x86-64, NEON dot product on ARM64) is equal to the torch path bit for bit, on each
instruction set this CPU has: each test forces one kernel with TTS_CORE_NATIVE_ISA. A kernel
this CPU could run but that no longer builds or loads fails
`test_each_kernel_the_cpu_has_builds_and_runs` (the others skip there). The NEON kernel is also
checked on x86 under qemu-user: tests/native/."""

from __future__ import annotations

import copy
import pickle
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
ISAS = native.int8_isas_here()  # this machine's architecture's, best first


def _cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    return {
        flag
        for line in text.splitlines()
        if line.startswith(("flags", "Features"))  # x86, ARM
        for flag in line.split()
    }


def _cpu_has(isa: str) -> bool:
    return isa in ISAS and set(native.INT8_ISAS[isa].cpu_flags) <= _cpu_flags()


@pytest.fixture(params=ISAS)
def isa(request, monkeypatch):
    """Layers made inside the test use the `isa` kernel (skipped where it cannot run)."""
    monkeypatch.setenv(native.ISA_ENV, request.param)
    native.int8_linear.cache_clear()
    kernel = native.int8_linear()
    if kernel is None:
        pytest.skip(f"no {request.param} kernel here (no C compiler, or not this CPU's)")
    assert kernel.isa.name == request.param
    yield request.param
    native.int8_linear.cache_clear()  # the environment goes back after this: look again then


def _rows(count: int, width: int, g: torch.Generator) -> torch.Tensor:
    """Rows over 6 decades of scale, one all zero: each row sets its own activation scale."""
    x = torch.randn(count, width, generator=g) * torch.logspace(-3, 3, max(count, 1))[:count, None]
    if count > 2:
        x[1] = 0
    return x


@pytest.mark.skipif(native.compiler() is None or not native.enabled(), reason="no C compiler")
@pytest.mark.parametrize("name", list(native.INT8_ISAS))
def test_each_kernel_the_cpu_has_builds_and_runs(name, monkeypatch):
    """Guards the skips of the `isa` fixture: on a CPU with the instructions, the kernel must
    build, load, say it is supported, be chosen when forced, and compute."""
    if not _cpu_has(name):
        pytest.skip(f"this CPU has no {name} ({', '.join(native.INT8_ISAS[name].cpu_flags)})")
    native.int8_linear.cache_clear()
    monkeypatch.setenv(native.ISA_ENV, name)
    try:
        kernel = native.int8_kernel(name)
        assert kernel is not None, f"the {name} kernel did not build or load (see the log)"
        assert native.int8_linear() is kernel
        layer = Int8Linear(torch.randn(24, 40), torch.randn(24))
        assert layer.kernel_isa == name
        x = torch.randn(3, 40)
        assert torch.equal(layer(x), layer.forward_reference(x))
    finally:
        native.int8_linear.cache_clear()


def test_without_a_forced_isa_the_best_the_cpu_has_is_chosen(monkeypatch):
    monkeypatch.delenv(native.ISA_ENV, raising=False)
    native.int8_linear.cache_clear()
    try:
        runnable = [name for name in ISAS if native.int8_kernel(name) is not None]
        chosen = native.int8_linear()
        assert (chosen is None) == (not runnable)
        assert chosen is None or chosen.isa.name == runnable[0]
    finally:
        native.int8_linear.cache_clear()


# widths: the model's (1024 -> 6144, 3072 -> 1024), and odd ones that exercise the padding of
# each packed layout (in not a multiple of 2, 4 or 8, out not one of 8 or 16) and the tails of
# the vector loops (in < 8, < 16, 8 + a few)
SHAPES = [(6144, 1024), (1024, 3072), (17, 5), (1, 3), (40, 130), (9, 15), (8, 16), (33, 1023)]


@pytest.mark.parametrize("out_features,in_features", SHAPES)
@pytest.mark.parametrize("bias", [False, True])
def test_kernel_equals_the_torch_path_bit_for_bit(isa, out_features, in_features, bias):
    g = torch.Generator().manual_seed(out_features + in_features)
    layer = Int8Linear(
        torch.randn(out_features, in_features, generator=g),
        torch.randn(out_features, generator=g) if bias else None,
    )
    assert layer.packed and layer.kernel_isa == isa
    for count in (0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 15, 16, 17):  # tiles of 8 rows and what is left
        x = _rows(count, in_features, g)
        assert torch.equal(layer(x), layer.forward_reference(x)), count


def test_a_row_is_the_same_alone_and_in_any_batch(isa):
    """Rows interleaved per tile inside the kernels must not mix: each row, alone, equals itself
    inside batches of every size up to 17 (a full tile, a partial one, both)."""
    g = torch.Generator().manual_seed(11)
    layer = Int8Linear(torch.randn(72, 200, generator=g) * 0.02, torch.randn(72, generator=g))
    x = _rows(17, 200, g)
    alone = torch.cat([layer(x[i : i + 1]) for i in range(17)])
    for count in range(1, 18):
        assert torch.equal(layer(x[:count]), alone[:count]), count


@pytest.mark.parametrize("threads", [1, 2])
def test_many_rows_equal_the_torch_path_on_every_thread_count(isa, threads):
    """Past PARALLEL_QUANTIZE_BYTES (int8_common.h: 64 KB of quantized rows) each kernel
    quantizes its rows on every thread: the same bits as the torch path, whichever thread took
    a row (and wrote its part of a tile of interleaved rows)."""
    g = torch.Generator().manual_seed(threads)
    layer = Int8Linear(torch.randn(40, 1030, generator=g), torch.randn(40, generator=g))
    x = _rows(203, 1030, g)  # 203 x 1032 bytes: past 64 KB; NaN and inf rows below
    x[7, 3], x[150, 1029] = float("nan"), float("inf")
    saved = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        out, expected = layer(x), layer.forward_reference(x)
    finally:
        torch.set_num_threads(saved)
    assert torch.equal(out.nan_to_num(), expected.nan_to_num())
    assert torch.equal(out.isnan(), expected.isnan()) and out[7].isnan().all()


def test_kernel_takes_bf16_strided_and_batched_inputs(isa):
    g = torch.Generator().manual_seed(5)
    layer = Int8Linear(torch.randn(64, 96, generator=g))
    x = torch.randn(3, 4, 192, generator=g)[..., ::2]  # (3, 4, 96), not contiguous
    assert torch.equal(layer(x), layer.forward_reference(x))
    y = x.bfloat16()
    assert layer(y).dtype == torch.bfloat16 and torch.equal(layer(y), layer.forward_reference(y))


@pytest.mark.parametrize("width", [64, 21])  # vector loop only; vector + scalar tail
def test_a_non_finite_row_stays_non_finite_and_alone(isa, width):
    g = torch.Generator().manual_seed(6)
    layer = Int8Linear(torch.randn(32, width, generator=g), torch.randn(32, generator=g))
    x = torch.randn(5, width, generator=g)
    x[1, 7] = float("nan")
    x[2, width - 1] = float("nan")  # in the scalar tail where there is one
    x[3, 3] = float("inf")  # scale inf, its quotient NaN -> 0 as torch converts it: all NaN
    out = layer(x)
    assert torch.isnan(out[1:4]).all()
    assert torch.equal(out[[0, 4]], layer.forward_reference(x[[0, 4]]))
    assert torch.equal(out.isnan(), layer.forward_reference(x).isnan())


def test_a_layer_keeps_its_kernel_when_the_choice_changes(isa, monkeypatch):
    """The packed layout is the kernel's: a layer made for one kernel runs on it (or on the
    torch path), whatever is chosen for layers made later."""
    g = torch.Generator().manual_seed(7)
    layer = Int8Linear(torch.randn(40, 70, generator=g), torch.randn(40, generator=g))
    x = _rows(9, 70, g)
    expected = layer.forward_reference(x)
    for other in [*ISAS, native.TORCH_ISA]:
        monkeypatch.setenv(native.ISA_ENV, other)
        native.int8_linear.cache_clear()
        assert layer.kernel_isa == isa and torch.equal(layer(x), expected)
    clone = pickle.loads(pickle.dumps(copy.deepcopy(layer)))
    assert clone.kernel_isa == isa and torch.equal(clone(x), expected)


def test_a_layer_whose_kernel_no_longer_loads_runs_on_torch(isa, monkeypatch, tmp_path):
    g = torch.Generator().manual_seed(8)
    layer = Int8Linear(torch.randn(40, 70, generator=g))
    x = _rows(5, 70, g)
    expected = layer(x)
    monkeypatch.setenv("TTS_CORE_CACHE", str(tmp_path))  # nothing built earlier is found
    monkeypatch.setenv("CC", "/nonexistent/cc")
    native.int8_linear.cache_clear()
    assert native.int8_kernel(isa) is None
    assert torch.equal(layer(x), expected) and torch.equal(layer.forward_reference(x), expected)


def test_packing_round_trips_in_every_layout():
    q = torch.randint(-127, 128, (37, 70), dtype=torch.int8)
    shapes = {
        "avx512vnni": (3, 18, 16, 4),
        "avxvnni": (5, 18, 8, 4),
        "avx2": (5, 36, 8, 2),
        "neon": (3, 20, 16, 4),
    }
    for name, spec in native.INT8_ISAS.items():
        layout = spec.layout
        packed = pack_for_kernel(q, layout.block, layout.group, layout.in_multiple)
        assert packed.shape == shapes[name]  # out 37 -> 48 or 40, in 70 -> 72 or 80
        assert torch.equal(unpack_from_kernel(packed, 37, 70), q)
        # packed[ob][kg][j][t] = q[block ob + j][group kg + t]
        assert packed[1, 2, 3, 1] == q[layout.block + 3, 2 * layout.group + 1]


def test_forcing_the_torch_path_or_a_kernel_that_cannot_run(monkeypatch):
    try:
        monkeypatch.setenv(native.ISA_ENV, "torch")
        native.int8_linear.cache_clear()
        assert native.int8_linear() is None
        layer = Int8Linear(torch.randn(24, 40), torch.randn(24))
        assert not layer.packed and layer.kernel_isa is None
        x = torch.randn(3, 40)
        assert torch.equal(layer(x), layer.forward_reference(x))
        # a forced kernel this CPU lacks: the torch path, not a lesser kernel
        monkeypatch.setenv(native.ISA_ENV, "avx512vnni")
        monkeypatch.setattr(native, "int8_kernel", _no_kernel)
        native.int8_linear.cache_clear()
        assert native.int8_linear() is None
    finally:
        native.int8_linear.cache_clear()


def _no_kernel(isa: str) -> None:
    return None


_no_kernel.cache_clear = lambda: None


def test_an_unknown_forced_isa_is_ignored(monkeypatch):
    monkeypatch.delenv(native.ISA_ENV, raising=False)
    native.int8_linear.cache_clear()
    try:
        best = native.int8_linear()
        monkeypatch.setenv(native.ISA_ENV, "sse2")
        native.int8_linear.cache_clear()
        chosen = native.int8_linear()
        assert (chosen and chosen.isa) == (best and best.isa)
    finally:
        native.int8_linear.cache_clear()


@pytest.mark.skipif(native.compiler() is None, reason="no C compiler")
@pytest.mark.skipif(not ISAS, reason="no native kernel for this architecture")
def test_each_kernel_builds_once_into_the_cache_and_the_header_is_in_its_key(tmp_path, monkeypatch):
    monkeypatch.setenv("TTS_CORE_CACHE", str(tmp_path))
    built = {name: native.build(native.SOURCE_DIR / native.INT8_ISAS[name].source) for name in ISAS}
    assert all(path is not None and path.parent == tmp_path / "native" for path in built.values())
    assert len(set(built.values())) == len(built)
    assert sorted(tmp_path.joinpath("native").iterdir()) == sorted(built.values())
    # an edit of the shared header is a new build (a copy of the sources, header changed)
    sources = tmp_path / "src"
    sources.mkdir()
    for path in {*native.SOURCE_DIR.glob("int8_*"), *native.SOURCE_DIR.glob("*.h")}:
        (sources / path.name).write_bytes(path.read_bytes())  # every header is in the key
    source = native.INT8_ISAS[ISAS[-1]].source
    before = native.build(sources / source)
    assert before == built[ISAS[-1]]
    header = sources / "int8_common.h"
    header.write_text(header.read_text() + "\n/* changed */\n")
    after = native.build(sources / source)
    assert after is not None and after != before
