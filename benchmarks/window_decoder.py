"""Window-mode streaming, as published streamers do it: the baseline the exact mode is compared
with (benchmarks/decoder_modes.py, decoder_bench.py; tests/qwen3/test_streaming_decoder.py).

Every `emit_every` frames the last `window` frames are decoded again from scratch (zero state)
and only the newest audio is emitted. The seam with the previous chunk is blended with a Hann
crossfade of `crossfade` samples held back from the previous emission; the very first samples
fade in and the final ones fade out. The total length is frames * samples_per_frame. It is an
approximation (every window loses the context before it), unlike `CodecDecoder.decode_step`.
"""

from __future__ import annotations

import torch

from tts_core.models.qwen3_tts.codec import CodecDecoder


class WindowDecoder:
    def __init__(
        self,
        decoder: CodecDecoder,
        window: int = 80,
        emit_every: int = 12,
        crossfade: int = 960,
        fade_edges: int = 240,
    ) -> None:
        spf = decoder.samples_per_frame
        if not 0 < emit_every <= window:
            raise ValueError("need 0 < emit_every <= window")
        if not 0 <= crossfade <= (window - emit_every) * spf:
            raise ValueError(
                "crossfade must fit inside the re-decoded context (window - emit_every)"
            )
        self.decoder = decoder
        self.window, self.emit_every = window, emit_every
        self.crossfade, self.fade_edges = crossfade, fade_edges
        self.samples_per_frame = spf
        fade = torch.hann_window(2 * crossfade, periodic=False, dtype=torch.float32)
        self._fade_in = fade[:crossfade]  # rises 0 -> 1
        self.start()

    def start(self, prefix: torch.Tensor | None = None) -> None:
        """Begin a stream; `prefix` (1, n_q, R) frames give left context and are not emitted."""
        # Absolute frame indices: `_buffer` holds frames [_base, _total); audio of frames before
        # `_emitted` is out, except the last `crossfade` samples kept in `_tail`.
        self._buffer: torch.Tensor | None = None
        self._base = self._total = self._emitted = 0
        self._tail: torch.Tensor | None = None
        self._fade_first = True
        if prefix is not None and prefix.shape[-1] > 0:
            self._buffer = prefix
            self._total = self._emitted = prefix.shape[-1]
            self._fade_first = False  # the prefix audio exists: no fade-in at the cut

    def feed(self, codes: torch.Tensor) -> torch.Tensor:
        """Add frames (1, n_q, t); return the audio ready now (possibly empty), float32 1-D."""
        self._buffer = codes if self._buffer is None else torch.cat([self._buffer, codes], dim=-1)
        self._total += codes.shape[-1]
        pieces = [torch.zeros(0)]
        while self._total - self._emitted >= self.emit_every:
            pieces.append(self._emit(self._emitted + self.emit_every, final=False))
        return torch.cat(pieces)

    def flush(self) -> torch.Tensor:
        """Emit everything left, ending with a fade-out; the stream is then finished."""
        if self._total > self._emitted:
            return self._emit(self._total, final=True)
        tail = self._tail if self._tail is not None else torch.zeros(0)
        self._tail = None
        return self._fade_out(tail)

    def _emit(self, upto: int, final: bool) -> torch.Tensor:
        start = max(0, upto - self.window)
        codes = self._buffer[..., start - self._base : upto - self._base]
        wav = self.decoder(codes)[0, 0].float().cpu()  # fresh decode, zero state
        held = 0 if self._tail is None else self._tail.shape[0]
        fresh = wav[wav.shape[0] - (upto - self._emitted) * self.samples_per_frame - held :]
        if held:
            fade_in = self._fade_in[self.crossfade - held :]
            blend = self._tail * (1 - fade_in) + fresh[:held] * fade_in
            fresh = torch.cat([blend, fresh[held:]])
        if self._fade_first:
            fresh = self._apply_fade_in(fresh)
            self._fade_first = False
        self._emitted = upto
        keep_from = max(0, upto + 1 - self.window)  # the next window starts no earlier
        self._buffer = self._buffer[..., keep_from - self._base :]
        self._base = keep_from
        if final:
            self._tail = None
            return self._fade_out(fresh)
        keep = min(self.crossfade, fresh.shape[0])
        self._tail = fresh[fresh.shape[0] - keep :].clone()
        return fresh[: fresh.shape[0] - keep]

    def _apply_fade_in(self, audio: torch.Tensor) -> torch.Tensor:
        n = min(self.fade_edges, audio.shape[0])
        ramp = torch.linspace(0.0, 1.0, n)
        return torch.cat([audio[:n] * ramp, audio[n:]])

    def _fade_out(self, audio: torch.Tensor) -> torch.Tensor:
        n = min(self.fade_edges, audio.shape[0])
        ramp = torch.linspace(1.0, 0.0, n)
        return torch.cat([audio[: audio.shape[0] - n], audio[audio.shape[0] - n :] * ramp])
