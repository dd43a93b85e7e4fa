"""An int8 model, saved once, for any model: the first `quantize="int8" | "auto"` load
calibrates and quantizes (quantize.py) and saves the outcome; later loads read it and skip the
calibration run, SmoothQuant, the SQNR measurement, the rounding and (`auto`) the speed check.
`load_int8` is that flow; the model's Int8Target declares what is saved.

Where: `$TTS_CORE_CACHE` (default ~/.cache/tts_core)/int8/, one file per checkpoint, dtype,
request and key: `<weights file sha256[:12]>-<dtype>-<int8|auto>-<key sha256[:16]>
.safetensors`. `TTS_CORE_INT8_CACHE=0` turns it off (every load calibrates, nothing is read or
written).

A file is a standard safetensors file:
* metadata `report` (the QuantizationReport: the log says what it said at the first load),
  `key` (everything the outcome depends on, compared in full on reading) and `checksum`
  (sha256 of the data, checked on reading);
* where int8 was applied, each Int8Linear under the target's root as `<module>.weight_q`
  (out, in) int8, `.weight_scale` (out,) float32 and `.bias` float32, and the float tensors
  SmoothQuant folded its scales into (`saved_floats`: norms) in their own dtype. A float
  decision of `auto` is a file with the report alone: it too skips the calibration.
* The int8 weights are saved unpacked, (out, in), and packed at load for the kernel that runs
  (native.Int8Layout), which is chosen per process: one file serves every kernel, at one
  permuted copy per layer (the whole int8 read and pack: ~1 s for the 0.6B's 0.53 GB).

A model may read the file before its checkpoint (Qwen3-TTS does): the float projections it
replaces are taken out of the storage-free module first (`SavedInt8.drop`), so they are neither
allocated nor read, and the peak resident size stays below the float model's.

A truncated, garbled or corrupt file, or one whose key or tensors do not match, is ignored with
a log line and made again. Files are written beside their final name and renamed, so a reader
only ever opens a whole one; the checksum catches a file a crash left half written (no fsync).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import math
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

import torch
from torch import nn

from ..models import native
from . import calibration, quantize, speed
from .linear import Int8Linear
from .quantize import set_module

if TYPE_CHECKING:
    from .quantize import Int8Target, QuantizationReport

log = logging.getLogger(__name__)

FORMAT_VERSION = 1  # the file's layout; a change of how the contents are computed changes
# the key through `code_digest` (below) without a new version
ENV = "TTS_CORE_INT8_CACHE"  # "0" (or off/false/no): no saved int8 models
FOLDER = "int8"
HASHES_FILE = "checkpoint_hashes.json"
KEEP_PER_CHECKPOINT = 2  # files kept per checkpoint, dtype and request, the most recently used:
# another thread count or CPU (a home folder shared by two machines) keeps its own; a file of
# another version of our code, format or torch is removed at once (it is never read again)
UPGRADED = (("format",), ("code",), ("machine", "torch"))  # key parts an upgrade changes
STALE_TEMP_S = 3600  # a temp file this old was left by a writer that died
HASH_MEMO_BYTES = 64 << 20  # files at least this large have their hash remembered (below)
MAX_HEADER_BYTES = 100 << 20
_DTYPES = {
    torch.float64: "F64",
    torch.float32: "F32",
    torch.bfloat16: "BF16",
    torch.float16: "F16",
    torch.int8: "I8",
}
_DTYPE_NAMES = {name: dtype for dtype, name in _DTYPES.items()}
_CHECKSUM_PLACEHOLDER = "0" * 64


class StoreError(ValueError):
    """A saved file that cannot be used (why, in words); it is made again."""


def enabled() -> bool:
    return os.environ.get(ENV, "1").strip().lower() not in ("0", "off", "false", "no")


def folder() -> Path | None:
    """Where the files go; None where the store is off or there is no home directory."""
    return native.cache_path(FOLDER) if enabled() else None


# ------------------------------------------------------------------------------ the key
# The checkpoint's identity is the sha256 of each of the target's `identity_files`. Anything
# cheaper can match a changed checkpoint: a fine-tune saved by the same code has the same
# config, safetensors header and file sizes, and a Hub etag or commit is a folder name, which a
# file edited in place keeps. The full hash costs ~0.55 s a GB (1.05 s for the 0.6B's 1.8 GB
# on the 2-core EPYC), paid once per file: it is remembered in HASHES_FILE under the file's
# real path with its size, mtime, ctime, inode and device. A write changes the ctime, which no
# copy tool can set back, and a replaced file has another inode: a remembered hash is never
# used for other contents. A hash is remembered only if the file's stat did not change while
# it was hashed, and only for files of HASH_MEMO_BYTES or more, whose hashing outlasts the
# kernel's timestamp tick (a later write cannot share the remembered ctime).
def checkpoint_identity(folder: Path, names: Iterable[str], memo: Path | None) -> dict[str, str]:
    """{file name: sha256} of the checkpoint's files `names` that exist."""
    return {name: file_sha256(folder / name, memo) for name in names if (folder / name).is_file()}


