"""Typed reads of a checkpoint's JSON config files, the one parsing style of every config module.

`read_json_object(path, error)` loads a file (once per file inside `one_read()`, the scope of a
model load: config.json is read once and dispatched once per load); `Fields(section, where, error)` wraps one JSON object
and reads its keys with type checks. A getter given a default takes it for a missing key; without
one the key is required. Every error is the calling module's own `error` class (a ValueError) and
names `where` and the key.
"""

from __future__ import annotations

import contextlib
import contextvars
import copy
import json
from collections.abc import Iterator
from dataclasses import MISSING, fields
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")
_REQUIRED: Any = object()


def read_json_object(path: Path, error: type[ValueError]) -> dict[str, Any]:
    """The JSON object in `path` (FileNotFoundError when there is no such file). Inside
    `one_read()` (a model load) each file is read and parsed once: the registry's dispatch, the
    model's config and its sub-configs share that read; every caller gets its own copy."""
    path = Path(path)
    cache = _LOAD_CACHE.get()
    if cache is None:
        return _read(path, error)
    key = str(path.resolve())
    if key not in cache:
        cache[key] = _read(path, error)
    return copy.deepcopy(cache[key])


@contextlib.contextmanager
def one_read() -> Iterator[None]:
    """A scope (one model load) in which every JSON file is read once (nested: the outer one)."""
    if _LOAD_CACHE.get() is not None:
        yield
        return
    token = _LOAD_CACHE.set({})
    try:
        yield
    finally:
        _LOAD_CACHE.reset(token)


_LOAD_CACHE: contextvars.ContextVar[dict[str, dict[str, Any]] | None] = contextvars.ContextVar(
    "json_read_once", default=None
)


def _read(path: Path, error: type[ValueError]) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise FileNotFoundError(f"config file not found: {path}") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise error(f"cannot parse {path}: {exc}") from exc
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise error(f"cannot parse {path}: not valid JSON ({exc})") from exc
    if not isinstance(data, dict):
        raise error(f"{path}: expected a JSON object, got {type(data).__name__}")
    return data


class Fields:
    """One JSON object of a config file, read key by key with type checks."""

    def __init__(self, section: Any, where: str, error: type[ValueError] = ValueError) -> None:
        if not isinstance(section, dict):
            raise error(f"{where}: expected an object, got {type(section).__name__}")
        self.raw: dict[str, Any] = section
        self.where = where
        self.error = error

    def __contains__(self, key: str) -> bool:
        return key in self.raw

    def _fail(self, key: str, expected: str, value: Any) -> ValueError:
        return self.error(f"{self.where}: '{key}' must be {expected}, got {value!r}")

    def get(self, key: str, default: Any = _REQUIRED) -> Any:
        """The raw value (any JSON type); `default` when missing, required without one."""
        if key in self.raw:
            return self.raw[key]
        if default is _REQUIRED:
            raise self.error(f"{self.where}: missing required field '{key}'")
        return default

    def section(self, key: str) -> Fields:
        """The nested object under `key` (required), named `where.key` in errors."""
        return Fields(self.get(key), f"{self.where}.{key}", self.error)

    def integer(self, key: str, default: Any = _REQUIRED, minimum: int = 1) -> int:
        """An int >= minimum (positive by default); 2.0 reads as 2, true/false never."""
        return self._integer(key, self.get(key, default), minimum)

    def optional_integer(self, key: str) -> int | None:
        """None when missing or null, else as `integer`."""
        return None if self.raw.get(key) is None else self.integer(key)

    def _integer(self, key: str, value: Any, minimum: int) -> int:
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            expected = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
            raise self._fail(key, expected, value)
        return value

    def number(self, key: str, default: Any = _REQUIRED) -> float:
        value = self.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self._fail(key, "a number", value)
        return float(value)

    def flag(self, key: str, default: Any = _REQUIRED) -> bool:
        value = self.get(key, default)
        if not isinstance(value, bool):
            raise self._fail(key, "true or false", value)
        return value

    def text(self, key: str, default: Any = _REQUIRED) -> str:
        value = self.get(key, default)
        if not isinstance(value, str):
            raise self._fail(key, "a string", value)
        return value

    def integers(self, key: str, default: Any = _REQUIRED) -> tuple[int, ...]:
        """A non-empty list of positive ints, as a tuple."""
        value = self.get(key, default)
        if not isinstance(value, list | tuple) or not value:
            raise self._fail(key, "a non-empty list of integers", value)
        return tuple(self._integer(key, item, 1) for item in value)

    def numbers(self, key: str, default: Any = _REQUIRED) -> tuple[float, ...]:
        """A non-empty list of numbers, as a tuple of floats."""
        value = self.get(key, default)
        if not isinstance(value, list | tuple) or not value:
            raise self._fail(key, "a non-empty list of numbers", value)
        return tuple(Fields({key: item}, self.where, self.error).number(key) for item in value)

    def dataclass(self, cls: type[T], renames: dict[str, str] | None = None) -> T:
        """An instance of dataclass `cls` with every field read by its annotated type (int >= 0,
        float, bool, str, tuple[int, ...] of positive ints) from the key of its name (or
        `renames[name]`); a field's default fills a missing key, one without is required."""
        readers = {
            "int": lambda key, default: self.integer(key, default, minimum=0),
            "float": self.number,
            "bool": self.flag,
            "str": self.text,
            "tuple[int, ...]": self.integers,
        }
        renames = renames or {}
        values = {}
        for f in fields(cls):  # type: ignore[arg-type]
            key = renames.get(f.name, f.name)
            default = _REQUIRED if f.default is MISSING else f.default
            kind = f.type.__name__ if isinstance(f.type, type) else str(f.type)
            values[f.name] = readers[kind](key, default)
        return cls(**values)
