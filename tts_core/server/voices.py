"""Named voices: the built-in ones shipped in assets/voices and the ones users register.

A voice is a reference clip (+ optional transcript) that the engine clones; built-in voices
carry OpenAI's stock names. Registered voices live one folder each (`<root>/<name>/` with
reference.wav and meta.json), written by voice_store so that a crash or a full disk never loses
a voice. Readers take the same lock as a replace and `load()` reads the clip into memory, so a
replace never pulls a file from under a request; the lock is per process: one registry per
root. Hand-damaged folders are listed as "damaged" so they can be deleted.

With `private=True` a saved voice is seen only by the visitor whose owner key saved it (a
`Viewer`) and the operator (`OPERATOR`); to anyone else it does not exist (VoiceNotFound).

Quotas are keyed on what the server can trust, not on a key a client picks: a registration
counts against its owner (`max_per_owner`) and its issuer (`max_per_address`): the request's
client address when known (the /v1 route; the page's save: `event_client_address`), else the
address an issued owner key carries (access.OwnerKeys, signed), else one shared bucket for all
self-made keys. So rotating self-made keys fills at most one address's share, never the store.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import json
import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import soundfile as sf

from ..audio import resample
from ..engine import InputError, Limits
from ..engine.validation import clean_reference_text, prepare_reference
from .access import OWNER_KEY_PREFIX, OwnerKeys
from .connections import address_key
from .voice_store import (
    META_FILE,
    NAME_PATTERN,
    REFERENCE_FILE,
    VoiceStoreError,
    probe,
    recover,
    remove,
    stage,
    store_errors,
    swap,
    trash,
)

__all__ = [
    "BUILTIN_FOLDER",
    "NAME_PATTERN",
    "OPERATOR",
    "NamedVoice",
    "Viewer",
    "VoiceDamaged",
    "VoiceNotFound",
    "VoiceRegistry",
    "VoiceStoreError",
    "check_name",
]

log = logging.getLogger(__name__)

BUILTIN_FOLDER = Path(__file__).resolve().parents[2] / "assets" / "voices"
UNREADABLE_CLIP = "reference.wav is not readable audio"
UNVERIFIED_ISSUER = "unverified"  # self-made keys whose client address is unknown: one share


@dataclass
class NamedVoice:
    name: str
    reference: Path  # 24 kHz mono WAV
    transcript: str | None
    kind: str  # "builtin" or "custom"
    description: str = ""
    created_at: int = 0
    status: str = "ok"  # "ok" or "damaged": a custom folder whose files cannot be used
    problem: str | None = None  # what is wrong with a damaged one, without paths
    owner: str | None = None  # digest of the page visitor who saved it (never listed)
    issuer: str | None = None  # the quota it counts against (OwnerKeys.issuer_tag; not listed)

    def owned_by(self, owner_key: str | None) -> bool:
        """True for the visitor whose key saved it (see `owner_digest`)."""
        if not owner_key or self.owner is None:
            return False
        return hmac.compare_digest(self.owner, owner_digest(owner_key))

    def as_json(self) -> dict:
        data = asdict(self)
        data.pop("reference")
        data.pop("owner")
        data.pop("issuer")
        if data["problem"] is None:
            data.pop("problem")
        return {"id": self.name, "object": "voice", **data}


@dataclass(frozen=True)
class Viewer:
    """Who asks for voices: a visitor, known by the owner key it presents (a browser's key on
    the page, X-Voice-Owner on the /v1 API without a key), or the operator, who sees them all.
    Without `private` every viewer sees every voice."""

    owner_key: str | None = None
    operator: bool = False


OPERATOR = Viewer(operator=True)  # the /v1 API behind --api-key, and in-process callers


class VoiceNotFound(KeyError):
    pass


class VoiceDamaged(Exception):
    """A stored voice's files cannot be used: the server's problem, not the request's."""


