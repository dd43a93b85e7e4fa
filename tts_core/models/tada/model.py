"""TADA end to end on our modules: load the released folders, clone a voice from a clip and its
transcript, generate speech (the official generate(), not streamed yet).

    model = TadaModel.from_folders(model_dir, codec_dir)
    voice = model.create_voice(audio, sample_rate, ref_text, seed=11)
    audio = model.generate(voice, "Text to speak.", seed=15)  # float32 (S,) at 24 kHz

The transcript is required (upstream runs a 1.1B English ASR model without one). Random numbers
come from a torch.Generator seeded per call, drawn in the official order (create_voice: the
aligner's LayerDrop draws, then the encoder's noise; generate: see generate.py), so a call
equals the official one after torch.manual_seed(seed).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..chatterbox.features import resample
from .alignment import token_alignment
from .checkpoint import load_aligner, load_decoder, load_encoder, load_lm, resolve_folders
from .generate import (
    DEFAULT_OPTIONS,
    FRAME_RATE,
    SAMPLE_RATE,
    GenerateOptions,
    Prompt,
    expand_for_decoder,
    generate,  # fmt: skip
    generate_steps,
    leading_silence,
)
from .text import normalize_text
from .tokenizer import TadaTokenizer


class MissingTranscriptError(ValueError):
    """Cloning without `ref_text`."""


@dataclass
class TadaModel:
    tokenizer: TadaTokenizer
    lm: torch.nn.Module
    decoder: torch.nn.Module
    encoder: torch.nn.Module
    aligner: torch.nn.Module

    @classmethod
    def from_folders(cls, model: str | Path, codec: str | Path,
                     dtype: torch.dtype = torch.float32) -> TadaModel:  # fmt: skip
        """`model`: a HumeAI/tada-1b-like folder (config.json, model.safetensors, tokenizer.json);
        `codec`: a HumeAI/tada-codec-like folder (encoder/, decoder/, aligner/)."""
        model, codec = Path(model), Path(codec)
        tokenizer = TadaTokenizer.from_folder(model)
        return cls(tokenizer, load_lm(model, dtype), load_decoder(codec, dtype),
                   load_encoder(codec, dtype), load_aligner(codec, tokenizer.vocab_size, dtype))  # fmt: skip

    @classmethod
    def from_pretrained(cls, model: str | Path = "HumeAI/tada-1b",
                        codec: str | Path = "HumeAI/tada-codec",
                        tokenizer: str | Path | None = None,
                        dtype: torch.dtype = torch.float32) -> TadaModel:  # fmt: skip
        """Hub ids or folders (checkpoint.resolve_folders), loaded strictly."""
        model_dir, codec_dir, tokenizer_dir = resolve_folders(model, codec, tokenizer)
        tokens = TadaTokenizer.from_folder(tokenizer_dir)
        return cls(tokens, load_lm(model_dir, dtype), load_decoder(codec_dir, dtype),
                   load_encoder(codec_dir, dtype), load_aligner(codec_dir, tokens.vocab_size, dtype))  # fmt: skip

    @torch.no_grad()
    def create_voice(self, audio: np.ndarray | torch.Tensor, sample_rate: int, ref_text: str,
                     seed: int | None = None) -> Prompt:  # fmt: skip
        """A mono clip (S,) and its transcript -> the prompt generate() continues."""
        if not ref_text or not ref_text.strip():
            raise MissingTranscriptError("ref_text is required to clone a voice: the transcript "
                                         "of the reference clip")  # fmt: skip
        generator = torch.Generator()
        if seed is not None:
            generator.manual_seed(seed)
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
    def generate(self, voice: Prompt, text: str, options: GenerateOptions = DEFAULT_OPTIONS,
                 seed: int | None = None) -> np.ndarray:  # fmt: skip
        generator = torch.Generator()
        if seed is not None:
            generator.manual_seed(seed)
        out = generate(self.lm, self.tokenizer, voice, normalize_text(text), options, generator)
        expanded, masks = expand_for_decoder(out.encoded, out.time_before[0])
        wav = self.decoder.decode(expanded, masks)[0, 0, leading_silence(out.time_before[0]) :]
        return wav.numpy()

    def stream(self, voice: Prompt, text: str, options: GenerateOptions = DEFAULT_OPTIONS,
               seed: int | None = None, context: int = 20, lookahead: int = 15):  # fmt: skip
        """`generate` as audio chunks (float32 numpy, 24 kHz) while it runs: each step's token
        block goes through the KV-cached decoder transformer and the windowed CNN
        (streaming.StreamingDecoder: `context` / `lookahead` frames); the official leading
        silence (the first token's duration) is dropped from the first samples."""
        from .streaming import SAMPLES_PER_FRAME, StreamingDecoder

        generator = torch.Generator()
        if seed is not None:
            generator.manual_seed(seed)
        decoder = StreamingDecoder(self.decoder, context, lookahead)
        state, trim, last = decoder.start(), None, 0
        with torch.no_grad():
            steps = generate_steps(self.lm, self.tokenizer, voice, normalize_text(text), options,
                                   generator)  # fmt: skip
            for frame in steps:
                if frame.index < frame.decode_from:
                    continue
                if trim is None:
                    trim = frame.before * SAMPLES_PER_FRAME
                decoder.push_token(state, frame.vector, frame.before)
                last = frame.before
                chunk, trim = _trimmed(decoder.emit(state), trim)
                if chunk.numel():
                    yield chunk.numpy()
            chunk, trim = _trimmed(decoder.finish(state, last), trim or 0)
            if chunk.numel():
                yield chunk.numpy()


def _trimmed(chunk: torch.Tensor, trim: int) -> tuple[torch.Tensor, int]:
    """Drop up to `trim` leading samples; return the rest and what is left to drop."""
    cut = min(trim, chunk.shape[0])
    return chunk[cut:], trim - cut
