"""The registered voices' folders on disk: written so that a crash or a full disk costs nothing.

Writes never touch a live folder (`<root>/<name>/reference.wav` + `meta.json`). A new voice
is written to a hidden staging folder, then swapped in by renames: live -> `.old~<name>`,
staging -> live, then the old copy is dropped; a delete first renames the live folder to a
`.del~` name. A crash at any step leaves the old voice or the new one: `recover()`, run at
start, puts an `.old~` copy back when its live folder is missing and removes every other
leftover, so an interrupted write never keeps holding disk space. Nothing here locks: the
caller (VoiceRegistry) keeps readers out while it swaps.
"""

from __future__ import annotations

import errno
import io
import json
import logging
import os
import re
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import soundfile as sf

from ..audio import SAMPLE_RATE, to_int16

log = logging.getLogger(__name__)

NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
REFERENCE_FILE, META_FILE = "reference.wav", "meta.json"
# Hidden, so never taken for a voice; '~' cannot occur in a voice name.
STAGING, ASIDE, TRASH = ".new~", ".old~", ".del~"
LEGACY_STAGING = re.compile(r"^\.[A-Za-z0-9][A-Za-z0-9_.-]{0,63}-[a-z0-9_]{8}$")  # before .new~
NO_SPACE = "The server has no disk space left for voices."
NOT_WRITABLE = "The voice store is not writable on this server."


class VoiceStoreError(Exception):
    """The voice store cannot take a write; `status` is the HTTP status to answer with."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


@contextmanager
def store_errors() -> Iterator[None]:
    """OSErrors that mean 'the store cannot take writes' as VoiceStoreError, without paths."""
    try:
        yield
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise VoiceStoreError(NO_SPACE, 507) from exc
        if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
            raise VoiceStoreError(NOT_WRITABLE, 503) from exc
        raise


def stage(
    root: Path,
    name: str,
    audio: np.ndarray,
    transcript: str | None,
    owner: str | None = None,
    issuer: str | None = None,
) -> Path:
    """A new hidden folder under `root` holding the voice; nothing is left of it on failure.
    `owner`: a digest of who may delete it from the page (None: only the API may); `issuer`:
    the quota it counts against (voices.VoiceRegistry._issuer)."""
    root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f"{STAGING}{name}~", dir=root))
    try:
        wav = io.BytesIO()
        sf.write(wav, to_int16(audio), SAMPLE_RATE, subtype="PCM_16", format="WAV")
        meta = {"name": name, "transcript": transcript, "created_at": int(time.time())}
        if owner is not None:
            meta["owner"] = owner
        if issuer is not None:
            meta["issuer"] = issuer
        _write_synced(staging / REFERENCE_FILE, wav.getvalue())
        _write_synced(staging / META_FILE, json.dumps(meta, ensure_ascii=False, indent=1).encode())
    except BaseException:
        remove(staging)  # a full disk must not stay full of our own leftovers
        raise
    return staging


def swap(staging: Path, target: Path) -> None:
    """Put `staging` in place of `target` (which may not exist) by renames only."""
    aside = target.parent / f"{ASIDE}{target.name}"
    remove(aside)  # left by a failed recovery; the caller means to replace it anyway
    had_old = target.exists() or target.is_symlink()
    if had_old:
        os.rename(target, aside)
    try:
        os.rename(staging, target)
    except BaseException:
        if had_old:
            try:
                os.rename(aside, target)
            except OSError:  # still recoverable: the next start puts it back
                log.exception("Could not put voice %s back; restart to recover it", target)
        raise
    remove(aside)


def trash(target: Path) -> Path:
    """Take `target` out of the store in one rename; the caller removes what this returns."""
    trashed = target.parent / f"{TRASH}{target.name}~{uuid.uuid4().hex[:8]}"
    os.rename(target, trashed)
    return trashed


def recover(root: Path) -> None:
    """Undo what a crash left under `root`: restore voices caught mid-replace, drop the rest."""
    try:
        entries = sorted(root.iterdir()) if root.is_dir() else []
    except OSError as exc:
        log.warning("Cannot read the voice folder %s: %s", root, exc)
        return
    for entry in entries:
        hidden = entry.name
        if hidden.startswith(ASIDE) and _restore(entry, root / hidden[len(ASIDE) :]):
            continue
        if hidden.startswith((STAGING, ASIDE, TRASH)) or LEGACY_STAGING.match(hidden):
            remove(entry)


def probe(root: Path) -> str | None:
    """Why `root` cannot take voices, or None: a real write, since permission bits say little
    when running as root or on a read-only mount. Creates `root` if missing."""
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return f"the folder cannot be created ({exc.strerror or exc})"
    try:
        os.rmdir(tempfile.mkdtemp(prefix=f"{STAGING}probe~", dir=root))
    except OSError as exc:
        return f"the folder is not writable ({exc.strerror or exc})"
    return None


def remove(path: Path) -> None:
    """Delete a file, link or folder if present; what fails is left for the start-up sweep."""
    try:
        if path.is_symlink() or path.is_file():
            path.unlink()  # a link is removed, never followed
        elif path.exists():
            shutil.rmtree(path)
    except OSError as exc:
        log.warning("Could not remove %s: %s", path, exc)


def _restore(aside: Path, live: Path) -> bool:
    # The old copy is whole (it was live); the new one may not be, so the old one wins.
    if not NAME_PATTERN.match(live.name) or live.exists() or live.is_symlink():
        return False  # the swap finished: the aside copy is garbage
    try:
        os.rename(aside, live)
        log.warning("Restored voice %s after an interrupted replace", live)
    except OSError as exc:
        log.warning("Could not restore voice %s: %s", live, exc)
    return True


def _write_synced(path: Path, data: bytes) -> None:
    # fsync before the rename: otherwise a power cut can keep the rename but not the data.
    # Plain writes (not libsndfile) so that a full disk is reported as ENOSPC.
    with open(path, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
