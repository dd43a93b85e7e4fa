"""CPU kernels in C, compiled on first use with the machine's C compiler and loaded by ctypes.

Each kernel has an exact pure-torch twin (tests hold them equal bit for bit), so a machine
without a C compiler, or without the instructions a kernel needs, runs the same numbers more
slowly. A library is built once per source, headers and compiler into `$TTS_CORE_CACHE`
(default `~/.cache/tts_core`)/native. TTS_CORE_NATIVE=0: the torch paths only.

Prebuilt kernels: `prebuild(directory)` compiles every kernel of this architecture into a
directory, each file named by a hash of its source, headers and flags; a process whose
TTS_CORE_NATIVE_PREBUILT names that directory loads them from there and needs no compiler (the
container image ships only the .so files). A prebuilt file of other sources has another name
and is never loaded.

The 8-bit linear kernel comes in one C file per instruction set (int8_linear*.c), each built
only when it is asked for; `int8_linear()` takes the best this CPU runs (INT8_ISAS, best
first), else None (the torch path). TTS_CORE_NATIVE_ISA=avx512vnni|avxvnni|avx2|neon forces one
(where the CPU lacks it: the torch path, with a warning), TTS_CORE_NATIVE_ISA=torch the torch
path.

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


def cache_path(*parts: str) -> Path | None:
    """`cache_root()`/parts, or None where there is no home directory to default to."""
    try:
        return cache_root().joinpath(*parts)
    except RuntimeError:
        return None


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


def kernels_here() -> list[tuple[str, Path]]:
    """(name, source) of every kernel of this architecture, whether this CPU runs it or not:
    the 8-bit ones best first, then the 4-bit one, the codec's SnakeBeta, the one-query
    attention and the whole 8-bit decode step on x86-64."""
    kernels = [(isa, SOURCE_DIR / INT8_ISAS[isa].source) for isa in int8_isas_here()]
    if platform.machine().lower() in X86:
        kernels.append(("int4", SOURCE_DIR / INT4_SOURCE))
        kernels.append(("snake_beta", SOURCE_DIR / SNAKE_BETA_SOURCE))
        kernels.append(("attend_one", SOURCE_DIR / ATTEND_ONE_SOURCE))
        kernels.append(("decode_stack", SOURCE_DIR / DECODE_STACK_SOURCE))
    return kernels


def prebuild(directory: Path) -> list[Path]:
    """Compile every kernel of this architecture (`kernels_here`) into `directory` under its
    `prebuilt_name`; raises where one does not build."""
    cc = compiler()
    if cc is None:
        raise RuntimeError("no C compiler (cc) to prebuild the native kernels with")
    built = []
    for _, source in kernels_here():
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
        target = cache_root() / "native" / f"{source.stem}-{key.hexdigest()[:16]}.so"
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
    source: str  # C file in this folder, named as its entry point (`symbol`_supported: the CPU)
    layout: Int8Layout
    cpu_flags: tuple[str, ...]  # as /proc/cpuinfo names them (tests, reports)
    machines: tuple[str, ...]  # platform.machine() values (lower case) it can be built for

    @property
    def symbol(self) -> str:
        return Path(self.source).stem


X86 = ("x86_64", "amd64")
ARM64 = ("aarch64", "arm64")
AVX512VNNI = ("avx512f", "avx512bw", "avx512vl", "avx512_vnni")
# best first: the order int8_linear() tries them in
INT8_ISAS = {
    isa.name: isa
    for isa in (
        Int8Isa("avx512vnni", "int8_linear.c", Int8Layout(16, 4, 4), AVX512VNNI, X86),
        Int8Isa("avxvnni", "int8_linear_avxvnni.c", Int8Layout(8, 4, 8), ("avx2", "avx_vnni"), X86),
        Int8Isa("avx2", "int8_linear_avx2.c", Int8Layout(8, 2, 8), ("avx2",), X86),
        Int8Isa("neon", "int8_linear_neon.c", Int8Layout(16, 4, 16), ("asimddp",), ARM64),
    )
}
ISA_ENV = "TTS_CORE_NATIVE_ISA"
TORCH_ISA = "torch"  # TTS_CORE_NATIVE_ISA value: no kernel


@dataclass(frozen=True)
class Int8Kernel:
    """One loaded 8-bit linear kernel: `function` and `windows` (None where the kernel has no
    entry over a conv's windows) are its C entry points (int8_common.h)."""

    isa: Int8Isa
    function: ctypes._CFuncPtr
    windows: ctypes._CFuncPtr | None = None

    @property
    def layout(self) -> Int8Layout:
        return self.isa.layout

    def __call__(self, *args: object) -> int:  # benchmarks/membw.py
        return self.function(*args)


def int8_isas_here() -> list[str]:
    """The INT8_ISAS this machine's architecture could run (whether its CPU does is up to
    each kernel's check), best first."""
    machine = platform.machine().lower()
    return [name for name, isa in INT8_ISAS.items() if machine in isa.machines]


def _load(source: str, symbol: str, fallback: str) -> ctypes.CDLL | None:
    """The library built from `source` where this CPU runs its `symbol` (`symbol`_supported()),
    else None (logged with what runs instead, `fallback`)."""
    path = build(SOURCE_DIR / source)
    if path is None:
        return None
    try:
        library = ctypes.CDLL(str(path))
        supported = getattr(library, f"{symbol}_supported")()
    except (OSError, AttributeError) as error:  # e.g. a damaged file in the cache
        log.warning("could not load %s (%s); %s", path, error, fallback)
        return None
    if not supported:
        log.info("this CPU lacks the instructions of %s; %s", source, fallback)
        return None
    return library


def _entry(library: ctypes.CDLL, symbol: str, sizes: int, pointers: int) -> ctypes._CFuncPtr:
    """`symbol` declared as int8_common.h's entry points: (x, `sizes` int64, `pointers` weight
    and output pointers, threads) -> int."""
    function = getattr(library, symbol)
    function.restype = ctypes.c_int
    function.argtypes = [
        ctypes.c_void_p,
        *[ctypes.c_int64] * sizes,
        *[ctypes.c_void_p] * pointers,
        ctypes.c_int,
    ]
    return function


@functools.cache
def int8_kernel(isa: str) -> Int8Kernel | None:
    """The 8-bit linear kernel for `isa` (a key of INT8_ISAS), built on first use; None where
    native code is off, it is for another architecture, it cannot be built or loaded, or this
    CPU lacks its instructions."""
    spec = INT8_ISAS[isa]
    if not enabled() or isa not in int8_isas_here():
        return None
    library = _load(spec.source, spec.symbol, "using the torch path")
    if library is None:
        return None
    # (x, rows, in, out, packed, w_sum128, s_w, bias, y, threads)
    function = _entry(library, spec.symbol, 3, 5)
    windows = None  # a conv's rows read in place: (x, steps, width, strides, taps, gap, out, ...)
    if hasattr(library, f"{spec.symbol}_windows"):
        windows = _entry(library, f"{spec.symbol}_windows", 7, 5)
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


SNAKE_BETA_SOURCE = "snake_beta.c"  # AVX-512 only (qwen3_tts/codec/kernels.py: its caller)
ATTEND_ONE_SOURCE = "attend_one.c"  # AVX-512 only (../attend_one.py: its caller)
DECODE_STACK_SOURCE = "decode_stack.c"  # AVX-512 VNNI only (../stack_step.py: its caller)
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
    library = _load(INT4_SOURCE, "int4_linear", "4-bit layers run as int8")
    # (x, rows, in, out, nibbles, mult, w_sum128, s_w, bias, y, threads)
    return None if library is None else _entry(library, "int4_linear", 3, 6)


generation = 0  # counts the cache_clear()s: a layer that bound a kernel's entries binds again


def _forget_kernels() -> None:
    global generation
    generation += 1
    _chosen_int8_kernel.cache_clear()
    int8_kernel.cache_clear()
    int4_linear.cache_clear()


int8_linear.cache_clear = _forget_kernels  # type: ignore[attr-defined]
