"""Chatterbox Turbo on the one decode engine (tts_core/serving): its request, its decode step,
and its served scheduler; the S3Gen work of several streams in one padded pass is
padded_s3gen.py.

scheduler = TurboScheduler(model, max_batch=8)
for chunk in scheduler.submit("Hello", voice, seed=1):    # the chunks of model.stream
    play(chunk.audio)

An engine frame is one T3 draw. A step of the rows (`TurboRunner.decode`):

* T3 (GPT-2): each row's next draw from its own `T3Turbo.draws` generator, the single-stream
  call, row by row. A GPT-2 decode step is a 1-row GEMM per request, and a 1-row GEMM rounds by
  batch shape on this CPU (serving/rows.py: m = 1 is the case it found non-invariant; checked for
  T3's shapes by `t3_rows_invariant`, see benchmarks/chatterbox_batch_bench.py), and the rows'
  attention spans differ; so a request's tokens are its tokens alone, in any batch, at any join.
* S3Gen: the rows whose stream makes a flow pass this step (`model.stream`'s rule: after the
  first `first_tokens` speech tokens, every `chunk_tokens` after, and the final pass) run it
  together: each row's flow encoder alone (bidirectional attention over its own prompt +
  tokens), then ONE CFM solve over the rows padded to the longest (`padded_cfm`: a (B, 1, T)
  mask from per-row lengths, the estimator's transformer blocks masked, its causal convs masked)
  and ONE HiFT decoder call over the rows' windows padded to the longest (`padded_hift_decode`:
  every conv's input re-zeroed past a row's end, the STFT/iSTFT per row), each row's output
  trimmed to its own length. That is what `s3gen_batching="padded"` does. It is row-invariant
  only where this BLAS / conv kernel gives a row the bits of its call alone; `"auto"` (default)
  probes that once per batch size and thread count (`padded_s3gen_exact`) and runs S3Gen per row
  (`S3GenStream.push`, the call one stream makes) where it is not. Where it was measured (an
  Intel Xeon, 2 cores, 1 and 2 threads, tiny and real sizes) the padded pass is NOT
  bit-identical (it differs in the last bits: the GEMMs and convs over a longer T block
  differently), within the float bound of tests/chatterbox/test_batch_leaks.py, and at real size
  it is not faster either (benchmarks/chatterbox_batch_bench.py: one round of 4 rows 11.4 s
  padded vs 9.6 s per row, 1 thread); so "auto" runs S3Gen per row here and a request's audio
  is bit-identical alone (`model.stream`) and in any batch, at any join time.

The chunks: a row hands out a chunk when a non-final S3Gen pass made audio (as `model.stream`
yields), and its final chunk at STOP (after the first draw), at max_new_tokens + 1 draws, or when
nothing is left to draw; `TurboChunk.tokens` are the draws since the previous chunk (STOP
dropped from the final one), exactly `model.stream`'s chunks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from ...audio.cadence import Cadence
from ...serving import alone
from ...serving.engine import BatchEngine
from ...serving.loop import EngineLoop, RequestStream
from ...serving.request import Request
from .config import S3_VOCAB, STOP_SPEECH
from .model import TurboChunk
from .padded_s3gen import padded_s3gen_exact, padded_s3gen_push
from .sampling import TurboSampling
from .streaming import S3GenStream, StreamChunking
from .t3 import MAX_NEW_TOKENS

if TYPE_CHECKING:
    from .model import ChatterboxTurboModel
    from .voice import ChatterboxVoice

DEFAULT_MAX_BATCH = 8
S3GEN_MODES = ("auto", "padded", "per_row")


@dataclass
class ServedTurboChunk(TurboChunk):
    """A TurboChunk with the most rows stepped together while its draws were made."""

    batch_size: int = 1


class TurboSequence(Request):
    """One Turbo request: text ids, voice, sampling and its own generator (seed), the stream's
    pre-drawn S3Gen noise and state; while it runs its T3 draw generator (caches inside)."""

    def __init__(
        self,
        model: ChatterboxTurboModel,
        text: str,
        voice: ChatterboxVoice | None,
        seed: int,
        sampling: TurboSampling,
        max_new_tokens: int,
        chunking: StreamChunking,
        should_stop: Callable[[], bool],
        *,
        outbox: Any = None,
    ) -> None:
        # chunk_due is this model's own rule (below), so the cadence is unused
        super().__init__(Cadence(1, 1), should_stop, max_new_tokens + 1, "max_tokens",
                         outbox=outbox)  # fmt: skip
        self.model = model
        self.voice = model._voice(voice)
        self.text_ids = model._ids(text)
        self.seed, self.sampling, self.chunking = int(seed), sampling, chunking
        self.max_new_tokens = int(max_new_tokens)
        steps = self.max_new_tokens + 1
        positions = 2 + self.voice.t3_prompt_tokens.shape[1] + self.text_ids.shape[1] + steps
        if positions > model.t3.tfmr.wpe.weight.shape[0]:
            raise ValueError(f"text too long: {positions} T3 positions > the model's "
                             f"{model.t3.tfmr.wpe.weight.shape[0]}")  # fmt: skip
        self.draws: Iterator[torch.Tensor] | None = None  # T3's generator (made at prefill)
        self.first: torch.Tensor | None = None  # the prefill's draw, emitted at the first step
        self.s3gen: S3GenStream | None = None
        self.speech: list[int] = []  # S3Gen's input: the drawn ids < 6561
        self.due = chunking.first_tokens
        self.ready: torch.Tensor | None = None  # audio of this step's non-final pass (if any)
        self.final_audio: torch.Tensor | None = None  # the final pass's audio

    @property
    def chunk_due(self) -> bool:
        return self.ready is not None and self.ready.numel() > 0


def make_request(
    model: ChatterboxTurboModel,
    text: str,
    voice: ChatterboxVoice | None = None,
    seed: int = 0,
    sampling: TurboSampling | None = None,
    max_new_tokens: int = MAX_NEW_TOKENS,
    chunking: StreamChunking | None = None,
    should_stop: Callable[[], bool] | None = None,
    outbox: Any = None,
) -> TurboSequence:
    """A checked request with `model.stream`'s arguments (ValueError when it cannot run)."""
    return TurboSequence(model, text, voice, seed, sampling or TurboSampling(), max_new_tokens,
                         chunking or StreamChunking(), should_stop or (lambda: False),
                         outbox=outbox)  # fmt: skip


