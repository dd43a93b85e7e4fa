"""Chatterbox's original English model (`ChatterboxTTS`, tts.py) in our own PyTorch, equal to
the official chatterbox-tts 0.1.7 on float32 CPU (tests/chatterbox/test_english_*.py); what it
shares with Turbo is model.py's `S3GenSpeech`.

generate = punc_norm + EnTokenizer ([SPACE] for spaces, start 255 / stop 0 around) -> T3 (Llama
with CFG, perceiver, exaggeration; english_t3.py) -> drop_invalid_tokens, keep ids < 6561 (no
silence appended) -> S3Gen flow with the regular CFM (10 cosine steps, CFG 0.7) -> HiFT -> trim
fade -> [Perth watermark]. Random draws from one CPU generator seeded with S in the official
order: one multinomial per T3 token, the CFM's full-length noise, HiFT's (spec 9.4).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ...audio.analysis import mel_filters
from ..contract import SeededStream, resolve_seed
from .checkpoint import CONDS_FILE, VE_FILE, check_unused, load_part
from .chunking import StreamChunking
from .config import (
    S3_VOCAB,
    SAMPLE_RATE,
    SIZES_FILE,
    START_SPEECH,
    STOP_SPEECH,
    ChatterboxSizes,
    SizesError,
    sizes_file,
)
from .english_t3 import (
    COND_POSITIONS,
    MAX_NEW_TOKENS,
    START_TEXT,
    STOP_TEXT,
    TEXT_POSITIONS,
    LlamaSizes,
    T3English,
)
from .knobs import EnglishKnobs
from .model import S3GenSpeech
from .runner import ChatterboxSequence
from .sampling import EnglishSampling
from .tokenizer import EnglishTokenizer
from .voice import ChatterboxVoice

T3_FILE = "t3_cfg.safetensors"
S3GEN_FILE = "s3gen.safetensors"
TOKENIZER_FILE = "tokenizer.json"
REQUIRED_FILES = (VE_FILE, T3_FILE, S3GEN_FILE, TOKENIZER_FILE)
DOWNLOAD_PATTERNS = (*REQUIRED_FILES, CONDS_FILE, SIZES_FILE)
T3_UNUSED = ("tfmr.embed_tokens.weight", "text_head.weight")
S3GEN_PARTS = ("flow.", "mel2wav.", "tokenizer.", "speaker_encoder.")
# S3Tokenizer.ignore_state_dict_missing: rebuilt from librosa's filters and a Hann window when
# the file lacks them (the official loads s3gen.safetensors non-strict and never reads them).
S3TOK_BUFFERS = ("_mel_filters", "window")
MAX_POSITIONS = COND_POSITIONS + TEXT_POSITIONS + 2 + MAX_NEW_TOKENS


@dataclass(frozen=True)
class EnglishSizes:
    llama: LlamaSizes = field(default_factory=LlamaSizes)
    perceiver_heads: int = 4
    parts: ChatterboxSizes = field(default_factory=ChatterboxSizes)  # VE, S3Gen, front ends

    @classmethod
    def of_folder(cls, folder: Path) -> EnglishSizes:
        """The released sizes, unless the folder holds chatterbox_sizes.json (tiny checkpoints:
        `llama`, `perceiver_heads` and the S3Gen parts as for Turbo)."""
        data = sizes_file(folder)
        if data is None:
            return cls()
        try:
            llama = LlamaSizes(**data["llama"])
            parts = ChatterboxSizes.from_dict({**data, "t3": {}})  # Turbo's GPT-2 sizes unused
            return cls(llama, int(data["perceiver_heads"]), parts)
        except (ValueError, KeyError, TypeError) as error:
            path = Path(folder) / SIZES_FILE
            raise SizesError(f"{path}: not English-model sizes ({error})") from error


@dataclass
class EnglishResult:
    audio: np.ndarray  # (S,) float32 at 24 kHz
    tokens: torch.Tensor  # (N,) the speech tokens S3Gen spoke (ids < 6561)
    draws: torch.Tensor  # (M,) every T3 draw (STOP included when drawn)
    stop_reason: str = "eos"  # or "max_tokens"
    sample_rate: int = SAMPLE_RATE
    seed: int | None = None  # the seed used: passed back, the same audio (models/contract.py)


def spoken_tokens(draws: torch.Tensor) -> torch.Tensor:
    """drop_invalid_tokens (after the first start id, before the first stop id), then the
    ids < 6561 (tts.py)."""
    start = (draws == START_SPEECH).nonzero()
    stop = (draws == STOP_SPEECH).nonzero()
    first = int(start[0]) + 1 if len(start) else 0
    last = int(stop[0]) if len(stop) else len(draws)
    kept = draws[first:last]
    return kept[kept < S3_VOCAB]


class EnglishSequence(ChatterboxSequence):
    """One English request (`model.request`): its cond and uncond T3 rows (1 with cfg_weight 0)
    in one `T3English.draws` call a step; at most max_new_tokens draws, STOP ends it at any;
    S3Gen starts over after the first start id (drop_invalid_tokens); no silence appended, no
    final pass without a speech token. S3Gen runs per row (its CFG solve is never padded)."""

    def __init__(
        self,
        model: ChatterboxEnglishModel,
        text: str,
        voice: ChatterboxVoice | None = None,
        seed: int = 0,
        exaggeration: float = 0.5,
        sampling: EnglishSampling | None = None,
        max_new_tokens: int = MAX_NEW_TOKENS,
        chunking: StreamChunking | None = None,
        should_stop: Callable[[], bool] | None = None,
        *,
        outbox: Any = None,
        **knobs: Any,
    ) -> None:
        super().__init__(
            model, voice, seed, sampling, max_new_tokens, chunking, should_stop, outbox, knobs
        )
        self.text_ids = model.text_ids(text)  # (1, Lt); ValueError past T3's text positions
        self.exaggeration = float(exaggeration)
        self.restarted = False  # a start id was drawn: S3Gen started over
        # T3's prompt: cond, text, start + bos (T3English.prompt), then one position a draw
        positions = COND_POSITIONS + self.text_ids.shape[1] + 2 + self.limit
        self.fits(positions, model.t3.rope.cos.shape[0])

    def open_draws(self, generator: torch.Generator) -> Iterator[torch.Tensor]:
        voice, t3 = self.voice, self.model.t3
        cond = t3.conditioning(voice.speaker_emb, voice.t3_prompt_tokens, self.exaggeration)
        return t3.draws(cond, self.text_ids, self.sampling, generator, self.max_new_tokens)

    def take(self, token: int) -> None:
        if token == START_SPEECH and not self.restarted:
            # drop_invalid_tokens keeps what follows the first start id: S3Gen starts over
            # (audio already handed out stays: a random-weights edge case)
            self.speech, self.restarted, self.due = [], True, self.chunking.first_tokens
            self.start_s3gen()
        else:
            super().take(token)

    def final_tokens(self) -> torch.Tensor | None:
        return self.speech_tokens() if self.speech else None


class ChatterboxEnglishModel(S3GenSpeech):
    name, sampling_type, stream_knobs = "Chatterbox English", EnglishSampling, EnglishKnobs
    request_type = EnglishSequence
    required_files, download_patterns = REQUIRED_FILES, DOWNLOAD_PATTERNS
    sizes_type, s3gen_file, meanflow = EnglishSizes, S3GEN_FILE, False
    # tts.py's prepare_conditionals: no loudness step, no length check; T3 prompt: S3 tokens
    # of the first 6 s (ENC_COND_LEN), <= 150 (speech_cond_prompt_len)
    cloning = {"turbo": False, "t3_prompt_seconds": 6, "t3_prompt_tokens": 150}

    def __init__(self, folder: Path, sizes: EnglishSizes, device: str = "cpu") -> None:
        self.folder, self.sizes, self.device = folder, sizes, torch.device(device)
        t3 = T3English(sizes.llama, sizes.perceiver_heads, MAX_POSITIONS)
        self.t3 = load_part(t3, folder / T3_FILE, dropped=T3_UNUSED).to(device)
        check_unused(folder / S3GEN_FILE, S3GEN_PARTS)
        self.tokenizer = EnglishTokenizer(folder / TOKENIZER_FILE)
        self.load_s3gen(sizes.parts)

    def _s3_tokenizer(self, s3gen: Path) -> torch.nn.Module:
        """The S3 tokenizer; its mel filters and window from the file if there, else rebuilt as
        the official builds them (librosa mel 16 kHz / 400 / 128, float32; hann_window(400))."""
        from ..checkpoint import load_safetensors
        from .s3_tokenizer import N_FFT, N_MELS, S3Tokenizer

        module = S3Tokenizer(self.parts.s3tok)
        with load_safetensors(s3gen) as file:
            has_buffers = all(f"tokenizer.{name}" in file.shapes for name in S3TOK_BUFFERS)
        if has_buffers:
            return load_part(module, s3gen, "tokenizer.")
        load_part(module.encoder, s3gen, "tokenizer.encoder.")
        load_part(module.quantizer, s3gen, "tokenizer.quantizer.")
        module._mel_filters.copy_(torch.from_numpy(mel_filters(16000, N_FFT, N_MELS)))
        module.window.copy_(torch.hann_window(N_FFT))
        return module.eval()

    def text_ids(self, text: str) -> torch.Tensor:
        """(1, Lt): start 255, the tokenizer's ids, stop 0; ValueError past the 2050 positions."""
        ids = [START_TEXT, *self.tokenizer.encode(text), STOP_TEXT]
        if len(ids) > TEXT_POSITIONS:
            raise ValueError(f"text too long for T3: {len(ids)} text tokens > {TEXT_POSITIONS}")
        return torch.tensor([ids], dtype=torch.long, device=self.device)

    @torch.inference_mode()
    def generate(
        self,
        text: str,
        voice: ChatterboxVoice | None = None,
        seed: int | None = None,
        exaggeration: float = 0.5,
        sampling: EnglishSampling | None = None,
        watermark: bool = False,
        max_new_tokens: int = MAX_NEW_TOKENS,
        stream_noise: bool = False,
        **knobs: Any,
    ) -> EnglishResult:
        """Whole clip for `text`, the official's output for torch.manual_seed(seed) (`speak`).
        seed None: a random one (`result.seed`); `knobs`: EnglishSampling's fields by name."""
        sampling, _ = self.with_knobs(sampling, None, knobs, streamed=False)
        voice, seed = self.resolve_voice(voice), resolve_seed(seed)
        generator = torch.Generator().manual_seed(seed)
        cond = self.t3.conditioning(voice.speaker_emb, voice.t3_prompt_tokens, float(exaggeration))
        out = self.t3.generate(cond, self.text_ids(text), sampling, generator, max_new_tokens)
        tokens = spoken_tokens(out.draws)
        # no silence appended: the noise covers max_new_tokens
        audio = self.speak(
            tokens[None], voice, seed, generator, max_new_tokens, stream_noise, watermark
        )
        return EnglishResult(audio, tokens, out.draws, out.stop_reason, seed=seed)

    def stream(
        self,
        text: str,
        voice: ChatterboxVoice | None = None,
        seed: int | None = None,
        exaggeration: float = 0.5,
        sampling: EnglishSampling | None = None,
        max_new_tokens: int = MAX_NEW_TOKENS,
        chunking: StreamChunking | None = None,
        **knobs: Any,
    ) -> SeededStream:
        """Audio chunks while T3 draws (unwatermarked), as Turbo's `stream` (its regular CFM, no
        silence appended). `knobs` by name: EnglishSampling's fields and first_chunk_tokens /
        chunk_tokens."""
        args = (exaggeration, sampling, max_new_tokens, chunking)  # EnglishSequence's order
        return self.stream_alone(text, voice, seed, *args, **knobs)
