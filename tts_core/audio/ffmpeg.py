"""Put an ffmpeg executable on PATH: Gradio's streamed audio output needs `ffmpeg`.

A fresh machine has no system ffmpeg; the `imageio-ffmpeg` wheel ships a static binary under a
versioned file name, so we link it as `ffmpeg` in a private folder and prepend that to PATH.

The wheel has no `ffprobe`. Gradio only probes a file path handed to an Audio output (our
examples) to decide whether the browser can play it, and treats a failed probe as "playable"
but crashes when the executable is missing. So where no ffprobe exists we install a stand-in
that always fails with a message: our audio is WAV, which browsers play, so "playable" is right.
"""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import tempfile
from pathlib import Path

log = logging.getLogger(__name__)

_FFPROBE_STAND_IN = """#!/bin/sh
echo "ffprobe is not installed (tts_core stand-in: probing unavailable)" >&2
exit 1
"""


def ffmpeg_executable() -> str:
    """A usable ffmpeg: the system's, else the imageio-ffmpeg wheel's binary."""
    found = shutil.which("ffmpeg")
    if found:
        return found
    import imageio_ffmpeg  # deferred: only needed on machines without a system ffmpeg

    return imageio_ffmpeg.get_ffmpeg_exe()


_private_folder: Path | None = None


def ensure_ffmpeg_on_path() -> str:
    """Returns the ffmpeg that Gradio will find, linking the wheel's binary when needed.

    The links live in a folder made for this process by `mkdtemp` (mode 0700, a fresh random
    name, removed at exit): a folder with a predictable name in the shared temp dir could be
    made first by another user, who would then choose what runs as `ffmpeg` for us.
    """
    found = shutil.which("ffmpeg")
    need_ffprobe = shutil.which("ffprobe") is None
    if found is not None and not need_ffprobe:
        return found
    folder = _folder()
    if found is None:
        import imageio_ffmpeg  # deferred: only needed on machines without a system ffmpeg

        exe = Path(imageio_ffmpeg.get_ffmpeg_exe())
        (folder / "ffmpeg").symlink_to(exe)
        log.info("ffmpeg: %s -> %s (from imageio-ffmpeg)", folder / "ffmpeg", exe)
        found = str(folder / "ffmpeg")
    if need_ffprobe:
        (folder / "ffprobe").write_text(_FFPROBE_STAND_IN)
        (folder / "ffprobe").chmod(0o700)
    os.environ["PATH"] = f"{folder}{os.pathsep}{os.environ.get('PATH', '')}"
    return found


def _folder() -> Path:
    global _private_folder
    if _private_folder is None:
        _private_folder = Path(tempfile.mkdtemp(prefix="tts_core-bin-"))
        atexit.register(shutil.rmtree, _private_folder, ignore_errors=True)
    return _private_folder
