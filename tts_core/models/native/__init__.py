"""CPU kernels in C, compiled on first use with the machine's C compiler and loaded by ctypes.

Each kernel has an exact pure-torch twin (tests hold them equal bit for bit), so a machine
without a C compiler, or without the instructions a kernel needs, runs the same numbers
more slowly. The shared library is built once per source and compiler into
`$TTS_CORE_CACHE` (default `~/.cache/tts_core`)/native and reused by later processes.
Set TTS_CORE_NATIVE=0 to use the torch paths only.

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
import shutil
import subprocess
import tempfile
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


def cache_dir() -> Path:
    root = os.environ.get("TTS_CORE_CACHE") or Path.home() / ".cache" / "tts_core"
    return Path(root) / "native"


def compiler() -> str | None:
    return shutil.which(os.environ.get("CC", "cc"))


def build(source: Path) -> Path | None:
    """The shared library for `source`, compiled if no build of this source and compiler
    exists yet; None (logged) where it cannot be built: no compiler, a compiler that fails, no
    home or no writable cache directory."""
    cc = compiler()
    if cc is None:
        log.info("no C compiler (cc): %s runs on its torch path", source.name)
        return None
    try:
        version = subprocess.run([cc, "--version"], capture_output=True, text=True,
                                 timeout=BUILD_TIMEOUT_S).stdout  # fmt: skip
        key = hashlib.sha256(source.read_bytes() + " ".join(CFLAGS).encode() + version.encode())
        target = cache_dir() / f"{source.stem}-{key.hexdigest()[:16]}.so"
        if target.exists():
            return target
        target.parent.mkdir(parents=True, exist_ok=True)
        # built beside the target, then renamed: processes building at once never load half a file
        with tempfile.TemporaryDirectory(dir=target.parent) as scratch:
            built = Path(scratch) / target.name
            subprocess.run([cc, *CFLAGS, str(source), "-o", str(built)], check=True,
                           capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)  # fmt: skip
            os.replace(built, target)
    except (subprocess.SubprocessError, OSError, RuntimeError) as error:  # RuntimeError: no home
        stderr = getattr(error, "stderr", "") or ""
        log.warning("could not build %s (%s); using the torch path. %s",
                    source.name, error, stderr[-2000:])  # fmt: skip
        return None
    log.info("built %s", target)
    return target


@functools.cache
def int8_linear() -> ctypes._CFuncPtr | None:
    """The AVX-512 VNNI 8-bit linear kernel (int8_linear.c), or None where it cannot run."""
    if not enabled():
        return None
    path = build(SOURCE_DIR / "int8_linear.c")
    if path is None:
        return None
    try:
        library = ctypes.CDLL(str(path))
    except OSError as error:  # e.g. a damaged file in the cache
        log.warning("could not load %s (%s); using the torch path", path, error)
        return None
    if not library.int8_linear_supported():
        log.info("this CPU has no AVX-512 VNNI: 8-bit layers run on torch._int_mm")
        return None
    kernel = library.int8_linear
    kernel.restype = ctypes.c_int
    kernel.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64,
                       ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                       ctypes.c_void_p, ctypes.c_int]  # fmt: skip
    return kernel