class TurboRunner:
    """The engine's StepModel for Chatterbox Turbo (tts_core/serving/engine.py)."""

    def __init__(self, model: ChatterboxTurboModel, max_batch: int, s3gen_batching: str = "auto"):
        if max_batch < 1:
            raise ValueError("max_batch must be >= 1")
        if s3gen_batching not in S3GEN_MODES:
            raise ValueError(f"s3gen_batching must be one of {S3GEN_MODES}")
        self.model = model
        self.max_batch = int(max_batch)
        self.s3gen_batching = s3gen_batching
        self.passes: list[tuple[int, bool]] = []  # (rows, padded) of each S3Gen round (stats)
        self.most_rows = 0  # most rows decoded in one step (stats)

    def admit(self, seq: TurboSequence) -> bool:
        noise = self.model._stream_noise(seq.seed, seq.voice, seq.max_new_tokens)
        seq.s3gen = S3GenStream(self.model.flow, self.model.hift, seq.voice, noise, seq.chunking)
        return True  # T3's caches are made at prefill (prompt + max_new_tokens + 1 positions)

    def prefill(self, seq: TurboSequence, positions: int) -> bool:
        """The whole prompt in one call and its draw (T3.draws' first step), as one stream."""
        voice, generator = seq.voice, torch.Generator().manual_seed(seq.seed)
        seq.draws = self.model.t3.draws(voice.speaker_emb, voice.t3_prompt_tokens, seq.text_ids,
                                        seq.sampling, generator, seq.max_new_tokens)  # fmt: skip
        seq.first = next(seq.draws)
        return True

    @torch.inference_mode()
    def decode(self, seqs: list[TurboSequence], out: BatchEngine) -> None:
        rows = len(seqs)
        self.most_rows = max(self.most_rows, rows)
        tokens: list[int | None] = []
        for seq in seqs:  # T3: each row's own draw (module doc)
            if seq.first is not None:
                token, seq.first = seq.first, None
            else:
                token = next(seq.draws, None)  # None: nothing left to draw (all -inf)
            tokens.append(None if token is None else int(token))
        # S3Gen: this step's non-final passes together, then the final ones (a row may make both)
        passing, ending = [], []
        for seq, token in zip(seqs, tokens, strict=True):
            if token is not None and token < S3_VOCAB:
                seq.speech.append(token)
            if token is not None and len(seq.speech) >= seq.due:
                seq.due = len(seq.speech) + seq.chunking.chunk_tokens
                passing.append(seq)
            drawn = seq.frames + (token is not None)  # draws so far, this one included
            stop = token is not None and token == STOP_SPEECH and seq.frames > 0
            if token is None or stop or drawn == seq.limit:
                ending.append(seq)
        if passing:
            audio = self.s3gen_round([(s.s3gen, self._speech(s), False) for s in passing])
            for seq, piece in zip(passing, audio, strict=True):
                seq.ready = piece
        if ending:
            audio = self.s3gen_round([(s.s3gen, self._speech(s, True), True) for s in ending])
            for seq, piece in zip(ending, audio, strict=True):
                seq.final_audio = piece
        for seq, token in zip(seqs, tokens, strict=True):
            if seq.final_audio is not None:
                # model.stream's reason: STOP drawn (it is never a pass's token), or fewer than
                # max_new_tokens + 1 draws (nothing left to draw)
                drawn = seq.frames + (token is not None)
                reason = "eos" if token == STOP_SPEECH or drawn < seq.limit else "max_tokens"
                out.emit(seq, token, rows, reason)
            else:
                out.emit(seq, token, rows)
            seq.ready = None

    def _speech(self, seq: TurboSequence, final: bool = False) -> torch.Tensor:
        speech = self.model._tensor(seq.speech)
        return torch.cat([speech, self.model._silence()[None]], dim=1) if final else speech

    def s3gen_round(self, jobs: list[tuple[S3GenStream, torch.Tensor, bool]]) -> list[torch.Tensor]:
        """Each job's `S3GenStream.push(tokens, final)`: per row, or the rows in one padded
        pass (module doc)."""
        padded = len(jobs) > 1 and (
            self.s3gen_batching == "padded"
            or (self.s3gen_batching == "auto" and padded_s3gen_exact(self.model, len(jobs)))
        )
        self.passes.append((len(jobs), padded))
        if not padded:
            return [stream.push(tokens, final) for stream, tokens, final in jobs]
        return padded_s3gen_push(self.model.flow, self.model.hift, jobs)

    def deliver(
        self,
        seq: TurboSequence,
        frames: list[int],
        compute_s: float,
        stop_reason: str | None,
        batch: int,
    ) -> ServedTurboChunk:
        """The chunk of `frames` (the draws since the previous chunk): this step's pass audio,
        or on the final chunk the final pass (after this step's non-final chunk, if it made
        audio: put first, as `model.stream` yields both)."""
        if stop_reason is None:
            return self._chunk(seq.ready, frames, seq.frames, batch)
        if seq.chunk_due:
            seq.outbox.put(self._chunk(seq.ready, frames, seq.frames, batch))
            frames = []
        if stop_reason == "eos" and frames and frames[-1] == STOP_SPEECH:
            frames = frames[:-1]
        chunk = self._chunk(seq.final_audio, frames, seq.frames, batch)
        chunk.final, chunk.stop_reason = True, stop_reason
        return chunk

    def _chunk(self, audio: torch.Tensor, frames: list[int], draws: int, batch: int):
        tokens = torch.tensor(frames, dtype=torch.long, device=self.model.device)
        return ServedTurboChunk(audio.cpu().numpy(), tokens, draws, batch_size=batch)

    def release(self, seq: TurboSequence) -> None:
        if seq.draws is not None:
            seq.draws.close()  # frees T3's caches
        seq.draws = seq.first = seq.s3gen = seq.ready = None
        seq.final_audio = None