def file_sha256(path: Path, memo: Path | None) -> str:
    """sha256 of the file's contents; for a large file, remembered in `memo` (see above)."""
    real = path.resolve()
    before = _identity_stat(real)
    if before["size"] < HASH_MEMO_BYTES or memo is None:
        return _hash_file(real)
    remembered = speed.read_json(memo).get(str(real))
    if (
        isinstance(remembered, dict)
        and isinstance(remembered.get("sha256"), str)
        and all(remembered.get(name) == value for name, value in before.items())
    ):
        return remembered["sha256"]
    digest = _hash_file(real)
    if _identity_stat(real) == before:  # not written meanwhile (entries of deleted files go)
        entry = {str(real): {**before, "sha256": digest}}
        speed.update_json(
            memo, lambda data: {p: e for p, e in data.items() if Path(p).exists()} | entry
        )
    return digest


def _identity_stat(path: Path) -> dict[str, int]:
    st = path.stat()
    return {
        "size": st.st_size,
        "mtime_ns": st.st_mtime_ns,
        "ctime_ns": st.st_ctime_ns,
        "ino": st.st_ino,
        "dev": st.st_dev,
    }


def _hash_file(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


@functools.cache
def code_digest(paths: tuple[Path, ...]) -> str:
    """sha256 of the sources the saved contents are computed by: the model's (its target's
    `code_paths`: the calibration run is its own code) and this toolkit's (which rounds them).
    Any change there, a new release included, makes new files instead of reading ones an older
    calculation made (a format version alone relies on someone remembering to raise it)."""
    root = Path(__file__).resolve().parents[1]  # tts_core
    toolkit = sorted(Path(__file__).resolve().parent.glob("*.py"))
    digest = hashlib.sha256()
    for path in [*paths, *toolkit]:
        digest.update(str(path.relative_to(root)).encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()


def store_key(
    target: type[Int8Target],
    identity: dict[str, str],
    dtype: torch.dtype,
    min_sqnr_db: float | None,
    check_speed: bool,
) -> dict:
    """Everything quantize(target, min_sqnr_db=..., check_speed=...) depends on.

    Besides the checkpoint and the code: the dtype; the calibration's constants (the target's
    and the toolkit's, read now, so a test that changes one gets a file of its own); the CPU
    model, torch's version and the thread count, because the calibration run is float
    arithmetic whose last bits depend on them (oneDNN and MKL choose kernels by instruction set
    and split work by threads): a file made on another machine would be a good model, but not
    bit for bit the one quantizing here gives. `auto` adds what its speed check depends on (the
    int8 kernel, the timing constants).
    """
    key: dict = {
        "format": FORMAT_VERSION,
        "checkpoint": identity,
        "code": code_digest(tuple(target.code_paths())),
        "dtype": _dtype_name(dtype),
        "request": {"min_sqnr_db": min_sqnr_db, "check_speed": check_speed, "smooth": True},
        "calibration": {
            **target.calibration_key(),
            "max_rows": calibration.MAX_ROWS,
            "smooth_alpha": calibration.SMOOTH_ALPHA,
            "min_sqnr_db": quantize.MIN_SQNR_DB,
        },
        "machine": {
            "cpu": speed.cpu_model(),
            "torch": torch.__version__,
            "threads": torch.get_num_threads(),
        },
    }
    if check_speed:
        key["speed"] = {
            "kernel": speed.kernel_name(),
            "rows": list(target.speed_rows),
            "min_timed_bytes": speed.MIN_TIMED_BYTES,
            "timed_bytes": speed.TIMED_BYTES,
            "repeats": speed.SPEED_REPEATS,
        }
    return key


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


# ------------------------------------------------------------------------------ what is saved
def _linear_tensors(name: str, out: int, inp: int, bias: bool) -> dict[str, tuple]:
    """{tensor name: (dtype, shape)} of a saved Int8Linear at `name`."""
    tensors = {
        f"{name}.weight_q": (torch.int8, (out, inp)),
        f"{name}.weight_scale": (torch.float32, (out,)),
    }
    return tensors | ({f"{name}.bias": (torch.float32, (out,))} if bias else {})


@dataclass
class Layout:
    """Every tensor a file of a target may hold, {name: (dtype, shape)}; the names it must hold
    where int8 was applied; each int8 module's tensor names (a file holds all of a module's or
    none: a layer that is optional may be absent)."""

    allowed: dict[str, tuple] = field(default_factory=dict)
    required: set[str] = field(default_factory=set)
    modules: dict[str, set[str]] = field(default_factory=dict)


def layout_of(target: type[Int8Target], checkpoint: Path, dtype: torch.dtype) -> Layout:
    """What a file of this checkpoint may and must hold: every layer the target plans to
    quantize (required unless optional) and its saved_floats, read from the float model built
    on the meta device."""
    layout = Layout()
    with torch.device("meta"):
        storage_free = target.storage_free(checkpoint, dtype)
        planned = storage_free.plan({}, smooth=False).candidates
    for layer in planned:
        name = layer.path or layer.name
        tensors = _linear_tensors(name, *layer.weight.shape, bias=layer.bias is not None)
        layout.allowed |= tensors
        layout.modules[name] = set(tensors)
        if layer.optional_bound is None:
            layout.required |= set(tensors)
    floats = {name: (v.dtype, tuple(v.shape)) for name, v in storage_free.saved_floats().items()}
    layout.allowed |= floats
    layout.required |= set(floats)
    return layout


@dataclass
class SavedInt8:
    """What a file gave: the report, and (applied) the int8 modules and folded float tensors,
    named as under the target's root; `drop` and `install` put them in place of the float
    layers (`replace`: the target's)."""

    report: QuantizationReport
    modules: dict[str, Int8Linear] = field(default_factory=dict)
    norms: dict[str, torch.Tensor] = field(default_factory=dict)
    replace: Callable[[nn.Module, str, nn.Module], None] = set_module

    def drop(self, root: nn.Module) -> None:
        """On a storage-free root: the float layers the int8 ones replace become empty
        placeholders, so their weights are never allocated nor read."""
        for name in self.modules:
            self.replace(root, name, nn.Identity())

    @torch.no_grad()
    def install(self, root: nn.Module) -> None:
        """After the rest is loaded: the int8 layers and the folded float tensors, as
        quantizing left them."""
        for name, module in self.modules.items():
            self.replace(root, name, module)
        for name, value in self.norms.items():
            root.get_parameter(name).copy_(value)


def _saved_tensors(target: Int8Target) -> list[tuple[str, torch.dtype, tuple, Callable]]:
    """(name, dtype, shape, make) of every tensor a file of this quantized target holds; `make`
    gives the tensor when it is written (unpacking one layer at a time)."""
    items = []
    for name, m in target.root.named_modules():
        if isinstance(m, Int8Linear):
            out = m.out_features
            items.append((f"{name}.weight_q", torch.int8, (out, m.in_features), m.int8_weight))
            items.append((f"{name}.weight_scale", torch.float32, (out,), m.weight_scale.detach))
            if m.bias is not None:
                items.append((f"{name}.bias", torch.float32, (out,), m.bias.detach))
    for name, value in target.saved_floats().items():
        items.append((name, value.dtype, tuple(value.shape), value.detach))
    return items


# ------------------------------------------------------------------------------ the store
class Int8Store:
    """The saved outcome of one quantize request on one checkpoint: `read`, `write`."""

    def __init__(
        self, target: type[Int8Target], checkpoint: Path, dtype: torch.dtype, path: Path, key: dict
    ) -> None:
        self.target, self.checkpoint, self.dtype = target, checkpoint, dtype
        self.path, self.key = path, key
        self.key_text = json.dumps(key, sort_keys=True)

    @classmethod
    def open(
        cls,
        target: type[Int8Target],
        checkpoint: Path,
        dtype: torch.dtype,
        min_sqnr_db: float | None,
        check_speed: bool,
    ) -> Int8Store | None:
        """The store for this request, its key computed (the checkpoint hashed, or its hash
        remembered); None where saving is off (TTS_CORE_INT8_CACHE=0, no home directory) or the
        checkpoint cannot be read to hash it (loading it will say why)."""
        where = folder()
        if where is None:
            return None
        try:
            identity = checkpoint_identity(
                Path(checkpoint), target.identity_files(checkpoint), where / HASHES_FILE
            )
        except OSError as error:
            log.info("int8 not saved: could not hash the checkpoint (%s)", error)
            return None
        key = store_key(target, identity, dtype, min_sqnr_db, check_speed)
        digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()
        weights = identity.get(target.weights_file(checkpoint), "none")[:12]
        mode = "int8" if min_sqnr_db is None else "auto"
        name = f"{weights}-{_dtype_name(dtype)}-{mode}-{digest[:16]}.safetensors"
        return cls(target, Path(checkpoint), dtype, where / name, key)

    @property
    def _family(self) -> str:
        """The name up to the key: files of the same checkpoint, dtype and request."""
        return self.path.name.rsplit("-", 1)[0] + "-"

    # ---------------------------------------------------------------- read
    def read(self) -> SavedInt8 | None:
        """The saved outcome, checked in full (key, tensor names, dtypes and shapes, checksum);
        None where there is none, or it cannot be used (logged: it is made again)."""
        try:
            with open(self.path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                metadata, entries, data_start = _read_header(f, size)
                if metadata.get("format") != f"tts_core int8 v{FORMAT_VERSION}":
                    raise StoreError(f"not a version {FORMAT_VERSION} file")
                if metadata.get("key") != self.key_text:
                    raise StoreError("it was saved for another checkpoint, dtype or request")
                report = self.target.report_type.from_json(
                    json.loads(metadata["report"]), saved_in=str(self.path)
                )
                layout = layout_of(self.target, self.checkpoint, self.dtype)
                _check_names(entries, report.applied, layout)
                saved = SavedInt8(report, replace=self.target.replace)
                _read_tensors(f, data_start, entries, metadata.get("checksum", ""), saved)
        except FileNotFoundError:
            return None
        except (StoreError, OSError, ValueError, KeyError, TypeError, AttributeError) as error:
            log.warning("ignoring the saved int8 model %s (%s); quantizing again", self.path, error)
            return None
        with contextlib.suppress(OSError):
            os.utime(self.path)  # most recently used: kept when the folder is pruned
        log.info("quantize: %s (saved in %s at an earlier load)", report.decision, self.path)
        return saved

    # ---------------------------------------------------------------- write
    def write(self, target: Int8Target, report: QuantizationReport) -> None:
        """Save the outcome of quantize on `target` (whole file or nothing; a folder that
        cannot be written is only logged: the next load quantizes again)."""
        items = _saved_tensors(target) if report.applied else []
        metadata = {
            "format": f"tts_core int8 v{FORMAT_VERSION}",
            "key": self.key_text,
            "report": json.dumps(report.to_json()),
        }
        started = time.perf_counter()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            speed.write_atomically(self.path, lambda f: _write_safetensors(f, items, metadata))
        except OSError as error:
            log.info("could not save the int8 model in %s (%s)", self.path, error)
            return
        log.info(
            "saved the int8 model in %s (%.1f s); later loads read it",
            self.path,
            time.perf_counter() - started,
        )
        self._prune()

    def _prune(self) -> None:
        """Keep the KEEP_PER_CHECKPOINT most recently used files of this family, none made by
        another version (UPGRADED); remove temp files of writers that died."""
        try:
            others = sorted(
                (
                    p
                    for p in self.path.parent.glob(self._family + "*.safetensors")
                    if p != self.path
                ),
                key=lambda p: p.stat().st_mtime_ns,
                reverse=True,
            )
            stale = [
                p for i, p in enumerate(others) if i + 1 >= KEEP_PER_CHECKPOINT or self._outdated(p)
            ]
            now = time.time()
            stale += [
                p for p in self.path.parent.glob("*.tmp") if now - p.stat().st_mtime > STALE_TEMP_S
            ]
            for path in stale:
                path.unlink(missing_ok=True)
                log.info("removed %s", path)
        except OSError as error:  # another process pruned it first
            log.debug("pruning %s: %s", self.path.parent, error)

    def _outdated(self, path: Path) -> bool:
        """A file of another version of our code, format or torch (or no readable key)."""
        try:
            with open(path, "rb") as f:
                metadata = _read_header(f, os.fstat(f.fileno()).st_size)[0]
            key = json.loads(metadata["key"])
            return any(
                functools.reduce(dict.get, part, key) != functools.reduce(dict.get, part, self.key)
                for part in UPGRADED
            )
        except OSError:  # gone already (another process pruned it), or unreadable: left be
            return False
        except (StoreError, ValueError, KeyError, TypeError, AttributeError):
            return True


# ------------------------------------------------------------------------------ the file
def _read_header(f: BinaryIO, size: int) -> tuple[dict, list, int]:
    """(metadata, [(name, dtype, shape, start, end)] in file order, data start) of a
    safetensors file, checked: the tensors tile the data exactly up to the end of the file."""
    head = f.read(8)
    if len(head) < 8:
        raise StoreError("truncated (no header)")
    length = int.from_bytes(head, "little")
    if length > MAX_HEADER_BYTES or 8 + length > size:
        raise StoreError("truncated or garbled header")
    try:
        header = json.loads(f.read(length))
    except (UnicodeDecodeError, ValueError) as error:
        raise StoreError(f"garbled header ({error})") from error
    if not isinstance(header, dict):
        raise StoreError("garbled header")
    metadata = header.pop("__metadata__", {})
    entries = []
    for name, info in header.items():
        dtype = _DTYPE_NAMES.get(info.get("dtype"))
        shape, (start, end) = tuple(int(n) for n in info["shape"]), info["data_offsets"]
        if dtype is None or end - start != math.prod(shape) * dtype.itemsize:
            raise StoreError(f"garbled entry {name}")
        entries.append((name, dtype, shape, int(start), int(end)))
    entries.sort(key=lambda e: e[3])
    position = 0
    for name, _, _, start, end in entries:
        if start != position:
            raise StoreError(f"garbled offsets at {name}")
        position = end
    if 8 + length + position != size:
        raise StoreError(f"truncated: {size} bytes, the header describes {8 + length + position}")
    return metadata, entries, 8 + length


def _check_names(entries: list, applied: bool, layout: Layout) -> None:
    allowed, required, modules = layout.allowed, layout.required, layout.modules
    names = {e[0]: (e[1], e[2]) for e in entries}
    if not applied:
        if names:
            raise StoreError("tensors in a file of a float decision")
        return
    for name, spec in names.items():
        if allowed.get(name) != spec:
            raise StoreError(
                f"unexpected tensor {name} {spec}"
                if name not in allowed
                else f"{name} is {spec}, the model needs {allowed[name]}"
            )
    missing = sorted(required - set(names))
    if missing:
        raise StoreError(f"missing {', '.join(missing[:3])}")
    for module, parts in modules.items():
        if parts & set(names) and not parts <= set(names):
            raise StoreError(f"{module} is incomplete")


def _read_tensors(f: BinaryIO, start: int, entries: list, checksum: str, saved: SavedInt8) -> None:
    """Read the data in file order straight into new tensors (no map, no second copy), hash it,
    and build the int8 modules into `saved` (each packed as its weights arrive; the float
    tensors come first in the file). The checksum is compared at the end: a corrupt file gives
    nothing."""
    digest = hashlib.sha256()
    floats: dict[str, torch.Tensor] = {}
    # Where the layers are packed for a kernel (Int8Linear keeps only the packed copy), each
    # weight is read into one reused buffer: no short-lived allocation per layer, whose freed
    # blocks the allocator would keep (measured: up to 0.3 GB more resident on the 0.6B).
    packs = native.int8_linear() is not None
    largest = max((e[4] - e[3] for e in entries if e[1] == torch.int8 and packs), default=0)
    scratch = torch.empty(largest, dtype=torch.int8)
    f.seek(start)
    for name, dtype, shape, begin, end in entries:
        if dtype == torch.int8 and packs:
            tensor = scratch[: end - begin].view(shape)
        else:
            tensor = torch.empty(shape, dtype=dtype)
        view = tensor.view(-1).view(torch.uint8).numpy()
        if f.readinto(view) != end - begin:
            raise StoreError("truncated data")
        digest.update(view)
        if dtype != torch.int8:
            floats[name] = tensor
            continue
        module = name.removesuffix(".weight_q")
        layer = Int8Linear.from_int8(
            tensor, floats.pop(f"{module}.weight_scale"), floats.pop(f"{module}.bias", None)
        )
        if "weight_q" in layer._buffers and layer.weight_q.data_ptr() == scratch.data_ptr():
            layer.weight_q = layer.weight_q.clone()  # not packed after all: its own copy
        saved.modules[module] = layer
        del tensor, view
    if digest.hexdigest() != checksum:
        raise StoreError("checksum mismatch: the data is corrupt")
    saved.norms = floats


def _write_safetensors(f: BinaryIO, items: list, metadata: dict[str, str]) -> None:
    """A safetensors file written tensor by tensor (each made, written, hashed and dropped),
    wider dtypes first (every tensor then starts at a multiple of its item size); the data's
    sha256 goes into the header's `checksum` at the end."""
    items = sorted(items, key=lambda item: (-item[1].itemsize, item[0]))
    header: dict = {"__metadata__": {**metadata, "checksum": _CHECKSUM_PLACEHOLDER}}
    offset = 0
    for name, dtype, shape, _ in items:
        size = math.prod(shape) * dtype.itemsize
        header[name] = {
            "dtype": _DTYPES[dtype],
            "shape": list(shape),
            "data_offsets": [offset, offset + size],
        }
        offset += size
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned, as safetensors pads it
    f.write(len(text).to_bytes(8, "little") + text)
    digest = hashlib.sha256()
    for _, dtype, shape, make in items:
        tensor = make().detach().to("cpu", dtype).contiguous()
        assert tuple(tensor.shape) == tuple(shape), (tensor.shape, shape)
        data = tensor.view(-1).view(torch.uint8).numpy()
        digest.update(data)
        f.write(data)
    marker = f'"checksum":"{_CHECKSUM_PLACEHOLDER}"'.encode()
    f.seek(8 + text.index(marker) + len(b'"checksum":"'))
    f.write(digest.hexdigest().encode())


def saved_files(where: Path | None = None) -> Iterable[Path]:
    """The saved int8 models (tests, tools)."""
    where = folder() if where is None else where
    return [] if where is None else sorted(where.glob("*.safetensors"))


# ------------------------------------------------------------------------------ the flow at load
def load_int8(
    target: type[Int8Target],
    checkpoint: Path,
    dtype: torch.dtype,
    min_sqnr_db: float | None,
    check_speed: bool,
    load: Callable[[SavedInt8 | None], Int8Target],
) -> tuple[Int8Target, QuantizationReport]:
    """A model's int8 load, for any model: the saved outcome of this request if there is one
    (read before `load`, which installs it: nothing calibrated, timed or rounded), else `load`
    the float model, quantize it (quantize.quantize) and save the outcome."""
    store = Int8Store.open(target, checkpoint, dtype, min_sqnr_db, check_speed)
    saved = None if store is None else store.read()
    loaded = load(saved)
    if saved is not None:
        return loaded, saved.report
    report = quantize.quantize(loaded, min_sqnr_db=min_sqnr_db, check_speed=check_speed)
    if store is not None:
        store.write(loaded, report)
    return loaded, report
