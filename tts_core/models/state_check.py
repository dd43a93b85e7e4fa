"""The one strict check of a checkpoint against the module it fills (every model's loaders).

`mismatches(expected, found)` compares key -> shape maps and names what is wrong; each loader
raises its own error type with these phrases, and nothing is copied until they are empty
(never `load_state_dict(strict=False)`: a misnamed tensor would silently stay random).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

SHOWN = 8  # keys named per problem; the rest are counted


def mismatches(
    expected: Mapping[str, Iterable[int]], found: Mapping[str, Iterable[int]]
) -> list[str]:
    """['N missing key(s): ...', 'N unexpected key(s): ...', 'N shape mismatch(es): key
    (found) (expected (...))'] for the keys and shapes that differ; [] when all match."""
    missing = sorted(set(expected) - set(found))
    unexpected = sorted(set(found) - set(expected))
    wrong = sorted(
        f"{key} {tuple(found[key])} (expected {tuple(expected[key])})"
        for key in set(expected) & set(found)
        if tuple(found[key]) != tuple(expected[key])
    )
    problems = []
    for items, what in (
        (missing, "missing key(s)"),
        (unexpected, "unexpected key(s)"),
        (wrong, "shape mismatch(es)"),
    ):
        if items:
            problems.append(f"{len(items)} {what}: {listing(items)}")
    return problems


def listing(items: list[str]) -> str:
    shown = ", ".join(items[:SHOWN])
    return shown + (f", ... ({len(items) - SHOWN} more)" if len(items) > SHOWN else "")


def shapes_of(state: Mapping) -> dict[str, tuple[int, ...]]:
    """key -> shape of a state dict (tensors)."""
    return {key: tuple(value.shape) for key, value in state.items()}