def run_alone(model: ChatterboxTurboModel, seq: TurboSequence) -> Iterator[ServedTurboChunk]:
    """`seq` (made with an InlineOutbox) stepped by a private one-row engine on the thread that
    iterates: the engine's path for one request, equal to `model.stream`."""

    def engine() -> BatchEngine:
        return BatchEngine(TurboRunner(model, 1), isolate_failures=False)

    return alone.run_alone(engine, seq)


class TurboScheduler(EngineLoop):
    """Continuous batching, served: every Turbo stream of the app stepped together on one loop
    thread (`call`: voices are made there too)."""

    def __init__(
        self,
        model: ChatterboxTurboModel,
        max_batch: int = DEFAULT_MAX_BATCH,
        s3gen_batching: str = "auto",
    ) -> None:
        super().__init__(TurboRunner(model, max_batch, s3gen_batching),
                         thread_name="tts-chatterbox")  # fmt: skip
        self.model = model

    def submit(self, text: str, voice: ChatterboxVoice | None, **kwargs: Any) -> RequestStream:
        """Check now (ValueError) and queue the request; the stream yields ServedTurboChunks.
        `kwargs`: model.stream's (seed, sampling, max_new_tokens, chunking) and should_stop."""
        return self.enqueue(self.call(make_request, self.model, text, voice, **kwargs))


def t3_rows_invariant(model: ChatterboxTurboModel, requests: int) -> bool:
    """Would one batched GPT-2 decode step give every row its own bits? Checked for T3's
    fused projections (`addmm`, 1 row per request) at this batch size (rows.py's method)."""
    generator = torch.Generator().manual_seed(requests)
    for block in model.t3.tfmr.h:
        for layer in (block.attn.c_attn, block.attn.c_proj, block.mlp.c_fc, block.mlp.c_proj):
            weight, bias = layer.weight, layer.bias
            x = torch.randn(requests, weight.shape[0], generator=generator).to(weight)
            together = torch.addmm(bias, x, weight)
            for i in range(requests):
                if not torch.equal(torch.addmm(bias, x[i : i + 1].clone(), weight),
                                   together[i : i + 1]):  # fmt: skip
                    return False
        break  # every block has the same shapes
    return True
