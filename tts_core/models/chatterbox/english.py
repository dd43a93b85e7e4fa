"""Chatterbox's original English model (`ChatterboxTTS`, tts.py) in our own PyTorch:
`ChatterboxEnglishModel.from_pretrained(folder)`, `create_voice(audio, sr)`,
`generate(text, voice, seed=S, exaggeration=..., sampling=EnglishSampling(cfg_weight=...))`,
`stream(...)` (the one decode engine with one row: `EnglishSequence`), equal to the official
chatterbox-tts 0.1.7 on float32 CPU (tests/chatterbox/test_english_*.py).

generate = punc_norm + EnTokenizer ([SPACE] for spaces, start 255 / stop 0 around) -> T3 (Llama
with CFG, perceiver, exaggeration; english_t3.py) -> drop_invalid_tokens, keep ids < 6561 (no
silence appended, unlike Turbo) -> S3Gen flow with the regular CFM (10 cosine steps, CFG 0.7;
flow.py `meanflow=False`) -> HiFT -> trim fade -> [Perth watermark]. Random draws from one CPU
generator seeded with S in the official order: one multinomial per T3 token, the CFM's
full-length noise, HiFT's phases and noises (spec 9.4). S3Gen, HiFT, the VoiceEncoder, S3
tokenizer and CAMPPlus are Turbo's modules; the English release's files are `t3_cfg`,
`s3gen` (no meanflow time mixer) and `tokenizer.json` (spec 2).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ...audio.analysis import mel_filters
from ...serving.alone import InlineOutbox
from ..contract import SeededStream, resolve_seed
from .checkpoint import CheckpointError, check_unused, load_part
from .chunking import WHOLE_UTTERANCE, StreamChunking
from .config import (
    S3_VOCAB,
    SAMPLE_RATE,
    SIZES_FILE,
    START_SPEECH,
    STOP_SPEECH,
    ChatterboxSizes,
    SizesError,
)
from .english_t3 import (
    COND_POSITIONS,
    MAX_NEW_TOKENS,
    START_TEXT,
    STOP_TEXT,
    TEXT_POSITIONS,
    EnglishSampling,
    LlamaSizes,
    T3English,
)
from .flow import Flow
from .hift import HiFTGenerator
from .model import (
    S3GenSpeech,
    apply_watermark,
    chatterbox_clip,
    knobs_by_name,
    sized_load,
)
from .runner import ChatterboxSequence
from .streaming import S3GenStream, StreamNoise
from .tokenizer import punc_norm
from .voice import ChatterboxVoice

T3_FILE = "t3_cfg.safetensors"
S3GEN_FILE = "s3gen.safetensors"
VE_FILE = "ve.safetensors"
TOKENIZER_FILE = "tokenizer.json"
CONDS_FILE = "conds.pt"
REQUIRED_FILES = (VE_FILE, T3_FILE, S3GEN_FILE, TOKENIZER_FILE)
DOWNLOAD_PATTERNS = (*REQUIRED_FILES, CONDS_FILE, SIZES_FILE)
T3_UNUSED = ("tfmr.embed_tokens.weight", "text_head.weight")
S3GEN_PARTS = ("flow.", "mel2wav.", "tokenizer.", "speaker_encoder.")
# S3Tokenizer.ignore_state_dict_missing: rebuilt from librosa's filters and a Hann window when
# the file lacks them (the official loads s3gen.safetensors non-strict and never reads them).
S3TOK_BUFFERS = ("_mel_filters", "window")
ENC_COND_SECONDS, ENC_COND_TOKENS = 6, 150  # tts.py ENC_COND_LEN, speech_cond_prompt_len
MAX_POSITIONS = COND_POSITIONS + TEXT_POSITIONS + 2 + MAX_NEW_TOKENS
# punc_norm of tts.py: Turbo's replacements plus "...", " - " and ";", in its order.
EN_PUNCTUATION = (
    ("...", ", "),
    ("…", ", "),
    (":", ","),
    (" - ", ", "),
    (";", ", "),
    ("—", "-"),
    ("–", "-"),
    (" ,", ","),
    ("“", '"'),
    ("”", '"'),
    ("‘", "'"),
    ("’", "'"),
)
SPACE, START_TOKEN, STOP_TOKEN = "[SPACE]", "[START]", "[STOP]"


@dataclass(frozen=True)
class EnglishSizes:
    llama: LlamaSizes = field(default_factory=LlamaSizes)
    perceiver_heads: int = 4
    parts: ChatterboxSizes = field(default_factory=ChatterboxSizes)  # VE, S3Gen, front ends

    @classmethod
    def of_folder(cls, folder: Path) -> EnglishSizes:
        """The released sizes, unless the folder holds chatterbox_sizes.json (tiny checkpoints:
        `llama`, `perceiver_heads` and the S3Gen parts as for Turbo)."""
        import json

        path = Path(folder) / SIZES_FILE
        if not path.is_file():
            return cls()
        try:
            data = json.loads(path.read_text())
            llama = LlamaSizes(**data["llama"])
            parts = ChatterboxSizes.from_dict({**data, "t3": {}})  # Turbo's GPT-2 sizes unused
            return cls(llama, int(data["perceiver_heads"]), parts)
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise SizesError(f"{path}: not English-model sizes ({error})") from error


def resolve_folder(name_or_path: str | Path) -> Path:
    from ..checkpoint import resolve_checkpoint

    return resolve_checkpoint(name_or_path, required=REQUIRED_FILES, patterns=DOWNLOAD_PATTERNS)


class EnglishTokenizer:
    """EnTokenizer: `tokenizers` from tokenizer.json, spaces -> [SPACE], no special ids added."""

    def __init__(self, path: Path) -> None:
        from tokenizers import Tokenizer

        try:
            self._tok = Tokenizer.from_file(str(path))
        except Exception as error:  # the library raises its own exception type
            raise CheckpointError(f"{path}: not a tokenizers file ({error})") from error
        vocab = self._tok.get_vocab()
        missing = [t for t in (START_TOKEN, STOP_TOKEN) if t not in vocab]
        if missing:
            raise CheckpointError(f"{path}: the vocabulary lacks {missing}")

    def encode(self, text: str) -> list[int]:
        """Ids of punc_norm(text) (tts.py's), without the start/stop text ids."""
        return self._tok.encode(punc_norm(text, EN_PUNCTUATION).replace(" ", SPACE)).ids


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
    """One English request (`model.request`): text ids, exaggeration and sampling (with
    cfg_weight) besides the shared state (runner.py). T3 is the Llama with classifier-free
    guidance, whose cond and uncond rows (2 rows a request; 1 with cfg_weight 0) take one
    `T3English.draws` call per step, the request's own, with its own generator drawing in the
    official order; at most max_new_tokens draws, STOP ends it at any draw; drop_invalid_tokens'
    rule (S3Gen starts over after the first start id); no silence appended for the final pass,
    and none at all when no speech token was drawn. S3Gen is the 10-step CFM with CFG, per row
    (padded_s3gen.py solves the meanflow CFM only). So a request's chunks are `model.stream`'s
    bit for bit alone and in any batch (tests/chatterbox/test_english_batching.py)."""

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
    ) -> None:
        super().__init__(
            model, voice, seed, chunking, max_new_tokens, int(max_new_tokens), should_stop, outbox
        )
        self.text_ids = model.text_ids(text)  # (1, Lt); ValueError past T3's text positions
        self.exaggeration, self.sampling = float(exaggeration), sampling or EnglishSampling()
        self.restarted = False  # a start id was drawn: S3Gen started over
        # T3's prompt: cond, text, start + bos (T3English.prompt), then one position a draw
        positions = COND_POSITIONS + self.text_ids.shape[1] + 2 + self.limit
        if positions > model.t3.rope.cos.shape[0]:
            raise ValueError(
                f"text too long: {positions} T3 positions > the model's "
                f"{model.t3.rope.cos.shape[0]}"
            )

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
    sample_rate = SAMPLE_RATE
    request_type = EnglishSequence

    def __init__(self, folder: Path, sizes: EnglishSizes, device: str = "cpu") -> None:
        parts = sizes.parts
        s3gen = folder / S3GEN_FILE
        self.folder, self.sizes, self.device = folder, sizes, torch.device(device)
        t3 = T3English(sizes.llama, sizes.perceiver_heads, MAX_POSITIONS)
        self.t3 = load_part(t3, folder / T3_FILE, dropped=T3_UNUSED).to(device)
        check_unused(s3gen, S3GEN_PARTS)
        flow = Flow(parts.encoder, parts.decoder, parts.campplus.embedding_size, meanflow=False)
        self.flow = load_part(flow, s3gen, "flow.").to(device)
        self.hift = load_part(
            HiFTGenerator(parts.hift), s3gen, "mel2wav.", after=HiFTGenerator.fold_weight_norm
        ).to(device)
        self.tokenizer = EnglishTokenizer(folder / TOKENIZER_FILE)
        conds = folder / CONDS_FILE
        self.builtin_voice = (
            ChatterboxVoice.from_conds(conds).to(device) if conds.is_file() else None
        )
        self._frontend = None

    @classmethod
    def from_pretrained(
        cls, name_or_path: str | Path, device: str = "cpu", dtype: torch.dtype = torch.float32
    ) -> ChatterboxEnglishModel:
        if dtype not in (None, torch.float32):
            raise ValueError(f"Chatterbox English runs in float32 only (got dtype={dtype})")
        folder = resolve_folder(name_or_path)
        return sized_load(folder, lambda: cls(folder, EnglishSizes.of_folder(folder), device))

    def _front_end(self):
        if self._frontend is None:
            from .campplus import CAMPPlus
            from .voice_encoder import VoiceEncoder

            parts, s3gen, device = self.sizes.parts, self.folder / S3GEN_FILE, self.device
            self._frontend = (
                load_part(VoiceEncoder(parts.ve_hidden), self.folder / VE_FILE).to(device),
                self._s3_tokenizer(s3gen).to(device),
                load_part(CAMPPlus(parts.campplus), s3gen, "speaker_encoder.").to(device),
            )
        return self._frontend

    def _s3_tokenizer(self, s3gen: Path):
        """The S3 tokenizer; its mel filters and window from the file if there, else rebuilt as
        the official builds them (librosa mel 16 kHz / 400 / 128, float32; hann_window(400))."""
        from ..checkpoint import load_safetensors
        from .s3_tokenizer import N_FFT, N_MELS, S3Tokenizer

        module = S3Tokenizer(self.sizes.parts.s3tok)
        with load_safetensors(s3gen) as file:
            has_buffers = all(f"tokenizer.{name}" in file.shapes for name in S3TOK_BUFFERS)
        if has_buffers:
            return load_part(module, s3gen, "tokenizer.")
        load_part(module.encoder, s3gen, "tokenizer.encoder.")
        load_part(module.quantizer, s3gen, "tokenizer.quantizer.")
        module._mel_filters.copy_(torch.from_numpy(mel_filters(16000, N_FFT, N_MELS)))
        module.window.copy_(torch.hann_window(N_FFT))
        return module.eval()

    def create_voice(
        self, audio: np.ndarray | str | Path, sr: int | None = None, ref_text: str | None = None
    ) -> ChatterboxVoice:
        """A voice from a reference clip (samples at `sr`, or a path to an audio file):
        tts.py's prepare_conditionals (no loudness step, no length check; T3 prompt: S3 tokens
        of the first 6 s, <= 150). No random draws. `ref_text` is accepted and not used."""
        from .cloning import make_voice

        audio, sr = chatterbox_clip(audio, sr, ref_text)
        if audio.size == 0:
            raise ValueError("the reference clip is empty")
        ve, tokenizer, campplus = self._front_end()
        return make_voice(
            audio,
            int(sr),
            ve,
            tokenizer,
            campplus,
            self.device,
            turbo=False,
            t3_prompt_seconds=ENC_COND_SECONDS,
            t3_prompt_tokens=ENC_COND_TOKENS,
        )

    def text_ids(self, text: str) -> torch.Tensor:
        """(1, Lt): start 255, the tokenizer's ids, stop 0; ValueError past the 2050 positions."""
        ids = [START_TEXT, *self.tokenizer.encode(text), STOP_TEXT]
        if len(ids) > TEXT_POSITIONS:
            raise ValueError(f"text too long for T3: {len(ids)} text tokens > {TEXT_POSITIONS}")
        return torch.tensor([ids], dtype=torch.long, device=self.device)

    def _t3_inputs(self, text: str, voice: ChatterboxVoice, exaggeration: float):
        cond = self.t3.conditioning(voice.speaker_emb, voice.t3_prompt_tokens, float(exaggeration))
        return cond, self.text_ids(text)

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
        """Whole clip for `text`, the official's output for torch.manual_seed(seed).
        `stream_noise`: S3Gen and HiFT take `stream`'s pre-drawn noise instead (the same
        tokens): the whole-utterance clip that `stream` approximates chunk by chunk. seed None:
        a random one (`result.seed`); `knobs`: EnglishSampling's fields by name."""
        sampling, _ = knobs_by_name(
            "Chatterbox English", sampling or EnglishSampling(), knobs, streamed=False
        )
        voice, seed = self.resolve_voice(voice), resolve_seed(seed)
        generator = torch.Generator().manual_seed(seed)
        cond, ids = self._t3_inputs(text, voice, exaggeration)
        out = self.t3.generate(cond, ids, sampling, generator, max_new_tokens)
        tokens = spoken_tokens(out.draws)
        if len(tokens) == 0:  # nothing to speak (the official would fail in S3Gen)
            audio = np.zeros(0, dtype=np.float32)
        elif stream_noise:
            noise = StreamNoise.for_voice(seed, voice, max_new_tokens)  # no silence appended
            s3gen = S3GenStream(self.flow, self.hift, voice, noise, WHOLE_UTTERANCE)
            audio = s3gen.push(tokens[None], final=True).cpu().numpy()
        else:
            mel = self.tokens_to_mel(tokens[None], voice, generator)
            audio = self.vocode(mel, generator)[0].cpu().numpy()
        if watermark and audio.size:
            audio = apply_watermark(audio)
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
        """Audio chunks while T3 draws (unwatermarked), as Turbo's `stream` (streaming.py):
        T3's tokens are generate's; S3Gen re-runs over prompt + tokens so far with noise
        pre-drawn by position and its regular CFM, so the clip approximates the whole pass
        (not bit-equal: the official draws its noise after T3 ends). The final chunk is always
        yielded, last; no silence tokens are appended (the English generate appends none).
        The served path: the one engine (runner.py's ChatterboxRunner, this model's request an
        EnglishSequence) with this request as its only row, stepped on the caller's thread
        (`run_alone`); the request is checked here (ValueError), before the first chunk.
        seed None: a random one (`.seed` of the returned stream); `knobs` by name:
        EnglishSampling's fields and first_chunk_tokens / chunk_tokens."""
        sampling, chunking = knobs_by_name(
            "Chatterbox English", sampling or EnglishSampling(), knobs, chunking
        )
        seed = resolve_seed(seed)
        seq = self.request(
            text,
            voice,
            seed,
            exaggeration,
            sampling,
            max_new_tokens,
            chunking,
            outbox=InlineOutbox(),
        )
        return SeededStream(self.run_alone(seq), seed)
