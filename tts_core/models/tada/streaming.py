"""TADA's decoder, streamed: token by token, with a KV-cached transformer and a windowed CNN.

The decoder's input is one block per token: (duration - 1) zero frames then the token's acoustic
vector, and a last block of zero frames (`expand_for_decoder`). Its transformer's mask
(`decoder_segment_mask`) lets a frame attend its own block and the previous one only, and a
block's layer outputs never depend on later blocks. So when a token arrives its block's frames
go through each layer attending [previous block's keys/values at that layer; its own]: the same
attention as the full pass, with the masked keys left out instead of weighted zero (the sums run
over fewer terms: a rounding-level difference, bounded in tests/tada/test_streaming.py).

The CNN is not causal: `emit` decodes a window of transformer frames with `left` frames of
context before the frames it returns and `lookahead` frames after them (both clamped to the
frames that exist), and keeps the samples of its own frames (the CNN is shift-equivariant: frame
f's samples sit at f x 480 in any window away from the edges). Near the window edges the
context is cut, which is the streaming error; `finish` decodes the tail with no lookahead
needed. Defaults: 20 frames of context and 15 of lookahead (300 ms), as the upstream streaming
pull request.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .codec import TadaDecoder

SAMPLES_PER_FRAME = 480  # 4 x 4 x 5 x 6 at 24 kHz


@dataclass
class _LayerCache:
    k: torch.Tensor | None = None  # (1, H, frames of the previous block, D)
    v: torch.Tensor | None = None


@dataclass
class DecoderStream:
    """State of one stream: transformer caches, transformer outputs so far, samples emitted."""

    caches: list[_LayerCache]
    position: int = 0  # frames through the transformer
    hidden: list[torch.Tensor] = field(default_factory=list)  # (frames, C) pieces
    emitted_frames: int = 0  # frames whose samples were returned
    done: bool = False


def check_window(left: int, lookahead: int) -> None:
    """ValueError unless context >= 0 and lookahead >= 1 frame: the CNN's output ends a few
    samples short of its input's last frame (6 on both tiny decoders: the full decode of T
    frames gives T x 480 - 6 samples), so every window with no lookahead would lose them."""
    if left < 0 or lookahead < 1:
        raise ValueError(
            f"context must be >= 0 and lookahead >= 1 frames (got {left}, {lookahead})"
        )


class StreamingDecoder:
    def __init__(self, decoder: TadaDecoder, left: int = 20, lookahead: int = 15) -> None:
        check_window(left, lookahead)
        self.decoder, self.left, self.lookahead = decoder, left, lookahead
        self.stack = decoder.local_attention_decoder

    def start(self) -> DecoderStream:
        return DecoderStream([_LayerCache() for _ in self.stack.layers])

    @torch.no_grad()
    def push_block(self, stream: DecoderStream, frames: torch.Tensor) -> None:
        """One block of decoder input frames (n, embed_dim) through the transformer."""
        x = self.decoder.decoder_proj(frames[None])  # (1, n, C)
        n = x.shape[1]
        cos, sin = self.stack.rope(stream.position + n, x.dtype, x.device)
        rope = (cos[stream.position :], sin[stream.position :])
        for layer, cache in zip(self.stack.layers, stream.caches, strict=True):
            x = layer(x, rope, None, cache)
        stream.hidden.append(self.stack.final_norm(x)[0])
        stream.position += n

    def push_token(self, stream: DecoderStream, vector: torch.Tensor, before: int) -> None:
        """A token's acoustic vector (embed_dim,) with its duration: its block."""
        zeros = vector.new_zeros(max(before - 1, 0), vector.shape[0])
        self.push_block(stream, torch.cat([zeros, vector[None]]))

    @torch.no_grad()
    def emit(self, stream: DecoderStream) -> torch.Tensor:
        """The samples of every frame that has `lookahead` frames after it (S,)."""
        ready = stream.position - self.lookahead
        return self._decode(stream, ready) if ready > stream.emitted_frames else _empty(stream)

    @torch.no_grad()
    def finish(self, stream: DecoderStream, trailing: int) -> torch.Tensor:
        """The last block (`trailing` zero frames, time_before[-1]) and every remaining sample."""
        if trailing > 0:
            dtype = self.decoder.decoder_proj.weight.dtype
            self.push_block(
                stream, torch.zeros(trailing, self.decoder.config.embed_dim, dtype=dtype)
            )
        stream.done = True
        return self._decode(stream, stream.position)

    def _decode(self, stream: DecoderStream, until: int) -> torch.Tensor:
        hidden = torch.cat(stream.hidden)
        start = max(stream.emitted_frames - self.left, 0)
        stop = min(until + self.lookahead, stream.position)
        wav = self.decoder.wav_decoder(hidden[start:stop].T[None])[0, 0]
        first = (stream.emitted_frames - start) * SAMPLES_PER_FRAME
        last = (
            wav.shape[0]
            if stream.done and stop == stream.position
            else ((until - start) * SAMPLES_PER_FRAME)
        )
        stream.emitted_frames = until
        return wav[first:last]


def _empty(stream: DecoderStream) -> torch.Tensor:
    return torch.zeros(0) if not stream.hidden else stream.hidden[0].new_zeros(0)
