"""CPU kernels in C, compiled on first use with the machine's C compiler and loaded by ctypes.

Each kernel has an exact pure-torch twin (tests hold them equal bit for bit), so a machine
without a C compiler, or without the instructions a kernel needs, runs the same numbers
more slowly. The shared library is built once per source (and the headers beside it) and
compiler into `$TTS_CORE_CACHE` (default `~/.cache/tts_core`)/native and reused by later
processes. Set TTS_CORE_NATIVE=0 to use the torch paths only.

Prebuilt kernels: `prebuild(directory)` compiles every kernel of this architecture into a
directory, each file named by a hash of its source, headers and flags; a process whose
TTS_CORE_NATIVE_PREBUILT names that directory loads them from there and needs no compiler (the
container image builds them in a stage with gcc and ships only the .so files). A prebuilt file
of other sources has another name and is never loaded; with none for this source, the compiler
path above applies.

The 8-bit linear kernel comes in one C file per instruction set (int8_linear*.c), each built
only when it is asked for; `int8_linear()` takes the best this CPU runs: on x86-64 AVX-512
VNNI, then AVX-VNNI, then AVX2; on 64-bit ARM NEON with the dot product; else None (the torch
path). TTS_CORE_NATIVE_ISA=avx512vnni|avxvnni|avx2|neon forces one (for tests and benchmarks
on a CPU that has more; where the CPU lacks it: the torch path, with a warning),
TTS_CORE_NATIVE_ISA=torch forces the torch path.

Kernels run on torch's own OpenMP threads: torch is imported first and has loaded its
libgomp.so.1, which the dynamic linker then gives our library too (one thread pool, sized by
torch.set_num_threads).
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch  # noqa: F401  (loads torch's libgomp before ours is opened)

log = logging.getLogger(__name__)

SOURCE_DIR = Path(__file__).parent
# -ffp-contract=off: no fused multiply-adds, so each float step rounds as torch's separate
# ops do; the AVX-512 code is enabled per function (target attributes) and only called after
# int8_linear_supported() checked the CPU at run time.
CFLAGS = ("-O3", "-fPIC", "-shared", "-fopenmp", "-pthread", "-ffp-contract=off")
BUILD_TIMEOUT_S = 120


def enabled() -> bool:
    return os.environ.get("TTS_CORE_NATIVE", "1") != "0"


def cache_root() -> Path:
    """`$TTS_CORE_CACHE`, default `~/.cache/tts_core` (RuntimeError where there is no home)."""
    return Path(os.environ.get("TTS_CORE_CACHE") or Path.home() / ".cache" / "tts_core")


def cache_dir() -> Path:
    return cache_root() / "native"


def compiler() -> str | None:
    return shutil.which(os.environ.get("CC", "cc"))


PREBUILT_ENV = "TTS_CORE_NATIVE_PREBUILT"


def prebuilt_dir() -> Path | None:
    """`$TTS_CORE_NATIVE_PREBUILT`: the directory of kernels built ahead (`prebuild`), if set."""
    named = os.environ.get(PREBUILT_ENV, "").strip()
    return Path(named) if named else None


def _source_bytes(source: Path) -> bytes:
    """What a build depends on besides the compiler: the source, its headers, the flags."""
    headers = b"".join(h.read_bytes() for h in sorted(source.parent.glob("*.h")))
    return source.read_bytes() + headers + " ".join(CFLAGS).encode()


def prebuilt_name(source: Path) -> str:
    return f"{source.stem}-{hashlib.sha256(_source_bytes(source)).hexdigest()[:16]}.so"


def _compile(cc: str, source: Path, target: Path) -> None:
    """Compile `source` to `target`: built beside it, then renamed, so processes building at
    once never load half a file (CalledProcessError, TimeoutExpired, OSError on failure)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as scratch:
        built = Path(scratch) / target.name
        subprocess.run(
            [cc, *CFLAGS, str(source), "-o", str(built)],
            check=True,
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT_S,
        )
        os.replace(built, target)


def prebuild(directory: Path) -> list[Path]:
    """Compile every 8-bit kernel of this architecture into `directory` under its
    `prebuilt_name` (whether this CPU runs it or not); raises where one does not build."""
    cc = compiler()
    if cc is None:
        raise RuntimeError("no C compiler (cc) to prebuild the native kernels with")
    built = []
    for isa in int8_isas_here():
        source = SOURCE_DIR / INT8_ISAS[isa].source
        built.append(directory / prebuilt_name(source))
        _compile(cc, source, built[-1])
    return built


