"""The talker's KV caches: the served arena shared by every row, or one request's own cache.

KVArena (the served runner's): one preallocated (1, kv, capacity, D) cache per layer for all rows.
Each admitted sequence gets one contiguous span of positions, sized at admission for its prompt
plus its frame limit. Its caches are views of that span (`KVCache.over`), so a row's attention
reads exactly its own filled keys (no copy, no padding) and nothing is allocated per request.
A span is never cleared: a row only ever reads the positions it has written, so the arena is
left uninitialized (`torch.empty`) and takes memory only as far as rows have written.

RequestKV (`model.stream`, one row on the caller's thread): the same interface over a cache
made for one request, prompt + frame limit positions, dropped the moment the request ends.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ...layers import DecoderStack, KVCache
from ..talker import Talker


@dataclass(frozen=True)
class Span:
    offset: int
    length: int

    @property
    def end(self) -> int:
        return self.offset + self.length


class SpanAllocator:
    """First-fit allocation of contiguous position ranges in [0, capacity)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = int(capacity)
        self._free: list[Span] = [Span(0, self.capacity)]  # sorted by offset, never adjacent

    @property
    def free_positions(self) -> int:
        return sum(span.length for span in self._free)

    def allocate(self, length: int) -> Span | None:
        """A span of `length` positions, or None when no free range is that long."""
        for index, free in enumerate(self._free):
            if free.length >= length:
                rest = Span(free.offset + length, free.length - length)
                self._free[index : index + 1] = [rest] if rest.length else []
                return Span(free.offset, length)
        return None

    def free(self, span: Span) -> None:
        """Give a span back, merging it with its free neighbours."""
        spans = sorted([*self._free, span], key=lambda s: s.offset)
        merged: list[Span] = []
        for current in spans:
            if merged and merged[-1].end > current.offset:
                raise ValueError(f"span {span} overlaps free space: freed twice?")
            if merged and merged[-1].end == current.offset:
                merged[-1] = Span(merged[-1].offset, merged[-1].length + current.length)
            else:
                merged.append(current)
        self._free = merged


class KVArena(SpanAllocator):
    """The spans of `capacity` positions over one preallocated cache per layer of `stack`."""

    def __init__(
        self, stack: DecoderStack, capacity: int, dtype: torch.dtype, device: torch.device
    ) -> None:
        super().__init__(capacity)
        cfg = stack.cfg
        shape = (1, cfg.num_key_value_heads, self.capacity, cfg.head_dim)
        empty = lambda: torch.empty(shape, dtype=dtype, device=device)  # noqa: E731
        self.layers = [KVCache.over(empty(), empty()) for _ in stack.layers]

    def caches(self, span: Span) -> list[KVCache]:
        """Per-layer (1, kv, span.length, D) caches over the span's storage."""
        window = slice(span.offset, span.end)
        return [KVCache.over(c.k[:, :, window], c.v[:, :, window]) for c in self.layers]

    @property
    def nbytes(self) -> int:
        return sum(c.k.nbytes + c.v.nbytes for c in self.layers)


class RequestKV:
    """One request's own talker cache: `talker.new_caches(1, positions)`, lent whole to that one
    request and released (storage dropped) when it gives its span back."""

    def __init__(self, talker: Talker, positions: int) -> None:
        self.capacity = int(positions)
        self.layers = talker.new_caches(1, self.capacity)
        self._lent = False

    def allocate(self, length: int) -> Span | None:
        if self._lent or length > self.capacity:
            return None
        self._lent = True
        return Span(0, length)

    def free(self, span: Span) -> None:
        self.layers = []  # one request only: its memory goes now, not when this object does

    def caches(self, span: Span) -> list[KVCache]:
        return [KVCache.over(c.k[:, :, : span.end], c.v[:, :, : span.end]) for c in self.layers]

    @property
    def nbytes(self) -> int:
        return sum(c.k.nbytes + c.v.nbytes for c in self.layers)
