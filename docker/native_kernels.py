"""The image's CPU kernels (8-bit, 4-bit, the codec's SnakeBeta, the one-query attention, the
8-bit decode step), built ahead (tts_core/models/native: prebuild).

    python docker/native_kernels.py build   in the build stage (gcc): compile every kernel of
                                            this architecture into $TTS_CORE_NATIVE_PREBUILT
    python docker/native_kernels.py check   in the final stage (no compiler): each kernel is
                                            found there, by its source's hash, and loads

Exits non-zero where a kernel is missing, does not build or does not load, so the image build
fails instead of an image that quietly runs the slower torch path. It checks the tts_core
source beside docker/ (the app's), whose bytes name the kernels.
"""

from __future__ import annotations

import ctypes
import sys
from pathlib import Path

# the tts_core beside this folder, the one app.py runs (the image installs no copy of it)
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tts_core.models import native  # noqa: E402


def build() -> list[str]:
    directory = native.prebuilt_dir()
    if directory is None:
        raise SystemExit(f"set {native.PREBUILT_ENV} to the directory the kernels go to")
    return [str(path) for path in native.prebuild(directory)]


def check() -> list[str]:
    """Each kernel of this architecture resolves to its prebuilt file without a compiler, and
    the dynamic linker opens it (libgomp: torch's, loaded by `native`'s import of torch)."""
    if native.compiler() is not None:
        raise SystemExit(f"a C compiler is in this image: {native.compiler()}")
    found = []
    for name, source in native.kernels_here():
        path = native.build(source)
        if path is None or path.parent != native.prebuilt_dir():
            raise SystemExit(
                f"no prebuilt {name} kernel ({source.name}) in {native.prebuilt_dir()}"
            )
        ctypes.CDLL(str(path))  # OSError where it cannot be loaded
        found.append(f"{name}: {path}")
    if not found:
        raise SystemExit("no native kernel for this architecture")
    return found


if __name__ == "__main__":
    steps = {"build": build, "check": check}
    if len(sys.argv) != 2 or sys.argv[1] not in steps:
        raise SystemExit(f"usage: {sys.argv[0]} build|check")
    print("\n".join(steps[sys.argv[1]]()))