def build(source: Path) -> Path | None:
    """The shared library for `source`: the prebuilt one where $TTS_CORE_NATIVE_PREBUILT holds
    it, else compiled if no build of this source and compiler exists yet; None (logged) where
    it cannot be built: no compiler, a compiler that fails, no home or no writable cache."""
    ahead = prebuilt_dir()
    if ahead is not None and (ahead / prebuilt_name(source)).is_file():
        return ahead / prebuilt_name(source)
    cc = compiler()
    if cc is None:
        log.info("no C compiler (cc) and no prebuilt %s: it runs on its torch path", source.name)
        return None
    try:
        version = subprocess.run(
            [cc, "--version"], capture_output=True, text=True, timeout=BUILD_TIMEOUT_S
        ).stdout
        key = hashlib.sha256(_source_bytes(source) + version.encode())
        target = cache_dir() / f"{source.stem}-{key.hexdigest()[:16]}.so"
        if target.exists():
            return target
        _compile(cc, source, target)
    except (subprocess.SubprocessError, OSError, RuntimeError) as error:  # RuntimeError: no home
        stderr = getattr(error, "stderr", "") or ""
        log.warning(
            "could not build %s (%s); using the torch path. %s", source.name, error, stderr[-2000:]
        )
        return None
    log.info("built %s", target)
    return target


@dataclass(frozen=True)
class Int8Layout:
    """How a kernel wants its (out, in) int8 weights: blocks of `block` output channels, each a
    run of (`block`, `group`) tiles along the inputs (packed[ob][kg][j][t] = W[block ob + j]
    [group kg + t]), the inputs zero padded to a multiple of `in_multiple`."""

    block: int
    group: int
    in_multiple: int


@dataclass(frozen=True)
class Int8Isa:
    name: str  # the TTS_CORE_NATIVE_ISA value
    source: str  # C file in this folder
    symbol: str  # entry point; `symbol`_supported checks the CPU
    layout: Int8Layout
    cpu_flags: tuple[str, ...]  # as /proc/cpuinfo names them (tests, reports)
    machines: tuple[str, ...]  # platform.machine() values (lower case) it can be built for


X86 = ("x86_64", "amd64")
ARM64 = ("aarch64", "arm64")
# best first: the order int8_linear() tries them in
INT8_ISAS = {
    isa.name: isa
    for isa in (
        Int8Isa(
            "avx512vnni",
            "int8_linear.c",
            "int8_linear",
            Int8Layout(16, 4, 4),
            ("avx512f", "avx512bw", "avx512vl", "avx512_vnni"),
            X86,
        ),
        Int8Isa(
            "avxvnni",
            "int8_linear_avxvnni.c",
            "int8_linear_avxvnni",
            Int8Layout(8, 4, 8),
            ("avx2", "avx_vnni"),
            X86,
        ),
        Int8Isa(
            "avx2", "int8_linear_avx2.c", "int8_linear_avx2", Int8Layout(8, 2, 8), ("avx2",), X86
        ),
        Int8Isa(
            "neon",
            "int8_linear_neon.c",
            "int8_linear_neon",
            Int8Layout(16, 4, 16),
            ("asimddp",),
            ARM64,
        ),
    )
}
ISA_ENV = "TTS_CORE_NATIVE_ISA"
TORCH_ISA = "torch"  # TTS_CORE_NATIVE_ISA value: no kernel


@dataclass(frozen=True)
class Int8Kernel:
    """One loaded 8-bit linear kernel; called as the C function (int8_common.h):
    (x, rows, in, out, packed, w_sum128, s_w, bias or None, y, threads) -> 0 or -1. `windows`:
    its entry over a conv's windows read in place (x, steps, width, step_stride, channel_stride,
    taps, gap, out, ...), or
    None where the kernel has none."""

    isa: Int8Isa
    function: ctypes._CFuncPtr
    windows: ctypes._CFuncPtr | None = None

    @property
    def layout(self) -> Int8Layout:
        return self.isa.layout

    def __call__(self, *args: object) -> int:
        return self.function(*args)


def int8_isas_here() -> list[str]:
    """The INT8_ISAS this machine's architecture could run (whether its CPU does is up to
    each kernel's check), best first."""
    machine = platform.machine().lower()
    return [name for name, isa in INT8_ISAS.items() if machine in isa.machines]


