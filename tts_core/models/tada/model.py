"""TADA end to end on our modules: load the released folders, clone a voice from a clip and its
transcript, generate speech (the official generate()) or stream it on the engine.

    model = TadaModel.from_folders(model_dir, codec_dir)
    voice = model.create_voice(audio, sample_rate, ref_text, seed=11)
    audio = model.generate(voice, "Text to speak.", seed=15)  # float32 (S,) at 24 kHz
    for chunk in model.stream(voice, "Text to speak.", seed=15):  # TadaChunks (runner.py)
        play(chunk.audio)
    served = EngineLoop(model.runner(4), make_request=model.request)  # tts_core.serving
    for chunk in served.submit(voice, "Text to speak.", seed=15):  # the same chunks
        play(chunk.audio)

The transcript is required (upstream runs a 1.1B English ASR model without one). Random numbers
come from a torch.Generator seeded per call, drawn in the official order (create_voice: the
aligner's LayerDrop draws, then the encoder's noise; generate: see generate.py), so a call
equals the official one after torch.manual_seed(seed).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ...audio.cadence import Cadence
from ...audio.sinc import resample
from ...serving.alone import InlineOutbox, run_alone
from ...serving.batch import BatchEngine
from ..contract import read_knobs
from .alignment import token_alignment
from .checkpoint import load_aligner, load_decoder, load_encoder, load_lm, resolve_folders
from .generate import (
    DEFAULT_OPTIONS,
    FRAME_RATE,
    SAMPLE_RATE,
    GenerateOptions,
    Generation,
    Prompt,
    expand_for_decoder,
    generate,
    leading_silence,
)
from .runner import DEFAULT_MAX_BATCH, TadaChunk, TadaRunner, TadaSequence
from .streaming import check_window
from .text import normalize_text
from .tokenizer import TadaTokenizer


class MissingTranscriptError(ValueError):
    """Cloning without `ref_text`."""


@dataclass(frozen=True)
class StreamKnobs:
    """How `stream` / `request` cut and decode (besides `options` and `seed`), by name: a chunk
    after `first_chunk_tokens` tokens, then every `chunk_tokens`; the decoder's window of
    `context` / `lookahead` frames (streaming.StreamingDecoder)."""

    context: int = 20
    lookahead: int = 15
    chunk_tokens: int = 4
    first_chunk_tokens: int = 2

    def __post_init__(self) -> None:
        self.cadence()  # ValueError below 1
        check_window(self.context, self.lookahead)

    def cadence(self) -> Cadence:
        return Cadence(self.first_chunk_tokens, self.chunk_tokens)


@dataclass
class TadaModel:
    tokenizer: TadaTokenizer
    lm: torch.nn.Module
    decoder: torch.nn.Module
    encoder: torch.nn.Module
    aligner: torch.nn.Module

    @classmethod
    def from_folders(
        cls,
        model: str | Path,
        codec: str | Path,
        dtype: torch.dtype = torch.float32,
        tokenizer: str | Path | None = None,
    ) -> TadaModel:
        """`model`: a HumeAI/tada-1b-like folder (config.json, model.safetensors, tokenizer.json);
        `codec`: a HumeAI/tada-codec-like folder (encoder/, decoder/, aligner/); `tokenizer`:
        the folder of tokenizer.json (None: `model`)."""
        tokens = TadaTokenizer.from_folder(model if tokenizer is None else tokenizer)
        return cls(
            tokens,
            load_lm(model, dtype),
            load_decoder(codec, dtype),
            load_encoder(codec, dtype),
            load_aligner(codec, tokens.vocab_size, dtype),
        )

    @classmethod
    def from_pretrained(
        cls,
        model: str | Path = "HumeAI/tada-1b",
        codec: str | Path = "HumeAI/tada-codec",
        tokenizer: str | Path | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> TadaModel:
        """Hub ids or folders (checkpoint.resolve_folders), loaded strictly."""
        model_dir, codec_dir, tokenizer_dir = resolve_folders(model, codec, tokenizer)
        return cls.from_folders(model_dir, codec_dir, dtype, tokenizer_dir)

    @torch.no_grad()
    def create_voice(
        self,
        audio: np.ndarray | torch.Tensor,
        sample_rate: int,
        ref_text: str,
        seed: int | None = None,
    ) -> Prompt:
        """A mono clip (S,) and its transcript -> the prompt generate() continues."""
        if not ref_text or not ref_text.strip():
            raise MissingTranscriptError(
                "ref_text is required to clone a voice: the transcript of the reference clip"
            )
        generator = _generator(seed)
        clip = torch.as_tensor(np.asarray(audio, dtype=np.float32))[None]
        samples = clip.shape[1] * SAMPLE_RATE / sample_rate  # the official rescales the length
        if sample_rate != SAMPLE_RATE:
            clip = resample(clip, sample_rate, SAMPLE_RATE)
        text = normalize_text(ref_text)
        tokens = torch.tensor(self.tokenizer.encode(text))
        logits = self.aligner.logits(clip)[0]
        frames = math.ceil(samples / SAMPLE_RATE * FRAME_RATE)
        positions, marks = token_alignment(logits, tokens, frames, self.tokenizer.eos_id)
        for _ in range(self.aligner.layerdrop_draws):
            torch.rand([], generator=generator)
        hidden, masks = self.encoder.hidden(clip, marks[None])
        values = self.encoder.token_values(hidden, masks, positions[None], generator)
        return Prompt(values[0], positions, text, round(samples))

    @torch.no_grad()
    def generate(
        self,
        voice: Prompt,
        text: str,
        options: GenerateOptions = DEFAULT_OPTIONS,
        seed: int | None = None,
    ) -> np.ndarray:
        generator = _generator(seed)
        out = generate(self.lm, self.tokenizer, voice, normalize_text(text), options, generator)
        expanded, masks = expand_for_decoder(out.encoded, out.time_before[0])
        trim = leading_silence(out.time_before[0], options.min_trim_frames)
        wav = self.decoder.decode(expanded, masks)[0, 0, trim:]
        return wav.numpy()

    def stream(self, voice: Prompt, text: str, *args: Any, **kwargs: Any) -> Iterator[TadaChunk]:
        """`generate` as TadaChunks (float32 audio at 24 kHz) while it runs; `args` / `kwargs`:
        `request`'s (options, seed, should_stop and StreamKnobs' by name). A chunk holds the
        samples whose CNN lookahead is there (the last one the rest; the first waits until it
        has samples), less the leading silence (the first token's duration, at least
        `options.min_trim_frames`). The last chunk carries stop_reason "end_of_text";
        `should_stop` is asked before every step. The engine with one row on the thread that
        iterates: the chunks a served loop of `self.runner(n)` gives the same request."""
        seq = self.request(voice, text, *args, outbox=InlineOutbox(), **kwargs)
        return run_alone(lambda: BatchEngine(self.runner(1), isolate_failures=False), seq)

    def runner(self, max_batch: int | None = None) -> TadaRunner:
        """The engine's StepModel over this model: up to `max_batch` rows stepped together
        (None: DEFAULT_MAX_BATCH)."""
        return TadaRunner(self, DEFAULT_MAX_BATCH if max_batch is None else max_batch)

    def request(
        self,
        voice: Prompt,
        text: str,
        options: GenerateOptions = DEFAULT_OPTIONS,
        seed: int | None = None,
        *,
        should_stop: Callable[[], bool] | None = None,
        audio: bool = True,
        outbox: Any = None,
        **knobs: Any,
    ) -> TadaSequence:
        """A checked request for the engine (`stream`'s arguments; ValueError on bad input).
        `outbox` None: for a consumer on another thread (a served EngineLoop)."""
        chosen = read_knobs("TADA", StreamKnobs, knobs)
        generator = _generator(seed)
        generation = Generation(
            self.lm, self.tokenizer, voice, normalize_text(text), options, generator
        )
        window = (int(chosen.context), int(chosen.lookahead))
        stop = should_stop or _never
        return TadaSequence(generation, window, chosen.cadence(), stop, audio=audio, outbox=outbox)


def _generator(seed: int | None) -> torch.Generator:
    """A call's own generator, seeded with `seed` (None: a new generator's default seed; TADA
    does not draw one with models/contract.py's resolve_seed yet)."""
    generator = torch.Generator()
    return generator if seed is None else generator.manual_seed(seed)


def _never() -> bool:
    return False