class VoiceRegistry:
    """Built-in voices (read-only) + registered voices under `root` (created on demand).
    `private`: a registered voice is seen only by its owner and the operator (see `Viewer`).
    `max_voices` bounds the store, `max_per_owner` what one owner key may keep in it (so one
    visitor cannot fill the store for everyone); the operator's registrations have no owner."""

    def __init__(
        self,
        root: str | Path,
        builtin_folder: Path = BUILTIN_FOLDER,
        max_voices: int = 500,
        private: bool = False,
        max_per_owner: int = 20,
        max_per_address: int = 50,
    ) -> None:
        self.root = Path(root)
        self.max_voices = max_voices  # registered ones: a bound on what visitors can store
        self.max_per_owner = max_per_owner  # saved under one owner key: one visitor's share
        self.max_per_address = max_per_address  # saved by one issuer (module docstring)
        self._owner_keys: OwnerKeys | None = None  # made on first use (its secret's file)
        self.private = private
        self._builtin = _load_builtins(builtin_folder)
        self._lock = threading.Lock()
        self._writes = threading.Condition()  # counts registrations writing to the disk
        self._writing_now = 0
        self._warned: set[tuple[str, str | None]] = set()
        recover(self.root)

    @property
    def owner_keys(self) -> OwnerKeys:
        if self._owner_keys is None:
            self._owner_keys = OwnerKeys.for_folder(self.root)
        return self._owner_keys

    def issue_owner_key(self, address: str | None, keep: str | None = None) -> str:
        """An owner key for the client at `address` (connections.address_key of its IP);
        `keep`: the key it holds, returned when this server issued it, else kept inside the
        new one so that the voices it saved stay its own (OwnerKeys.issue)."""
        return self.owner_keys.issue(address, keep)

    def visible(self, voice: NamedVoice, viewer: Viewer) -> bool:
        """Whether `viewer` may see (list, use) `voice`."""
        if voice.kind == "builtin" or not self.private or viewer.operator:
            return True
        return voice.owned_by(viewer.owner_key)

    def names(self, viewer: Viewer = OPERATOR) -> list[str]:
        return [voice.name for voice in self.list(viewer)]

    def list(self, viewer: Viewer = OPERATOR) -> list[NamedVoice]:
        """Built-in voices, then the custom ones `viewer` may see, damaged ones included (see
        `status`)."""
        with self._lock:
            custom = [v for v in self._custom() if self.visible(v, viewer)]
            return [self._builtin[n] for n in sorted(self._builtin)] + custom

    def get(self, name: str, viewer: Viewer = OPERATOR) -> NamedVoice:
        with self._lock:
            return self._get(name, viewer)

    def load(self, name: str, viewer: Viewer = OPERATOR) -> tuple[NamedVoice, np.ndarray]:
        """The voice and its whole clip as float32 mono 24 kHz samples, read under the lock
        (the clip matches the transcript); VoiceNotFound (also for a voice `viewer` may not
        see), or VoiceDamaged."""
        with self._lock:
            voice = self._get(name, viewer)
            if voice.status == "ok":
                try:
                    return voice, _read_clip(voice.reference)
                except Exception:  # noqa: BLE001 - libsndfile raises several types for "not audio"
                    if voice.kind == "builtin":
                        raise  # a broken install, not a stored voice the user can fix
                    damaged = dataclasses.replace(voice, status="damaged", problem=UNREADABLE_CLIP)
                    voice = self._note(damaged)
        raise VoiceDamaged(
            f"The stored voice '{name}' is damaged ({voice.problem}); "
            "delete it and register it again."
        )

    def register(
        self,
        name: str,
        audio_source: str | Path | bytes | tuple[int, np.ndarray],
        transcript: str | None,
        limits: Limits | None = None,
        replace: bool = False,
        owner_key: str | None = None,
        viewer: Viewer = OPERATOR,
        address: str | None = None,
    ) -> NamedVoice:
        """Check the clip like a synthesis reference (InputError), then store it under `name`.

        `owner_key`: the page visitor's secret; only that key may delete it from the page
        (`delete(name, owner_key=...)`), the API may delete any custom voice. `viewer`: who
        registers; `replace` replaces only a voice it may see. `address`: the client's
        (connections.address_key), when the caller knows it: its quota (module docstring).
        Raises FileExistsError when the name is taken (and not replaced), and VoiceStoreError
        when the disk is full or the store is not writable, 429 past a quota.
        """
        check_name(name)
        if name in self._builtin:
            raise FileExistsError(f"'{name}' is a built-in voice and cannot be replaced.")
        limits = limits or Limits()
        transcript = clean_reference_text(transcript, limits)
        # a clip longer than the limit is cut, unless a transcript would no longer match it
        audio, _notices = prepare_reference(audio_source, limits, transcript is not None)
        if audio is None:
            raise InputError("A reference clip is needed to register a voice.")
        if address is None and owner_key:  # the page's save: its Gradio event's client
            address = event_client_address()
        issuer = self._issuer(owner_key, address)
        with self._lock:  # refuse a taken name, or a full store, before writing anything
            self._check_free(name, replace, viewer)
            self._check_room(name, owner_key, issuer)
        with self._writing(), store_errors():
            owner = owner_digest(owner_key) if owner_key else None
            staging = stage(self.root, name, audio, transcript, owner, issuer)
            try:
                with self._lock:
                    self._check_free(name, replace, viewer)
                    swap(staging, self.root / name)
                    self._forget(name)
                    return self._get(name, OPERATOR)
            finally:
                remove(staging)  # left by a failed swap; already gone after a good one

    def delete(self, name: str, owner_key: str | None = None, check_owner: bool = False) -> None:
        """Remove a custom voice, damaged or not; with `check_owner` (the page) only the one
        `owner_key` saved.

        Raises VoiceNotFound (also for someone else's voice in a private registry: it does not
        exist for them), PermissionError for someone else's voice, or FileExistsError for a
        built-in voice or a folder linked from outside the store (not ours to remove).
        """
        if name in self._builtin:
            raise FileExistsError(f"'{name}' is a built-in voice and cannot be deleted.")
        with self._lock:
            target = self.root / name
            voice = _read_custom(target) if NAME_PATTERN.match(name) else None
            if voice is None:
                raise VoiceNotFound(name)
            if check_owner and not voice.owned_by(owner_key):
                if self.private:
                    raise VoiceNotFound(name)
                raise PermissionError(
                    f"The voice '{name}' was not saved from this browser; "
                    "only its owner (or the API) can delete it."
                )
            self._refuse_outside(target, "deleted")
            with store_errors():
                trashed = trash(target)  # one rename: readers see the voice or nothing
            self._forget(name)
        remove(trashed)  # outside the lock: readers need not wait for the disk

    def wait_for_writes(self, timeout: float) -> bool:
        """Block until no registration is writing (True) or `timeout` passed (False); a write
        cut short by the process ending is rolled back by `recover` at the next start."""
        with self._writes:
            return self._writes.wait_for(lambda: self._writing_now == 0, timeout)

    @contextmanager
    def _writing(self) -> Iterator[None]:
        with self._writes:
            self._writing_now += 1
        try:
            yield
        finally:
            with self._writes:
                self._writing_now -= 1
                self._writes.notify_all()

    def store_problem(self) -> str | None:
        """For a start-up warning: why `root` cannot take voices, or None when it can."""
        return probe(self.root)

    def _get(self, name: str, viewer: Viewer) -> NamedVoice:
        if name in self._builtin:
            return self._builtin[name]
        voice = _read_custom(self.root / name) if NAME_PATTERN.match(name) else None
        if voice is None or not self.visible(voice, viewer):
            raise VoiceNotFound(name)
        return self._note(voice)

    def _custom(self) -> list[NamedVoice]:
        if not self.root.is_dir():
            return []
        found = (_read_custom(p) for p in sorted(self.root.iterdir()))
        return [self._note(v) for v in found if v is not None and v.name not in self._builtin]

    def _check_free(self, name: str, replace: bool, viewer: Viewer) -> None:
        target = self.root / name
        if not (target.exists() or target.is_symlink()):
            return
        existing = _read_custom(target)
        if existing is None:  # never overwrite what we did not write
            raise FileExistsError(f"The name '{name}' is taken by a folder that is not a voice.")
        if not replace or not self.visible(existing, viewer):  # one namespace: still taken
            raise FileExistsError(f"A voice named '{name}' already exists.")
        self._refuse_outside(target, "replaced")

    def _issuer(self, owner_key: str | None, address: str | None) -> str | None:
        """The quota a registration counts against (module docstring); None: the operator's
        own (in-process, or /v1 behind its key), bounded by the store only."""
        if address is not None:
            return self.owner_keys.issuer_tag(address)
        if not owner_key:
            return None
        shaped = owner_key.startswith(OWNER_KEY_PREFIX)  # only then is the secret read
        issued = self.owner_keys.parse(owner_key) if shaped else None
        return issued.issuer if issued is not None else UNVERIFIED_ISSUER

    def is_issued(self, owner_key: str | None) -> bool:
        """Whether this server issued `owner_key` (its secret is read only for a key shaped
        as an issued one)."""
        if not owner_key or not owner_key.startswith(OWNER_KEY_PREFIX):
            return False
        return self.owner_keys.parse(owner_key) is not None

    def _check_room(self, name: str, owner_key: str | None, issuer: str | None = None) -> None:
        """Full when `max_voices` voices are stored (damaged ones too: they are listed until
        deleted), or `owner_key` already keeps `max_per_owner`, or `issuer` already has
        `max_per_address`; a stray file or a folder holding no voice takes no place."""
        if _is_voice_folder(self.root / name):
            return  # a replacement takes no new place
        entries = list(self.root.iterdir()) if self.root.is_dir() else []
        folders = [p for p in entries if p.name not in self._builtin and _is_voice_folder(p)]
        if len(folders) >= self.max_voices:
            raise VoiceStoreError(
                f"The voice store is full ({self.max_voices} voices); delete one first.", 507
            )
        if owner_key and self._owned_count(folders, owner_key) >= self.max_per_owner:
            raise VoiceStoreError(
                f"This browser already keeps {self.max_per_owner} voices, the "
                "most one visitor may save; delete one first.",
                429,
            )
        if issuer and self._issued_count(folders, issuer) >= self.max_per_address:
            raise VoiceStoreError(
                f"This address already keeps {self.max_per_address} voices, "
                "the most one client may save; delete one first.",
                429,
            )

    @staticmethod
    def _issued_count(folders: list[Path], issuer: str) -> int:
        voices = (_read_custom(folder) for folder in folders)
        return sum(1 for voice in voices if voice is not None and voice.issuer == issuer)

    @staticmethod
    def _owned_count(folders: list[Path], owner_key: str) -> int:
        voices = (_read_custom(folder) for folder in folders)
        return sum(1 for voice in voices if voice is not None and voice.owned_by(owner_key))

    def _refuse_outside(self, target: Path, verb: str) -> None:
        if not target.resolve().is_relative_to(self.root.resolve()):
            raise FileExistsError(
                f"The voice '{target.name}' is kept outside the voice store and cannot be {verb}."
            )

    def _note(self, voice: NamedVoice) -> NamedVoice:
        """Log a damaged voice once per problem, so an admin hears of it without a flood."""
        key = (voice.name, voice.problem)
        if voice.status != "ok" and key not in self._warned:
            self._warned.add(key)
            log.warning(
                "Voice folder %s is damaged: %s. Delete the voice and register it again.",
                voice.reference.parent,
                voice.problem,
            )
        return voice

    def _forget(self, name: str) -> None:
        self._warned = {key for key in self._warned if key[0] != name}


