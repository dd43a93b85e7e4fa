"""What every model's library calls share (`create_voice(audio, sr, ref_text=None)`,
`generate`/`stream(text, voice, seed=..., <knob>=...)`), written once:

- the seed: None means a random one, drawn here (`resolve_seed`) and nowhere else; the seed
  used is returned (`result.seed`, `stream(...).seed`), and passing it back gives the same
  audio byte for byte at the same device and torch thread count;
- the reference: an array at `sr`, or a path to an audio file (`reference_audio`);
- knobs by name: a model declares them once, as a frozen dataclass (names, defaults, checks),
  reads the names it declares into it and refuses any other with a TypeError that lists its
  own (`read_knobs`, `refuse_unknown`). A field the server offers carries its valid range and
  how the page shows it (`knob`); the engine's knobs are made from these fields
  (engine/knobs.py `knobs_of`), the shared sampling names (temperature, top_k, ...) from the
  engine's one declaration of each.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import field, fields
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

Knobs = TypeVar("Knobs")
SEED_LIMIT = 2**32  # the seed knob's range is [0, 2**32 - 1] (engine/knobs.py; -1: random)
KNOB = "knob"  # a dataclass field's metadata key: its served range and labels (`knob`)


def knob(value: float | None, low: float, high: float, **shown: Any) -> Any:
    """A knob field served to every surface: its default `value`, its valid range [low, high]
    and `shown`: engine/knobs.py Knob's label, help, step, ui_range, ... and `default` where the
    served one is not the field's (the field's annotation says int or float)."""
    return field(default=value, metadata={KNOB: {"low": low, "high": high, **shown}})


def resolve_seed(seed: int | None) -> int:
    """The seed a request uses: `seed` itself, or a random one when None (or the seed knob's
    "unset" -1). The one place where "no seed" becomes a drawn number."""
    if seed is None or (not isinstance(seed, bool) and seed == -1):
        return secrets.randbelow(SEED_LIMIT)
    if isinstance(seed, bool) or int(seed) != seed or not 0 <= int(seed) < SEED_LIMIT:
        raise ValueError(
            f"seed must be a whole number in [0, {SEED_LIMIT - 1}] (or None or -1: "
            f"random); got {seed!r}"
        )
    return int(seed)


class SeededStream:
    """A model's chunk generator with the seed it runs on (`.seed`); iterates and closes as the
    generator it wraps."""

    def __init__(self, chunks: Iterator[Any], seed: int) -> None:
        self._chunks = chunks
        self.seed = seed

    def __iter__(self) -> SeededStream:
        return self

    def __next__(self) -> Any:
        return next(self._chunks)

    def close(self) -> None:
        close = getattr(self._chunks, "close", None)
        if close is not None:
            close()

    def __enter__(self) -> SeededStream:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def reference_audio(audio: Any, sr: int | None) -> tuple[np.ndarray, int]:
    """`create_voice`'s clip as (samples, rate): an array with its rate `sr`, or a path (str or
    Path) to an audio file (decoded to 24 kHz mono; `sr` is then not read)."""
    if isinstance(audio, (str, Path)):
        from ..audio.decode import SAMPLE_RATE, AudioDecodeError, decode_reference

        try:
            decoded = decode_reference(str(audio))
        except AudioDecodeError as exc:
            raise ValueError(f"reference {audio}: {exc}") from exc
        return decoded.audio, SAMPLE_RATE  # decoded to 24 kHz mono
    if sr is None:
        raise TypeError(
            "create_voice(audio, sr): pass the clip's sample rate with an array "
            "(or pass a path to an audio file)"
        )
    clip = np.asarray(audio)
    if clip.dtype == object or not (np.issubdtype(clip.dtype, np.number) and clip.ndim in (1, 2)):
        raise TypeError(
            f"create_voice(audio, sr): audio must be a float array of samples "
            f"((N,) or (N, channels)) or a path to an audio file; got "
            f"{type(audio).__name__}"
        )
    return clip, int(sr)


def refuse_unknown(model: str, given: Mapping[str, Any], known: Iterable[str]) -> None:
    """TypeError naming the keyword arguments of `given` that `model` does not read, and the
    knobs it does."""
    known = tuple(known)
    unknown = sorted(set(given) - set(known))
    if unknown:
        raise TypeError(
            f"{model} does not read {', '.join(unknown)}; its knobs by name: {', '.join(known)}"
        )


def read_knobs(
    model: str, knobs: type[Knobs], given: Mapping[str, Any], aliases: Mapping[str, str] = {}
) -> Knobs:
    """`knobs` (a model's dataclass of knobs) with the values `given` by name, the others at
    their defaults; `aliases` maps another name to a field (it wins over the field's own name).
    An unknown name is `refuse_unknown`'s TypeError; a bad value, the dataclass's own error."""
    names = [field.name for field in fields(knobs)]
    refuse_unknown(model, given, [*names, *aliases])
    named = {name: value for name, value in given.items() if name not in aliases}
    named.update((aliases[name], value) for name, value in given.items() if name in aliases)
    return knobs(**named)
