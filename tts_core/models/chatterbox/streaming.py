"""Streaming S3Gen for both Chatterbox models (spec chatterbox.md 12): chunked token-to-mel over
a fixed pre-drawn noise, and the HiFT vocoder carried across chunks.

S3Gen cannot stream exactly: the flow encoder and the CFM estimator attend bidirectionally over
prompt + all tokens, the pre-lookahead conv needs 3 tokens of right context, and the official
draws the CFM noise after T3's last token. So a stream
* draws every S3Gen/HiFT random number up front, indexed by position (`StreamNoise`): mel frame
  j always starts from the same noise, output sample s always gets the same source noise;
* re-runs the flow at each chunk over the prompt's last tokens and a few tokens before the
  first frame not handed out (`FlowChunker`), and hands out only the frames whose tokens have
  their lookahead (plus a hold-back), frozen from then on;
* vocodes the frozen mel in windows with left/right context (`HiftStream`), the source's phase
  carried in float64 cycles, so the waveform continues across chunks without crossfades.
The clip approximates the whole-utterance pass with the same noise (`generate(...,
stream_noise=True)`): measured in benchmarks/chatterbox_stream_bench.py, bounded in
tests/chatterbox/test_streaming.py.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .chunking import StreamChunking
from .config import LOOKAHEAD, MELS, SAMPLE_RATE
from .flow import TOKEN_MEL_RATIO, Flow
from .hift import HARMONICS, SAMPLES_PER_FRAME, HiFTGenerator, initial_phases, trim_fade
from .voice import ChatterboxVoice

SOURCE_BLOCK = 50 * SAMPLES_PER_FRAME  # HiFT source noise is drawn lazily, 1 s per draw
F0_RADIUS = 5  # the F0 predictor: 5 convs of kernel 3, each frame sees 5 frames either side


class StreamNoise:
    """Every random number S3Gen and HiFT use in a stream, seeded with `seed`, in the official
    order (generated mel noise, full-length z, HiFT's phases and source noise) but over the
    longest utterance (`max_tokens`); source noise in 1 s blocks drawn in order."""

    def __init__(self, seed: int, max_tokens: int, prompt_frames: int) -> None:
        self._generator = torch.Generator().manual_seed(int(seed))
        self.mel = torch.randn(1, MELS, TOKEN_MEL_RATIO * max_tokens, generator=self._generator)
        self.prompt = torch.randn(1, MELS, prompt_frames, generator=self._generator)
        self.phases = initial_phases(1, self._generator)  # (1, 9, 1)
        self._source: list[torch.Tensor] = []  # (1, 9, SOURCE_BLOCK) each

    @classmethod
    def for_voice(cls, seed: int, voice: ChatterboxVoice, max_tokens: int) -> StreamNoise:
        """The noise of a stream of at most `max_tokens` tokens after `voice`'s S3Gen prompt."""
        return cls(seed, max_tokens, TOKEN_MEL_RATIO * voice.prompt_token.shape[1])

    def source(self, start: int, end: int) -> torch.Tensor:
        """Standard normal source noise for output samples [start, end): (1, 9, end - start)."""
        while len(self._source) * SOURCE_BLOCK < end:
            shape = (1, HARMONICS + 1, SOURCE_BLOCK)
            self._source.append(torch.randn(shape, generator=self._generator))
        first = start // SOURCE_BLOCK
        blocks = torch.cat(self._source[first : -(-end // SOURCE_BLOCK)], dim=2)
        return blocks[..., start - first * SOURCE_BLOCK : end - first * SOURCE_BLOCK]


@dataclass
class FlowWindow:
    """What one pass runs the flow over, with the stream's noise of exactly those frames."""

    prompt_token: torch.Tensor  # (1, P') the prompt's last P' tokens
    prompt_feat: torch.Tensor  # (1, 2 P' - lead, 80) their mel (the whole prompt's lead kept)
    tokens: torch.Tensor  # (1, n - skipped)
    noise: torch.Tensor  # (1, 80, 2 (n - skipped)) generated frames' noise
    prompt_noise: torch.Tensor  # (1, 80, >= 2 P') prompt frames' noise
    skipped: int  # generated tokens before `tokens` (their frames already handed out)


class FlowChunker:
    """Token-to-mel in chunks: each `push` runs the flow over prompt + tokens so far and returns
    the newly stable mel frames (1, 80, k): those whose token has `holdback` (>= the lookahead)
    later tokens; final: all. A pass sees the prompt's last `prompt_tokens` and `context`
    tokens before the first frame not handed out (None: all): O(prompt + context + chunk)."""

    def __init__(
        self,
        flow: Flow,
        voice: ChatterboxVoice,
        noise: StreamNoise,
        holdback: int = LOOKAHEAD,
        prompt_tokens: int | None = None,
        context: int | None = None,
    ) -> None:
        if holdback < LOOKAHEAD:
            raise ValueError(f"holdback must be >= the lookahead ({LOOKAHEAD} tokens)")
        self.flow, self.voice, self.noise, self.holdback = flow, voice, noise, holdback
        self.prompt_tokens, self.context = prompt_tokens, context
        self.lead = TOKEN_MEL_RATIO * voice.prompt_token.shape[1] - voice.prompt_feat.shape[1]
        self.emitted = 0  # output mel frames handed out

    @torch.inference_mode()
    def push(self, tokens: torch.Tensor, final: bool) -> torch.Tensor:
        """tokens (1, n): every speech token so far (+ the silence tokens when final)."""
        window = self.window(tokens)
        mel = self.flow.inference(*self.flow_inputs(window))
        return self.take(mel, window, tokens.shape[1], final)

    def flow_inputs(self, w: FlowWindow) -> tuple:
        """Flow.inference's arguments for a pass over `w`: the stream's noise, no draw."""
        voice = self.voice.embedding
        return (w.tokens, w.prompt_token, w.prompt_feat, voice, None, w.noise, w.prompt_noise)

    def window(self, tokens: torch.Tensor) -> FlowWindow:
        """The prompt tail and tokens this pass runs over (all of them when unbounded)."""
        n, voice = tokens.shape[1], self.voice
        prompt_len = voice.prompt_token.shape[1]
        keep = prompt_len if self.prompt_tokens is None else min(prompt_len, self.prompt_tokens)
        handed_tokens = max(0, (self.emitted - self.lead) // TOKEN_MEL_RATIO)
        skipped = 0 if self.context is None else max(0, handed_tokens - self.context)
        feat_len = TOKEN_MEL_RATIO * keep - self.lead
        return FlowWindow(
            prompt_token=voice.prompt_token[:, prompt_len - keep :],
            prompt_feat=voice.prompt_feat[:, voice.prompt_feat.shape[1] - feat_len :],
            tokens=tokens[:, skipped:],
            noise=self.noise.mel[..., TOKEN_MEL_RATIO * skipped : TOKEN_MEL_RATIO * n],
            prompt_noise=self.noise.prompt[..., TOKEN_MEL_RATIO * (prompt_len - keep) :],
            skipped=skipped,
        )

    def take(self, mel: torch.Tensor, window: FlowWindow, n: int, final: bool) -> torch.Tensor:
        """The newly stable frames of a pass's mel (1, 80, lead + 2 (n - skipped)); frame i >=
        lead of a window is frame i + 2 skipped of the whole utterance."""
        shift = TOKEN_MEL_RATIO * window.skipped
        whole_len = mel.shape[2] + shift
        stable = whole_len if final else self.lead + TOKEN_MEL_RATIO * max(0, n - self.holdback)
        new = mel[..., self.emitted - shift : stable - shift]
        self.emitted = max(self.emitted, stable)
        return new


class HiftStream:
    """HiFT over a growing frozen mel: each `push` appends frames and returns the new samples
    (S,), 480 per frame, decoding `left` frames already emitted plus everything frozen but the
    last `right` (until the final push: their right context is unknown). A frame's F0 is kept
    once it has F0_RADIUS frames of context either side: the same for every chunking."""

    def __init__(
        self, hift: HiFTGenerator, noise: StreamNoise, left: int = 16, right: int = 8
    ) -> None:
        if left < F0_RADIUS or right < 0:
            raise ValueError(f"left context must be >= {F0_RADIUS} frames, right >= 0")
        self.hift, self.noise, self.left, self.right = hift, noise, left, right
        self.mel: torch.Tensor | None = None  # (1, 80, F) frozen frames so far
        self.f0 = torch.zeros(0)  # (n_final,) F0 (Hz, CPU) of the frames that had their context
        self.emitted = 0  # frames whose samples were handed out

    @torch.inference_mode()
    def push(self, mel: torch.Tensor, final: bool) -> torch.Tensor:
        window = self.window(mel, final)
        if window is None:
            return self.mel.new_zeros(0)
        frames, source, start, end = window
        return self.finish(self.hift.decode(frames, source)[0], start, end)

    def window(self, mel: torch.Tensor, final: bool):
        """`push` up to its decoder call: (window mel (1, 80, F), source (1, 1, 480 F), start,
        end), or None when no new sample is due."""
        self.mel = mel if self.mel is None else torch.cat([self.mel, mel], dim=2)
        frames = self.mel.shape[2]
        end = frames if final else max(self.emitted, frames - self.right)
        if end == self.emitted or frames == 0:
            return None
        start = max(0, self.emitted - self.left)  # decode window [start, frames)
        source = self._source(self._f0(start, frames, final), start)
        return self.mel[..., start:], source, start, end

    def finish(self, wav: torch.Tensor, start: int, end: int) -> torch.Tensor:
        """`push` after its decoder call: the new samples (L,) of the window's waveform."""
        out = wav[(self.emitted - start) * SAMPLES_PER_FRAME : (end - start) * SAMPLES_PER_FRAME]
        out = self._trim_fade(out, self.emitted * SAMPLES_PER_FRAME)
        self.emitted = end
        return out

    def _f0(self, start: int, frames: int, final: bool) -> torch.Tensor:
        """F0 of frames [start, frames): the kept values, then this pass's for the rest."""
        known = len(self.f0)
        lo = max(0, min(start, known) - F0_RADIUS)
        fresh = self.hift.f0_predictor(self.mel[..., lo:])[0]  # (frames - lo,)
        ready = frames if final else max(known, frames - F0_RADIUS)
        self.f0 = torch.cat([self.f0, fresh[known - lo : ready - lo].cpu()])
        return torch.cat([self.f0[start:known].to(fresh), fresh[known - lo :]])

    def _source(self, f0: torch.Tensor, start: int) -> torch.Tensor:
        """HiFT's excitation for the window from frame `start`: (1, 1, 480 len(f0))."""
        up = f0.repeat_interleave(SAMPLES_PER_FRAME)[None, None]  # nearest x480
        # cycles before the window: excite's per-sample float32 steps f0 (h+1) / 24000, summed
        # in float64 (480 equal steps a frame), so a window agrees with one long cumsum
        harmonic = torch.arange(1, HARMONICS + 2, dtype=torch.float32)
        steps = (self.f0[:start, None] * harmonic / SAMPLE_RATE).double()  # (start, 9)
        cycles = torch.remainder(steps.sum(0) * SAMPLES_PER_FRAME, 1.0)[None, :, None]
        first = start * SAMPLES_PER_FRAME
        noise = self.noise.source(first, first + up.shape[-1]).to(up.device)
        phases = self.noise.phases.to(up.device)
        return self.hift.m_source.excite(up, phases, noise, cycles.to(up.device)).transpose(1, 2)

    @staticmethod
    def _trim_fade(wav: torch.Tensor, offset: int) -> torch.Tensor:
        """S3Gen's trim fade on the samples of this piece that fall in the first 960."""
        fade = trim_fade(wav.device)
        if offset >= len(fade):
            return wav
        wav = wav.clone()
        n = min(len(fade) - offset, len(wav))
        wav[:n] *= fade[offset : offset + n]
        return wav


class S3GenStream:
    """Speech tokens -> waveform in pushes: a FlowChunker feeding a HiftStream."""

    def __init__(
        self,
        flow: Flow,
        hift: HiFTGenerator,
        voice: ChatterboxVoice,
        noise: StreamNoise,
        chunking: StreamChunking,
    ) -> None:
        self.flow = FlowChunker(
            flow, voice, noise, chunking.holdback, chunking.flow_prompt, chunking.flow_context
        )
        self.hift = HiftStream(hift, noise, chunking.hift_left, chunking.hift_right)

    def push(self, tokens: torch.Tensor, final: bool) -> torch.Tensor:
        """tokens (1, n): all so far (final: with the silence tokens) -> new samples (S,)."""
        return self.hift.push(self.flow.push(tokens, final), final)