def owner_digest(owner_key: str) -> str:
    """What meta.json keeps of a visitor's secret key: the SHA-256 of its identity (an issued
    key's secret part, so a browser's earlier self-made key kept inside an issued one owns
    the same voices; a self-made key whole), so reading the store does not give it away."""
    return hashlib.sha256(owner_identity(owner_key).encode("utf-8")).hexdigest()


def event_client_address() -> str | None:
    """The client address (connections.address_key) of the Gradio event running in this
    context (Gradio sets `LocalContext.request` around an event's function), else None."""
    try:
        from gradio.context import LocalContext
    except ImportError:  # pragma: no cover - gradio is a dependency of the page
        return None
    client = getattr(LocalContext.request.get(None), "client", None)
    host = getattr(client, "host", None)
    return address_key(host) if isinstance(host, str) and host else None


def owner_identity(owner_key: str) -> str:
    """The identity inside a key shaped as an issued one (`vo1.<issuer>.<identity>.<sig>`),
    else the key. The signature is not checked here: owning a voice takes knowing its
    identity, the secret itself; the signature matters for quotas (VoiceRegistry._issuer)."""
    if owner_key.startswith(OWNER_KEY_PREFIX):
        _issuer, _, rest = owner_key[len(OWNER_KEY_PREFIX) :].partition(".")
        identity, dot, _signature = rest.rpartition(".")
        if dot and identity:
            return identity
    return owner_key


