"""Chatterbox Turbo in our own PyTorch: `ChatterboxTurboModel.from_pretrained(folder)`,
`create_voice(audio, sr)`, `generate(text, voice, seed=S, watermark=False)`, equal to the
official chatterbox-tts 0.1.7 `ChatterboxTurboTTS` on float32 CPU (tests/chatterbox).

generate = T3 (text + voice -> S3 tokens) -> drop ids >= 6561, append 3 silence tokens ->
S3Gen flow (tokens -> mel) -> HiFT (mel -> 24 kHz) -> trim fade -> [Perth watermark]. Every
random draw comes from one CPU `torch.Generator` seeded with S, in the official order
(spec chatterbox.md 9.4), so a seed gives the official's output for `torch.manual_seed(S)`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import torch

from ...serving.alone import InlineOutbox, run_alone
from ...serving.batch import BatchEngine
from ..checkpoint import CheckpointError
from ..contract import SeededStream, reference_audio, refuse_unknown, resolve_seed
from .checkpoint import (
    CONDS_FILE,
    S3GEN_FILE,
    T3_UNUSED,
    VE_FILE,
    load_part,
    resolve_folder,
)
from .chunking import WHOLE_UTTERANCE, StreamChunking
from .cloning import make_voice
from .config import (
    DEFAULT_MAX_BATCH,
    S3_VOCAB,
    SAMPLE_RATE,
    SILENCE_TOKEN,
    SIZES_FILE,
    STOP_SPEECH,
    ChatterboxSizes,
    t3_file,
)
from .flow import Flow
from .hift import HiFTGenerator, trim_fade
from .runner import ChatterboxChunk, ChatterboxRunner, ChatterboxSequence
from .sampling import TurboSampling
from .streaming import S3GenStream, StreamNoise
from .t3 import MAX_NEW_TOKENS, T3Turbo, TurboRow
from .tokenizer import TurboTokenizer
from .voice import ChatterboxVoice

SILENCE_TOKENS = 3  # S3Gen's input: T3's speech tokens, then 3 silence tokens (Turbo)


@dataclass
class TurboResult:
    audio: np.ndarray  # (S,) float32 at 24 kHz
    tokens: torch.Tensor  # (N,) T3 tokens as drawn (EOS dropped)
    stop_reason: str = "eos"  # or "max_tokens"
    sample_rate: int = SAMPLE_RATE
    seed: int | None = None  # the seed used: passed back, the same audio (models/contract.py)


CHUNK_KNOBS = {"first_chunk_tokens": "first_tokens", "chunk_tokens": "chunk_tokens"}
Sampling = TypeVar("Sampling")


def knobs_by_name(
    model: str,
    sampling: Sampling,
    knobs: dict[str, Any],
    chunking: StreamChunking | None = None,
    streamed: bool = True,
) -> tuple[Sampling, StreamChunking | None]:
    """`sampling` (a TurboSampling / EnglishSampling) and `chunking` with the knobs given by
    name (`temperature=0.7`, `first_chunk_tokens=8`, ...) set on them: each checked against its
    declaration in engine/knobs.py where it has one (a ValueError naming it); a name the model
    does not read is a TypeError listing those it does."""
    from ...engine.knobs import SAMPLING_KNOBS

    own = [field.name for field in fields(sampling)]
    chunk_names = list(CHUNK_KNOBS) if streamed else []
    refuse_unknown(model, knobs, [*own, *chunk_names])
    checked = {
        name: SAMPLING_KNOBS[name].parse(value) if name in SAMPLING_KNOBS else value
        for name, value in knobs.items()
    }
    sampling = replace(sampling, **{n: v for n, v in checked.items() if n in own})
    cuts = {CHUNK_KNOBS[n]: int(v) for n, v in checked.items() if n in CHUNK_KNOBS}
    if cuts:
        chunking = replace(chunking or StreamChunking(), **cuts)
    return sampling, chunking


def sized_load(folder: Path, build: Callable[[], Any]) -> Any:
    """`build()`, whose weights mismatch the release's sizes, says so and names the file of
    other sizes (chatterbox_sizes.json) where the folder has none."""
    try:
        return build()
    except CheckpointError as exc:
        if (Path(folder) / SIZES_FILE).is_file():
            raise
        raise CheckpointError(
            f"{exc}\n{folder} has no {SIZES_FILE}, so the released model's sizes were assumed; "
            f"a checkpoint of other sizes loads with its {SIZES_FILE} beside the weights (the "
            f"sizes of each part: tools/oracle writes one for the tiny checkpoints)"
        ) from exc


def chatterbox_clip(audio: Any, sr: int | None, ref_text: str | None) -> tuple[np.ndarray, int]:
    """create_voice's clip as float32 samples and rate. Both Chatterbox models clone from the
    clip alone (their backends declare reads_transcript False): a transcript is accepted and
    not used, as the served models ignore it."""
    del ref_text  # not used: Chatterbox clones from the audio alone
    clip, rate = reference_audio(audio, sr)
    return np.asarray(clip, dtype=np.float32), rate


class S3GenSpeech:
    """What both Chatterbox models share (`self.flow`, `self.hift`, `self.device`, their voice):
    S3 tokens to mel, mel to waveform; the engine's runner and request (runner.py), and a
    request stepped alone on the caller's thread (`stream`'s path)."""

    device: torch.device | str
    flow: Flow
    hift: HiFTGenerator
    folder: Path
    builtin_voice: ChatterboxVoice | None
    request_type: type[ChatterboxSequence]  # the model's request (TurboSequence, EnglishSequence)

    def resolve_voice(self, voice: ChatterboxVoice | None) -> ChatterboxVoice:
        """`voice` on this model's device; None: the checkpoint's built-in voice (conds.pt)."""
        if voice is not None:
            return voice.to(self.device)
        if self.builtin_voice is None:
            raise ValueError(f"{self.folder} has no {CONDS_FILE}: pass a voice (create_voice)")
        return self.builtin_voice

    def runner(self, max_batch: int = DEFAULT_MAX_BATCH, s3gen_batching: str = "auto"):
        """The engine's StepModel for this model's requests; served as
        `EngineLoop(model.runner(n), make_request=model.request)`."""
        return ChatterboxRunner(self, max_batch, s3gen_batching)

    def request(self, *args: Any, **kwargs: Any) -> ChatterboxSequence:
        """A checked request (ValueError when it cannot run) of `stream`'s arguments (no knobs
        by name, seed an int) plus `should_stop` and `outbox` (serving/sequence.py's)."""
        return self.request_type(self, *args, **kwargs)

    def run_alone(self, request: ChatterboxSequence) -> Iterator[ChatterboxChunk]:
        """`request` (made with outbox=InlineOutbox()) stepped by a private one-row engine on the
        thread that iterates: `stream`'s chunks."""
        return run_alone(lambda: BatchEngine(self.runner(1), isolate_failures=False), request)

    @torch.inference_mode()
    def tokens_to_mel(
        self, speech: torch.Tensor, voice: ChatterboxVoice, generator
    ) -> torch.Tensor:
        """(1, T) S3 tokens -> (1, 80, 2T) mel (the flow: Turbo's meanflow makes 2 random draws,
        the English model's CFM 1)."""
        return self.flow.inference(
            speech, voice.prompt_token, voice.prompt_feat, voice.embedding, generator
        )

    @torch.inference_mode()
    def vocode(self, mel: torch.Tensor, generator) -> torch.Tensor:
        """(1, 80, T) mel -> (1, 480 T) waveform with the trim fade (HiFT; 3 random draws)."""
        wav = self.hift.inference(mel, generator)
        fade = trim_fade(wav.device)
        wav[:, : len(fade)] *= fade
        return wav


class TurboSequence(ChatterboxSequence):
    """One Turbo request (`model.request`): text ids and sampling besides the shared state
    (runner.py); up to max_new_tokens + 1 draws, STOP ends it from the second draw on, 3
    silence tokens appended for the final pass."""

    def __init__(
        self,
        model: ChatterboxTurboModel,
        text: str,
        voice: ChatterboxVoice | None = None,
        seed: int = 0,
        sampling: TurboSampling | None = None,
        max_new_tokens: int = MAX_NEW_TOKENS,
        chunking: StreamChunking | None = None,
        should_stop: Callable[[], bool] | None = None,
        *,
        outbox: Any = None,
    ) -> None:
        super().__init__(
            model,
            voice,
            seed,
            chunking,
            max_new_tokens,
            int(max_new_tokens) + 1,
            should_stop,
            outbox,
        )
        self.noise_tokens = self.limit + SILENCE_TOKENS
        self.text_ids = model.text_ids(text)
        self.sampling = sampling or TurboSampling()
        positions = 2 + self.voice.t3_prompt_tokens.shape[1] + self.text_ids.shape[1] + self.limit
        if positions > model.t3.tfmr.wpe.weight.shape[0]:
            raise ValueError(
                f"text too long: {positions} T3 positions > the model's "
                f"{model.t3.tfmr.wpe.weight.shape[0]}"
            )

    def open_draws(self, generator: torch.Generator) -> Iterator[torch.Tensor]:
        voice, self.t3_row = self.voice, TurboRow()
        return self.model.t3.draws(
            voice.speaker_emb,
            voice.t3_prompt_tokens,
            self.text_ids,
            self.sampling,
            generator,
            self.max_new_tokens,
            row=self.t3_row,
        )

    def stops(self, token: int) -> bool:
        # the official checks STOP inside its step loop only: a first-draw STOP is fed back
        return token == STOP_SPEECH and self.frames > 0

    def final_tokens(self) -> torch.Tensor:
        return torch.cat([self.speech_tokens(), silence(self.model.device)[None]], dim=1)


def silence(device: torch.device | str) -> torch.Tensor:
    """The silence tokens S3Gen appends after T3's tokens: (3,)."""
    return torch.full((SILENCE_TOKENS,), SILENCE_TOKEN, dtype=torch.long, device=device)


class ChatterboxTurboModel(S3GenSpeech):
    sample_rate = SAMPLE_RATE
    request_type = TurboSequence

    def __init__(self, folder: Path, sizes: ChatterboxSizes, device: str = "cpu") -> None:
        s3gen = folder / S3GEN_FILE
        self.folder, self.sizes, self.device = folder, sizes, torch.device(device)
        t3_weights = folder / t3_file(folder)  # Turbo's, or Nano's (GPT-2 small)
        self.t3 = load_part(T3Turbo(sizes.t3), t3_weights, dropped=T3_UNUSED).to(device)
        spk_dim = sizes.campplus.embedding_size
        self.flow = load_part(Flow(sizes.encoder, sizes.decoder, spk_dim), s3gen, "flow.").to(
            device
        )
        self.hift = load_part(
            HiFTGenerator(sizes.hift), s3gen, "mel2wav.", after=HiFTGenerator.fold_weight_norm
        ).to(device)
        self.tokenizer = TurboTokenizer(folder)
        conds = folder / CONDS_FILE
        self.builtin_voice = (
            ChatterboxVoice.from_conds(conds).to(device) if conds.is_file() else None
        )
        self._frontend = None  # VoiceEncoder, S3 tokenizer, CAMPPlus: loaded on first clone

    @classmethod
    def from_pretrained(
        cls,
        name_or_path: str | Path,
        device: str = "cpu",
        dtype: torch.dtype = torch.float32,
        quantize: str | None = None,
    ) -> ChatterboxTurboModel:
        """A local folder or Hub repo id in the released layout; float32 only (the parity
        target; no other dtype is implemented yet). `quantize` ("none", "int8", "auto"; as
        Qwen3-TTS's): T3's GPT-2 blocks on the 8-bit CPU path (quant.py)."""
        if dtype not in (None, torch.float32):
            raise ValueError(f"Chatterbox Turbo runs in float32 only (got dtype={dtype})")
        folder = resolve_folder(name_or_path)
        model = sized_load(folder, lambda: cls(folder, ChatterboxSizes.of_folder(folder), device))
        from .quant import quantize_turbo

        quantize_turbo(model, quantize)
        return model

    def _front_end(self):
        """VoiceEncoder, S3 tokenizer and CAMPPlus: built on the first cloned voice (a conds.pt
        voice never needs them)."""
        if self._frontend is None:
            from .campplus import CAMPPlus
            from .s3_tokenizer import S3Tokenizer
            from .voice_encoder import VoiceEncoder

            s3gen, sizes, device = self.folder / S3GEN_FILE, self.sizes, self.device
            self._frontend = (
                load_part(VoiceEncoder(sizes.ve_hidden), self.folder / VE_FILE).to(device),
                load_part(S3Tokenizer(sizes.s3tok), s3gen, "tokenizer.").to(device),
                load_part(CAMPPlus(sizes.campplus), s3gen, "speaker_encoder.").to(device),
            )
        return self._frontend

    def create_voice(
        self, audio: np.ndarray | str | Path, sr: int | None = None, ref_text: str | None = None
    ) -> ChatterboxVoice:
        """A voice from a reference clip (mono or (S, C) float array at `sr`, or a path to an
        audio file; > 5 s): the official `prepare_conditionals` (Turbo, norm_loudness on). No
        random draws. `ref_text` is accepted and not used (cloned from the clip alone)."""
        clip, rate = chatterbox_clip(audio, sr, ref_text)
        ve, tokenizer, campplus = self._front_end()
        return make_voice(clip, rate, ve, tokenizer, campplus, self.device)

    @torch.inference_mode()
    def generate(
        self,
        text: str,
        voice: ChatterboxVoice | None = None,
        seed: int | None = None,
        watermark: bool = False,
        sampling: TurboSampling | None = None,
        max_new_tokens: int = MAX_NEW_TOKENS,
        stream_noise: bool = False,
        **knobs: Any,
    ) -> TurboResult:
        """Whole clip for `text` in `voice` (None: the checkpoint's conds.pt voice), exact: the
        official's output for the seed. `stream_noise`: S3Gen and HiFT take `stream`'s
        pre-drawn noise instead (the same tokens), giving the whole-utterance clip that
        `stream(text, voice, seed, ...)` approximates chunk by chunk. seed None: a random one
        (`result.seed`); `knobs`: TurboSampling's fields by name (temperature=, top_k=, ...)."""
        sampling, _ = knobs_by_name(
            "Chatterbox Turbo", sampling or TurboSampling(), knobs, streamed=False
        )
        voice, seed = self.resolve_voice(voice), resolve_seed(seed)
        generator = torch.Generator().manual_seed(seed)  # CPU: the official's stream
        out = self.t3.generate(
            voice.speaker_emb,
            voice.t3_prompt_tokens,
            self.text_ids(text),
            sampling,
            generator,
            max_new_tokens,
        )
        speech = torch.cat([out.tokens[out.tokens < S3_VOCAB], silence(self.device)])[None]
        if stream_noise:  # noise over the longest input: max_new_tokens + 1 draws, the silence
            noise = StreamNoise.for_voice(seed, voice, max_new_tokens + 1 + SILENCE_TOKENS)
            s3gen = S3GenStream(self.flow, self.hift, voice, noise, WHOLE_UTTERANCE)
            audio = s3gen.push(speech, final=True)[None]
        else:
            audio = self.vocode(self.tokens_to_mel(speech, voice, generator), generator)
        audio = audio[0].cpu().numpy()
        if watermark:
            audio = apply_watermark(audio)
        return TurboResult(audio, out.tokens, out.stop_reason, seed=seed)

    def stream(
        self,
        text: str,
        voice: ChatterboxVoice | None = None,
        seed: int | None = None,
        sampling: TurboSampling | None = None,
        max_new_tokens: int = MAX_NEW_TOKENS,
        chunking: StreamChunking | None = None,
        **knobs: Any,
    ) -> SeededStream:
        """`text` in `voice` as audio chunks made while T3 draws (unwatermarked). T3's tokens
        are generate's (same draws, same order); S3Gen re-runs after the first
        `chunking.first_tokens` speech tokens and at `chunking.next_pass` after (ramping up to
        every `chunking.chunk_tokens`), handing out the audio that became stable (streaming.py),
        and the final chunk (always yielded, last) holds the rest. A pass with nothing stable
        yet yields nothing. The served path: the one engine (runner.py's ChatterboxRunner) with
        this request as its only row, stepped on the caller's thread (`run_alone`); the request
        is checked here (ValueError), before the first chunk. seed None: a random one (`.seed`
        of the returned stream); `knobs` by name: TurboSampling's fields and first_chunk_tokens
        / chunk_tokens (`chunking`'s)."""
        sampling, chunking = knobs_by_name(
            "Chatterbox Turbo", sampling or TurboSampling(), knobs, chunking
        )
        seed = resolve_seed(seed)
        seq = self.request(
            text, voice, seed, sampling, max_new_tokens, chunking, outbox=InlineOutbox()
        )
        return SeededStream(self.run_alone(seq), seed)

    def text_ids(self, text: str) -> torch.Tensor:
        """T3's text input: (1, Lt) token ids."""
        return torch.tensor([self.tokenizer.encode(text)], dtype=torch.long, device=self.device)


def apply_watermark(audio: np.ndarray) -> np.ndarray:
    """The Perth implicit watermark, as the official applies it to the whole clip: ours
    (audio/perth_watermark.py) with the weights of the optional package resemble-perth (extra
    `chatterbox-watermark`; without it a RuntimeError saying how to install it)."""
    from ...audio.perth_watermark import shared_watermarker

    return shared_watermarker().apply(audio, SAMPLE_RATE)
