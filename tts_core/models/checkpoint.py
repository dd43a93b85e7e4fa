"""Checkpoint files of every model: Hub repo id or local folder -> folder; safetensors streamed
into the modules tensor by tensor, with clear errors.

Loading never holds a state dict next to the model: a module is built without storage (meta
device), its tensors are allocated once, in the target dtype on the target device, and each
checkpoint tensor is cast-copied into its slot straight from safetensors' memory map
(`SafetensorsFile`), so the peak resident size while loading stays within about one mapping
window of the loaded model's.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Protocol

import torch
from safetensors import SafetensorError, safe_open
from torch import nn

from .state_check import mismatches, shapes_of

_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


class CheckpointError(ValueError):
    """A checkpoint file is unreadable or does not match the model."""


Required = Sequence[str | tuple[str, ...]]  # a name, or alternatives (any one will do)


def resolve_checkpoint(
    name_or_path: str | Path, required: Required, patterns: Sequence[str] | None = None
) -> Path:
    """Local folder as-is; otherwise a Hub repo id, downloaded (needed files only, with progress).

    `required`: files the folder must hold (an entry that is a tuple: any one of those names);
    `patterns`: what to download for a repo id (default: the names in `required`). Either way
    the folder is checked for `required`.
    """
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        return check_files(path, required)
    text = str(name_or_path)
    if path.exists() or not _REPO_ID.match(text) or text.startswith((".", "/", "~")):
        raise FileNotFoundError(f"checkpoint folder not found: {name_or_path}")
    if patterns is None:
        patterns = _names(required)
    from huggingface_hub import snapshot_download  # network only when a repo id is given

    from .download import download_finished, progress_bar

    try:
        folder = snapshot_download(
            repo_id=text, allow_patterns=list(patterns), tqdm_class=progress_bar()
        )
    except Exception as error:  # the hub raises many types; keep the cause attached
        raise FileNotFoundError(
            f"{text!r} is not a local folder and could not be downloaded from the Hub"
            f"{_hub_reason(error)}: {error}"
        ) from error
    download_finished()
    return check_files(Path(folder), required)


def _names(required: Required) -> list[str]:
    return [name for entry in required for name in ((entry,) if isinstance(entry, str) else entry)]


def _hub_reason(error: Exception) -> str:
    """A plain-words cause for the two common failures (the hub's own text follows it)."""
    from huggingface_hub.errors import LocalEntryNotFoundError, RepositoryNotFoundError

    if isinstance(error, LocalEntryNotFoundError):  # raised when the Hub cannot be reached
        return " (no network connection to the Hub, and no copy in the local cache)"
    if isinstance(error, RepositoryNotFoundError):  # gated repos are a subclass
        return " (no such repository, or it is private or gated: log in or set HF_TOKEN)"
    return ""


def check_files(folder: Path, required: Required) -> Path:
    missing = [
        " or ".join(names)
        for names in (((entry,) if isinstance(entry, str) else tuple(entry)) for entry in required)
        if not any((folder / name).is_file() for name in names)
    ]
    if missing:
        raise FileNotFoundError(f"checkpoint {folder} is missing: {', '.join(missing)}")
    return folder


_READ_ERRORS = (SafetensorError, OSError, ValueError, RuntimeError)

# Bytes of a checkpoint file read through one memory map before it is closed (see below).
STREAM_WINDOW_BYTES = 16 * 2**20


class TensorSource(Protocol):
    """Named tensors, copied one at a time into preallocated targets."""

    shapes: dict[str, tuple[int, ...]]

    def copy_into(self, key: str, target: torch.Tensor) -> None: ...


class SafetensorsFile:
    """A safetensors file read one tensor at a time; the whole file is never resident.

    Opening reads and checks the header only (names, dtypes, shapes, data covering the file:
    a truncated or garbled file fails here). `copy_into` casts one tensor into a preallocated
    target from the memory map that `safe_open(..., framework="pt")` keeps of the whole file
    (its tensors are views of that map, no copy). Pages of the map count towards the process's
    resident size once read, and stay counted while the map is open; so the map is closed and
    opened again whenever `window` more bytes would have been read through it, and a tensor
    larger than `window` is copied in slices of at most `window` bytes. On top of the model, at
    most about `window` bytes of the file are resident at any time.
    """

    def __init__(
        self,
        path: str | Path,
        corrupt: Callable[[Exception], Exception],
        window: int = STREAM_WINDOW_BYTES,
    ) -> None:
        self.path = Path(path)
        self._corrupt = corrupt  # builds the error raised when the file cannot be read
        self._window = max(1, int(window))
        self._handle = None
        self._mapped = 0  # bytes read through the current map
        handle = self._open()
        self.shapes = {key: tuple(handle.get_slice(key).get_shape()) for key in handle.keys()}

    def _open(self):
        if self._handle is None:
            try:
                self._handle = safe_open(str(self.path), framework="pt", device="cpu")
            except _READ_ERRORS as error:
                raise self._corrupt(error) from error
            self._mapped = 0
        return self._handle

    def _view(self, key: str, nbytes: int) -> torch.Tensor:
        """Tensor `key` as a view of the map, reopened first if `nbytes` more would overflow it."""
        if self._mapped and self._mapped + nbytes > self._window:
            self.close()
        handle = self._open()
        self._mapped += nbytes
        try:
            return handle.get_tensor(key)
        except _READ_ERRORS as error:  # e.g. a dtype this torch cannot represent
            raise self._corrupt(error) from error

    def copy_into(self, key: str, target: torch.Tensor) -> None:
        """`target.copy_(<tensor key>)` (cast as copy_ casts), in slices of at most `window`
        bytes of the file."""
        source = self._view(key, 0)  # header only: no data page is read
        itemsize, total = source.element_size(), source.numel()
        del source
        if not target.is_contiguous():
            target.copy_(self._view(key, itemsize * total))
            return
        flat = target.view(-1)
        step = max(1, self._window // itemsize)
        for start in range(0, max(total, 1), step):
            stop = min(start + step, total)
            piece = self._view(key, itemsize * (stop - start))
            flat[start:stop].copy_(piece.view(-1)[start:stop])
            del piece  # the map may only be closed once no view of it is alive

    def close(self) -> None:
        handle, self._handle = self._handle, None
        if handle is not None:
            handle.__exit__(None, None, None)

    def __enter__(self) -> SafetensorsFile:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


class _TensorDict:
    """A dict of tensors as a TensorSource (callers that already hold a state dict)."""

    def __init__(self, tensors: Mapping[str, torch.Tensor]) -> None:
        self._tensors = tensors
        self.shapes = {key: tuple(value.shape) for key, value in tensors.items()}

    def copy_into(self, key: str, target: torch.Tensor) -> None:
        target.copy_(self._tensors[key])


class _Renamed:
    """Some entries of a TensorSource under new names (`names`: new name -> source name)."""

    def __init__(self, source: TensorSource, names: Mapping[str, str]) -> None:
        self._source, self._names = source, dict(names)
        self.shapes = {name: source.shapes[key] for name, key in self._names.items()}

    def copy_into(self, key: str, target: torch.Tensor) -> None:
        self._source.copy_into(self._names[key], target)


def as_source(state: Mapping[str, torch.Tensor] | TensorSource) -> TensorSource:
    return _TensorDict(state) if isinstance(state, Mapping) else state


def under(state: Mapping[str, torch.Tensor] | TensorSource, prefix: str) -> TensorSource:
    """Entries under `prefix`, with the prefix removed from their names."""
    source = as_source(state)
    names = {key[len(prefix) :]: key for key in source.shapes if key.startswith(prefix)}
    return _Renamed(source, names)


def load_safetensors(path: Path) -> SafetensorsFile:
    """`model.safetensors` opened for streaming (header read and checked, no tensor data yet);
    use as a context manager and pass it to load_talker / load_speaker_encoder."""
    if not path.is_file():
        raise FileNotFoundError(f"missing checkpoint file: {path}")
    return SafetensorsFile(
        path,
        corrupt=lambda error: CheckpointError(
            f"{path}: corrupt or unreadable safetensors file ({error})"
        ),
    )


def load_strict(
    module: nn.Module, state: Mapping[str, torch.Tensor] | TensorSource, where: str
) -> None:
    """Copy `state` (a dict or a streamed TensorSource) into `module` tensor by tensor, casting
    to its dtype; every key and shape must match (checked before anything is copied)."""
    source = as_source(state)
    check_strict(module, source, where)
    _fill(module, source)


def check_strict(module: nn.Module, source: TensorSource, where: str) -> None:
    """load_strict's checks alone: `source` has exactly the module's keys, with its shapes."""
    problems = mismatches(shapes_of(module.state_dict()), source.shapes)
    if problems:
        raise CheckpointError(f"{where}: state dict mismatch; " + "; ".join(problems))


def _preview(keys: list[str], limit: int = 5) -> str:
    if not keys:
        return "none"
    more = f" (+{len(keys) - limit} more)" if len(keys) > limit else ""
    return ", ".join(keys[:limit]) + more


# ---------------------------------------------------------------- model parts
def _materialize(module: nn.Module, device: str | torch.device, dtype: torch.dtype) -> nn.Module:
    """Allocate a meta-built module's tensors (uninitialized) directly in `dtype` on `device`."""
    return module._apply(
        lambda t: torch.empty(
            t.shape, device=device, dtype=dtype if t.is_floating_point() else t.dtype
        )
    )


@contextmanager
def _storage_free_build() -> Iterator[None]:
    """Modules constructed inside (in this thread) register their parameters and buffers on
    the meta device: no memory and no init cost. Unlike `torch.device("meta")`, tensors a
    constructor keeps as plain attributes (the codec's fp32 rotary frequencies) stay real."""
    from torch.nn.modules.module import (
        register_module_buffer_registration_hook,
        register_module_parameter_registration_hook,
    )

    thread = threading.get_ident()

    def to_meta(module: nn.Module, name: str, tensor: torch.Tensor | None):
        if tensor is None or threading.get_ident() != thread:
            return None
        meta = torch.empty_like(tensor, device="meta")
        if isinstance(tensor, nn.Parameter):
            return nn.Parameter(meta, requires_grad=tensor.requires_grad)
        return meta

    handles = [
        register_module_parameter_registration_hook(to_meta),
        register_module_buffer_registration_hook(to_meta),
    ]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def _fill(module: nn.Module, source: TensorSource) -> None:
    """Copy `source` (keys and shapes already checked) into a materialized module's state,
    tensor by tensor; non-persistent buffers are left as they are."""
    with torch.no_grad():
        for key, target in module.state_dict().items():
            source.copy_into(key, target)