# /v1's name for the served model's own voice, spoken without a clip (the page's "no clip"):
# Chatterbox's conds.pt voice, VoxCPM2's zero-shot voice, eSpeak's default; a model that needs
# a clip (Qwen3-TTS) refuses it with the reason. No saved voice may take this name.
MODEL_VOICE = "default"


def check_name(name: object) -> str:
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        raise InputError(
            "Voice names are 1-64 characters: letters, digits, '_', '-' or '.', "
            "starting with a letter or digit."
        )
    if name == MODEL_VOICE:
        raise InputError(f"'{MODEL_VOICE}' names the model's own voice here: pick another name.")
    return name


def _read_clip(path: Path) -> np.ndarray:
    """The whole clip as float32 mono 24 kHz (a hand-placed file may have another format)."""
    audio, rate = sf.read(str(path), dtype="float32", always_2d=True)
    if audio.size == 0:
        raise ValueError("no audio")
    return resample(audio.mean(axis=1), rate)


def _is_voice_folder(folder: Path) -> bool:
    """Whether `folder` holds a voice (maybe a damaged one), as `list()` shows it: a visible
    folder with meta.json or reference.wav in it. Reads no file."""
    if folder.name.startswith(".") or not folder.is_dir():
        return False
    return (folder / META_FILE).is_file() or (folder / REFERENCE_FILE).is_file()


