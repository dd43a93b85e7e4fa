"""Put an ffmpeg executable on PATH: Gradio's streamed audio output needs `ffmpeg`.

A fresh machine has no system ffmpeg; the `imageio-ffmpeg` wheel ships a static binary under a
versioned file name, so we link it as `ffmpeg` in a private folder and prepend that to PATH.

The wheel has no `ffprobe`. Gradio only probes a file path handed to an Audio output (our
examples) to decide whether the browser can play it, and treats a failed probe as "playable"
but crashes when the executable is missing. So where no ffprobe exists we install a stand-in
that always fails with a message: our audio is WAV, which browsers play, so "playable" is right.
"""

from __future__ import annotations

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


def ensure_ffmpeg_on_path() -> str:
    """Returns the ffmpeg that Gradio will find, linking the wheel's binary when needed."""
    folder = Path(tempfile.gettempdir()) / f"tts_core-ffmpeg-{os.getuid()}"
    found = shutil.which("ffmpeg")
    if found is None:
        import imageio_ffmpeg  # deferred: only needed on machines without a system ffmpeg

        exe = Path(imageio_ffmpeg.get_ffmpeg_exe())
        _install(folder / "ffmpeg", lambda tmp: tmp.symlink_to(exe))
        log.info("ffmpeg: using %s (from imageio-ffmpeg)", exe)
        found = str(folder / "ffmpeg")
    if shutil.which("ffprobe") is None:
        _install(folder / "ffprobe", lambda tmp: _write_script(tmp, _FFPROBE_STAND_IN))
    if str(folder) not in os.environ.get("PATH", "").split(os.pathsep) and folder.is_dir():
        os.environ["PATH"] = f"{folder}{os.pathsep}{os.environ.get('PATH', '')}"
    return found


def _install(target: Path, make) -> None:  # noqa: ANN001 - make(tmp_path) creates the file
    if target.exists():
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}-{os.getpid()}")
    tmp.unlink(missing_ok=True)
    make(tmp)
    tmp.replace(target)  # atomic: two processes starting at once both end up with a file


def _write_script(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(0o755)
