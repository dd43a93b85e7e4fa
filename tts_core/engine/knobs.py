"""A request's knobs, each declared once: name, type, valid range, default, and how the page
shows it. A model declares its own as fields of its dataclass of knobs (models/contract.py
`knob`), which its backend's `knobs` are made from (`knobs_of`). Declared here: the shared ones
(the seed and the chunk sizes, up to the engine's `Limits`; which of them a backend reads:
`served_knobs`) and the sampling knobs (`SAMPLING_KNOBS`: one meaning per name, whichever model
has a field of that name). The engine's checks (`Knob.parse`), the /v1 body, the page's PCM
route, sliders and Gradio API parameters are made from these.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import Field, dataclass, fields
from typing import Any

from ..models.contract import KNOB
from .errors import InputError

Number = int | float

# Names a knob may not take: the request's other fields and the names gradio_client keeps
PAGE_FIELDS = ("text", "language", "reference", "reference_text", "voice", "voices")
V1_FIELDS = ("model", "input", "response_format", "speed", "stream_format", "instructions")
RESERVED = frozenset((*PAGE_FIELDS, *V1_FIELDS, "api_name", "fn_index", "result_callbacks"))
CONTROLS = ("slider", "number")


@dataclass(frozen=True)
class Knob:
    """One request setting. `default` None means "the backend's own" (e.g. the checkpoint's
    generation_config.json: the backend's `sampling_defaults()` says it once loaded)."""

    name: str
    kind: type  # int or float
    low: Number
    high: Number
    default: Number | None = None
    label: str = ""
    help: str = ""
    step: Number | None = None  # the slider's step; None: 1 for int, 1/100 of the range for float
    low_open: bool = False  # (low, ...: low itself is refused
    high_open: bool = False
    ui_range: tuple[Number, Number] | None = None  # the slider's, where narrower than the valid
    ui_value: Number | None = None  # what the page shows before the backend tells its default
    unset: Number | None = None  # a value meaning "not set" (the seed's -1: a random seed)
    control: str = "slider"  # or "number": a free box (the seed)

    def __post_init__(self) -> None:
        if not self.name.isidentifier() or self.name in RESERVED or self.name.startswith("_"):
            raise ValueError(f"knob name {self.name!r}: not an identifier, or a reserved name")
        if self.kind not in (int, float):
            raise ValueError(f"knob {self.name!r}: kind must be int or float")
        if not self.low <= self.high or self.control not in CONTROLS:
            raise ValueError(f"knob {self.name!r}: low > high, or control not in {CONTROLS}")

    # ------------------------------------------------------------------ validation
    def parse(self, value: object) -> Number | None:
        """`value` (a number, or its text) as this knob's type; None when not set (None, "" or
        `unset`). InputError naming the knob when it is not a number of its kind or out of
        range."""
        if value is None or (isinstance(value, str) and not value.strip()):
            return None
        number = self._number(value)
        if number is None:
            what = "a whole number" if self.kind is int else "a number"
            raise InputError(f"{self.name} must be {what}.", self.name)
        if not (self._in_range(number) and (self.kind is float or number == int(number))):
            what = "a whole number in" if self.kind is int else "in"
            raise InputError(
                f"{self.name} must be {what} {self.range_text()}; got {_shown(value)}.", self.name
            )
        parsed = int(number) if self.kind is int else float(number)
        return None if self.unset is not None and parsed == self.unset else parsed

    def range_text(self) -> str:
        """'[0.01, 5]', '(0, 1]' (the valid range, as the error messages write it)."""
        low, high = (f"{v}" if self.kind is int else f"{v:g}" for v in (self.low, self.high))
        return f"{'(' if self.low_open else '['}{low}, {high}{')' if self.high_open else ']'}"

    def _number(self, value: object) -> Number | None:
        if isinstance(value, bool):  # JSON true is not 1
            return None
        if isinstance(value, int):
            return value  # exact, however large: the range check refuses what is too large
        try:
            number = float(value)  # a float, or its text: sliders and JSON clients may send 50.0
        except (TypeError, ValueError, OverflowError):
            return None
        return number

    def _in_range(self, number: Number) -> bool:
        if isinstance(number, float) and not math.isfinite(number):
            return False
        above = number > self.low if self.low_open else number >= self.low
        below = number < self.high if self.high_open else number <= self.high
        return above and below

    # ------------------------------------------------------------------ the page
    def slider_range(self) -> tuple[Number, Number]:
        """The page's slider bounds: `ui_range` within the valid range."""
        low, high = self.ui_range or (self.low, self.high)
        return max(low, self.low), min(high, self.high)

    def slider_step(self) -> Number:
        if self.step is not None:
            return self.step
        low, high = self.slider_range()
        return 1 if self.kind is int else (high - low) / 100 or 1

    def initial(self, backend_default: Number | None = None) -> Number:
        """The value a control starts at: the backend's default once known, else the declared
        one, else `ui_value`, else the slider's low end."""
        for value in (backend_default, self.default, self.ui_value):
            if value is not None:
                return value
        return self.slider_range()[0]

    def json_schema(self, backend_default: Number | None = None) -> dict[str, Any]:
        """This knob as a JSON Schema property (GET /v1/models lists them)."""
        schema: dict[str, Any] = {"type": "integer" if self.kind is int else "number"}
        schema["exclusiveMinimum" if self.low_open else "minimum"] = self.low
        schema["exclusiveMaximum" if self.high_open else "maximum"] = self.high
        default = backend_default if backend_default is not None else self.default
        if default is not None:
            schema["default"] = default
        return {**schema, "title": self.label or self.name, "description": self.help}


def shared_knobs(max_chunk_frames: int = 100) -> tuple[Knob, ...]:
    """The knobs every backend reads; the chunk sizes' maximum is `Limits.max_chunk_frames`."""
    return (
        Knob(
            "seed",
            int,
            -1,
            2**32 - 1,
            unset=-1,
            ui_value=-1,
            control="number",
            label="Seed (-1: random)",
            help="The same seed, text and voice give the same audio; -1 picks one at random.",
        ),
        Knob(
            "first_chunk_frames",
            int,
            1,
            max_chunk_frames,
            default=2,
            ui_range=(1, 25),
            label="First chunk (frames)",
            help="Frames in the first chunk: fewer start the audio sooner.",
        ),
        Knob(
            "chunk_frames",
            int,
            1,
            max_chunk_frames,
            default=6,
            ui_range=(1, 50),
            label="Later chunks (frames)",
            help="Frames in every later chunk: more cost less overhead per frame.",
        ),
    )


SHARED_KNOBS = shared_knobs()  # with the default Limits (the engine uses its own limits)
SHARED_NAMES = tuple(knob.name for knob in SHARED_KNOBS)

# Practical floors: below them the sampler's arithmetic leaves float32 (logits / 1e-45 is inf,
# and softmax of inf is NaN) while no audible difference from greedy remains to be had.
MIN_TEMPERATURE = 0.01
MIN_REPETITION_PENALTY = 0.1
# The sampling knobs of the token-drawing models. No default here: each backend says its own
# (`sampling_defaults()`: generation_config.json, the official generate()'s); `ui_value` is
# plain sampling (every filter off), shown only where a backend tells none.
SAMPLING_KNOBS = {
    knob.name: knob
    for knob in (
        Knob(
            "temperature",
            float,
            MIN_TEMPERATURE,
            5.0,
            label="Temperature",
            step=0.05,
            ui_range=(0.1, 2.0),
            ui_value=1.0,
            help="Higher: more varied speech; lower: steadier, closer to the likeliest.",
        ),
        Knob(
            "top_k",
            int,
            0,
            100_000,
            label="Top-k (0: off)",
            step=1,
            ui_range=(0, 2000),
            ui_value=0,
            help="Sample each token among the k likeliest (k above the vocabulary: off).",
        ),
        Knob(
            "top_p",
            float,
            0.0,
            1.0,
            low_open=True,
            label="Top-p",
            step=0.05,
            ui_range=(0.05, 1.0),
            ui_value=1.0,
            help="Sample among the likeliest tokens that together hold this probability.",
        ),
        Knob(
            "min_p",
            float,
            0.0,
            1.0,
            label="Min-p",
            step=0.01,
            ui_value=0.0,
            help="Drop tokens less likely than this fraction of the likeliest one.",
        ),
        Knob(
            "repetition_penalty",
            float,
            MIN_REPETITION_PENALTY,
            5.0,
            label="Repetition penalty",
            step=0.01,
            ui_range=(1.0, 2.0),
            ui_value=1.0,
            help="Above 1: tokens already produced are less likely again (fewer loops).",
        ),
    )
}


def knobs_of(declaration: type) -> tuple[Knob, ...]:
    """The served knobs of a model's dataclass of knobs, in its field order: a field declared
    with `contract.knob` (its type the field's, its default the field's unless it declares a
    served one), and a field named as a sampling knob (SAMPLING_KNOBS' declaration; the field's
    default is the backend's `knob_defaults`)."""
    found = []
    for item in fields(declaration):
        if KNOB in item.metadata:
            declared = {"default": item.default, **item.metadata[KNOB]}
            found.append(Knob(item.name, _kind(item), **declared))
        elif item.name in SAMPLING_KNOBS:
            found.append(SAMPLING_KNOBS[item.name])
    return tuple(found)


def _kind(item: Field) -> type:
    """int or float, as the field is annotated ("int", "float | None", or the type itself)."""
    annotation = getattr(item.type, "__name__", str(item.type))
    return int if annotation.split("|")[0].strip() == "int" else float


def backend_knobs(backend: object) -> tuple[Knob, ...]:
    """The knobs `backend` declares (none for a backend without a `knobs` attribute)."""
    return tuple(getattr(backend, "knobs", ()) or ())


def served_knobs(backend: Any, max_chunk_frames: int = 100) -> tuple[Knob, ...]:
    """The knobs `backend` reads, which its surfaces offer: the shared ones its capabilities
    name (`shared_knobs`), then its own."""
    read = backend.capabilities.shared_knobs
    shared = tuple(knob for knob in shared_knobs(max_chunk_frames) if knob.name in read)
    return (*shared, *backend_knobs(backend))


def refuse_unread_shared(values: Mapping[str, Any], backend: Any) -> None:
    """InputError naming a shared knob set in `values` that `backend` does not read, as a model
    refuses what it cannot use (not dropped silently: the caller would think it applied)."""
    for name in SHARED_NAMES:
        value = values.get(name)
        unset = value is None or (isinstance(value, str) and not value.strip())
        if not unset and name not in backend.capabilities.shared_knobs:
            own = ", ".join(knob.name for knob in served_knobs(backend))
            raise InputError(
                f"{name} does not apply to this model ({backend.name}); its settings: {own}.",
                name,
            )


def merge_knobs(*groups: Iterable[Knob]) -> tuple[Knob, ...]:
    """The knobs of all `groups`, in order, each name once. ValueError when one name is declared
    differently twice: two meanings for one request field."""
    merged: dict[str, Knob] = {}
    for group in groups:
        for knob in group:
            known = merged.setdefault(knob.name, knob)
            if known != knob:
                raise ValueError(
                    f"the knob {knob.name!r} is declared twice, differently: {known} and {knob}"
                )
    return tuple(merged.values())


def parse_knobs(values: Mapping[str, Any], knobs: Iterable[Knob]) -> dict[str, Number]:
    """The values of `knobs` found in `values`, checked and typed (InputError naming the first
    bad one); the unset ones and names that are no knob here are left out."""
    parsed = {}
    for knob in knobs:
        if knob.name in values:
            value = knob.parse(values[knob.name])
            if value is not None:
                parsed[knob.name] = value
    return parsed


def knob_defaults(backend: object) -> dict[str, Number | None]:
    """Each of the backend's knobs -> its default: the backend's own (`sampling_defaults()`)
    where it says one, else the declared one (None: not known)."""
    own_defaults = getattr(backend, "sampling_defaults", None)
    own = dict(own_defaults() or {}) if own_defaults is not None else {}
    return {knob.name: own.get(knob.name, knob.default) for knob in backend_knobs(backend)}


def _shown(value: object) -> str:
    text = str(value)
    return text if len(text) <= 40 else text[:37] + "..."