def _read_custom(folder: Path) -> NamedVoice | None:
    """The voice in `folder`, status "damaged" if its files are bad; None if it holds none."""
    if not _is_voice_folder(folder):
        return None
    meta_path, reference = folder / META_FILE, folder / REFERENCE_FILE
    meta, problem = {}, None
    if not meta_path.is_file():
        problem = "meta.json is missing"
    else:
        try:
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
        except OSError:
            problem = "meta.json is not readable"
        except ValueError:
            problem = "meta.json is not valid JSON"
        if not isinstance(meta, dict):
            meta, problem = {}, "meta.json is not a JSON object"
    problem = problem or _clip_problem(reference)
    transcript, created_at, owner, issuer = (
        meta.get(k) for k in ("transcript", "created_at", "owner", "issuer")
    )
    return NamedVoice(
        name=folder.name,
        reference=reference,
        transcript=transcript if isinstance(transcript, str) else None,
        kind="custom",
        created_at=created_at if isinstance(created_at, int) else 0,
        status="damaged" if problem else "ok",
        problem=problem,
        owner=owner if isinstance(owner, str) else None,
        issuer=issuer if isinstance(issuer, str) else None,
    )


def _clip_problem(reference: Path) -> str | None:
    if not reference.is_file():
        return "reference.wav is missing"
    try:
        frames = sf.info(str(reference)).frames  # the header only: list() stays cheap
    except Exception:  # noqa: BLE001 - libsndfile raises several types for "not audio"
        frames = 0
    return None if frames > 0 else UNREADABLE_CLIP


def _load_builtins(folder: Path) -> dict[str, NamedVoice]:
    manifest = folder / "voices.json"
    if not manifest.is_file():
        return {}
    voices = {}
    for name, entry in json.loads(manifest.read_text()).items():
        path = folder / entry["file"]
        if path.is_file():
            voices[name] = NamedVoice(
                name, path, entry.get("transcript"), "builtin", entry.get("description", "")
            )
    return voices