@functools.cache
def int8_kernel(isa: str) -> Int8Kernel | None:
    """The 8-bit linear kernel for `isa` (a key of INT8_ISAS), built on first use; None where
    native code is off, it is for another architecture, it cannot be built or loaded, or this
    CPU lacks its instructions."""
    spec = INT8_ISAS[isa]
    if not enabled() or isa not in int8_isas_here():
        return None
    path = build(SOURCE_DIR / spec.source)
    if path is None:
        return None
    try:
        library = ctypes.CDLL(str(path))
        supported = getattr(library, f"{spec.symbol}_supported")()
        function = getattr(library, spec.symbol)
    except (OSError, AttributeError) as error:  # e.g. a damaged file in the cache
        log.warning("could not load %s (%s); using the torch path", path, error)
        return None
    if not supported:
        log.info("this CPU has no %s: its 8-bit kernel cannot run", isa)
        return None
    function.restype = ctypes.c_int
    function.argtypes = [
        ctypes.c_void_p,
        ctypes.c_int64,
        ctypes.c_int64,
        ctypes.c_int64,
        ctypes.c_void_p,
        ctypes.c_void_p,
        ctypes.c_void_p,
        ctypes.c_void_p,
        ctypes.c_void_p,
        ctypes.c_int,
    ]
    windows = getattr(library, f"{spec.symbol}_windows", None)  # a conv's rows read in place
    if windows is not None:
        windows.restype = ctypes.c_int
        windows.argtypes = [function.argtypes[0], *[ctypes.c_int64] * 7, *function.argtypes[4:]]
    return Int8Kernel(spec, function, windows)


@functools.cache
def _chosen_int8_kernel() -> Int8Kernel | None:
    if not enabled():
        return None
    forced = os.environ.get(ISA_ENV, "").strip().lower()
    if forced == TORCH_ISA:
        log.info("%s=%s: 8-bit layers run on torch._int_mm", ISA_ENV, forced)
        return None
    if forced:
        if forced not in INT8_ISAS:
            log.warning(
                "%s=%s is none of %s; ignored", ISA_ENV, forced, ", ".join([*INT8_ISAS, TORCH_ISA])
            )
        else:
            kernel = int8_kernel(forced)
            if kernel is None:
                log.warning(
                    "%s=%s: that kernel cannot run here; 8-bit layers run on torch._int_mm",
                    ISA_ENV,
                    forced,
                )
            return kernel
    for isa in int8_isas_here():
        kernel = int8_kernel(isa)
        if kernel is not None:
            log.info("8-bit layers run on the native %s kernel", isa)
            return kernel
    log.info("no native 8-bit kernel runs here: 8-bit layers run on torch._int_mm")
    return None


def int8_linear() -> Int8Kernel | None:
    """The 8-bit linear kernel for this CPU (module doc: best first, or TTS_CORE_NATIVE_ISA),
    or None: the torch path. Looked up once; `int8_linear.cache_clear()` forgets it and every
    loaded kernel (after a change of the environment)."""
    return _chosen_int8_kernel()


INT4_SOURCE = "int4_linear.c"  # AVX-512 VNNI only (../../quant/int4.py: the format)
INT4_ISA = "avx512vnni"


@functools.cache
def int4_linear() -> ctypes._CFuncPtr | None:
    """The 4-bit linear kernel (int4_linear.c), or None: native code off, not x86-64, no build,
    no AVX-512 VNNI here, or TTS_CORE_NATIVE_ISA naming another kernel (then the 4-bit layers
    run as Int8Linear over their effective int8 weights: the same numbers)."""
    forced = os.environ.get(ISA_ENV, "").strip().lower()
    if not enabled() or forced not in ("", INT4_ISA) or platform.machine().lower() not in X86:
        return None
    path = build(SOURCE_DIR / INT4_SOURCE)
    try:
        library = None if path is None else ctypes.CDLL(str(path))
        supported = library is not None and library.int4_linear_supported()
    except (OSError, AttributeError) as error:
        log.warning("could not load %s (%s); 4-bit layers run as int8", path, error)
        return None
    if not supported:
        return None
    function = library.int4_linear
    function.restype = ctypes.c_int
    function.argtypes = [
        ctypes.c_void_p,
        ctypes.c_int64,
        ctypes.c_int64,
        ctypes.c_int64,
        *[ctypes.c_void_p] * 6,
        ctypes.c_int,
    ]
    return function


def _forget_kernels() -> None:
    _chosen_int8_kernel.cache_clear()
    int8_kernel.cache_clear()
    int4_linear.cache_clear()


int8_linear.cache_clear = _forget_kernels  # type: ignore[attr-defined]
