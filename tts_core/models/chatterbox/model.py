"""Chatterbox Turbo in our own PyTorch, equal to the official chatterbox-tts 0.1.7
`ChatterboxTurboTTS` on float32 CPU (tests/chatterbox); and `S3GenSpeech`, what it shares with
the English model (english.py).

generate = T3 (text + voice -> S3 tokens) -> drop ids >= 6561, append 3 silence tokens ->
S3Gen flow (tokens -> mel) -> HiFT (mel -> 24 kHz) -> trim fade -> [Perth watermark]. Every
random draw comes from one CPU `torch.Generator` seeded with S, in the official order
(spec chatterbox.md 9.4), so a seed gives the official's output for `torch.manual_seed(S)`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ...serving.alone import InlineOutbox, run_alone
from ...serving.batch import BatchEngine
from ..checkpoint import CheckpointError, resolve_checkpoint
from ..contract import SeededStream, read_knobs, reference_audio, resolve_seed
from .checkpoint import (
    CONDS_FILE,
    DOWNLOAD_PATTERNS,
    REQUIRED_FILES,
    S3GEN_FILE,
    T3_UNUSED,
    VE_FILE,
    load_part,
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
from .knobs import TurboKnobs
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


class S3GenSpeech:
    """What both Chatterbox models share besides T3 and the text front end: S3Gen, the built-in
    voice, cloning, the knobs by name, the engine's runner and request (runner.py)."""

    name: str  # in errors: "Chatterbox Turbo"
    sampling_type: type  # its sampling, whose fields are `generate`'s knobs by name
    stream_knobs: type  # those and the chunk sizes: `stream`'s and `request`'s
    request_type: type[ChatterboxSequence]
    required_files: tuple
    download_patterns: tuple
    sizes_type: type  # of_folder(folder): the release's sizes, or chatterbox_sizes.json's
    s3gen_file: str
    meanflow: bool  # S3Gen's CFM: Turbo's 2-step meanflow, else the English 10-step CFG
    cloning: Mapping[str, Any] = {}  # make_voice's options (cloning.py)
    sample_rate = SAMPLE_RATE

    @classmethod
    def from_pretrained(
        cls, name_or_path: str | Path, device: str = "cpu", dtype: torch.dtype = torch.float32
    ) -> Any:
        """A local folder or Hub repo id in the released layout, float32 only (the parity
        target). Weights whose shapes are not the release's: the error names the file of other
        sizes (chatterbox_sizes.json) where the folder has none."""
        if dtype not in (None, torch.float32):
            raise ValueError(f"{cls.name} runs in float32 only (got dtype={dtype})")
        folder = resolve_checkpoint(
            name_or_path, required=cls.required_files, patterns=cls.download_patterns
        )
        try:
            return cls(folder, cls.sizes_type.of_folder(folder), device)
        except CheckpointError as exc:
            if (Path(folder) / SIZES_FILE).is_file():
                raise
            raise CheckpointError(
                f"{exc}\n{folder} has no {SIZES_FILE}, so the released model's sizes were "
                f"assumed; a checkpoint of other sizes loads with its {SIZES_FILE} beside the "
                f"weights (the sizes of each part: tools/oracle writes one for the tiny "
                f"checkpoints)"
            ) from exc

    def load_s3gen(self, parts: ChatterboxSizes) -> None:
        """S3Gen's flow and HiFT and the built-in voice (conds.pt, if any); the cloning front
        ends wait for the first clone (`_front_end`)."""
        s3gen, device = self.folder / self.s3gen_file, self.device
        flow = Flow(parts.encoder, parts.decoder, parts.campplus.embedding_size, self.meanflow)
        self.flow = load_part(flow, s3gen, "flow.").to(device)
        self.hift = load_part(
            HiFTGenerator(parts.hift), s3gen, "mel2wav.", after=HiFTGenerator.fold_weight_norm
        ).to(device)
        conds = self.folder / CONDS_FILE
        self.builtin_voice = (
            ChatterboxVoice.from_conds(conds).to(device) if conds.is_file() else None
        )
        self.parts, self._frontend = parts, None

    def _front_end(self) -> tuple:
        """VoiceEncoder, S3 tokenizer and CAMPPlus, built on the first cloned voice (a conds.pt
        voice never needs them)."""
        if self._frontend is None:
            from .campplus import CAMPPlus
            from .voice_encoder import VoiceEncoder

            s3gen, parts, device = self.folder / self.s3gen_file, self.parts, self.device
            self._frontend = (
                load_part(VoiceEncoder(parts.ve_hidden), self.folder / VE_FILE).to(device),
                self._s3_tokenizer(s3gen).to(device),
                load_part(CAMPPlus(parts.campplus), s3gen, "speaker_encoder.").to(device),
            )
        return self._frontend

    def _s3_tokenizer(self, s3gen: Path) -> torch.nn.Module:
        from .s3_tokenizer import S3Tokenizer

        return load_part(S3Tokenizer(self.parts.s3tok), s3gen, "tokenizer.")

    def create_voice(
        self, audio: np.ndarray | str | Path, sr: int | None = None, ref_text: str | None = None
    ) -> ChatterboxVoice:
        """A voice from a reference clip (a float array at `sr`, mono or (S, C), or a path to
        an audio file): the official prepare_conditionals (cloning.py), no random draws.
        `ref_text` is accepted and not used: both models clone from the clip alone."""
        del ref_text
        clip, rate = reference_audio(audio, sr)
        ve, tokenizer, campplus = self._front_end()
        clip = np.asarray(clip, dtype=np.float32)
        return make_voice(clip, rate, ve, tokenizer, campplus, self.device, **self.cloning)

    def resolve_voice(self, voice: ChatterboxVoice | None) -> ChatterboxVoice:
        """`voice` on this model's device; None: the checkpoint's built-in voice (conds.pt)."""
        if voice is not None:
            return voice.to(self.device)
        if self.builtin_voice is None:
            raise ValueError(f"{self.folder} has no {CONDS_FILE}: pass a voice (create_voice)")
        return self.builtin_voice

    def with_knobs(
        self,
        sampling: Any,
        chunking: StreamChunking | None,
        knobs: Mapping[str, Any],
        streamed: bool = True,
    ) -> tuple[Any, StreamChunking | None]:
        """`sampling` (None: the defaults) and `chunking` with the knobs given by name, read
        against `stream_knobs` (`sampling_type` where not `streamed`) by models/contract.py's
        `read_knobs`, each value parsed as its engine/knobs.py knob where it has one."""
        from ...engine.knobs import SAMPLING_KNOBS

        declared = self.stream_knobs if streamed else self.sampling_type
        parsers = {field.name: SAMPLING_KNOBS.get(field.name) for field in fields(declared)}
        named = {n: parsers[n].parse(v) if parsers.get(n) else v for n, v in knobs.items()}
        base = asdict(sampling or self.sampling_type())
        chosen = read_knobs(self.name, declared, {**base, **named})
        sampling = self.sampling_type(**{name: getattr(chosen, name) for name in base})
        return sampling, chosen.chunking(chunking) if streamed else chunking

    def runner(self, max_batch: int = DEFAULT_MAX_BATCH, s3gen_batching: str = "auto"):
        """The engine's StepModel for this model's requests; served as
        `EngineLoop(model.runner(n), make_request=model.request)`."""
        return ChatterboxRunner(self, max_batch, s3gen_batching)

    def request(self, *args: Any, **kwargs: Any) -> ChatterboxSequence:
        """A checked request (ValueError / TypeError when it cannot run) of `stream`'s
        arguments (seed an int) plus `should_stop` and `outbox` (serving/sequence.py's)."""
        return self.request_type(self, *args, **kwargs)

    def run_alone(self, request: ChatterboxSequence) -> Iterator[ChatterboxChunk]:
        """`request` (made with outbox=InlineOutbox()) stepped by a private one-row engine on the
        thread that iterates: `stream`'s chunks."""
        return run_alone(lambda: BatchEngine(self.runner(1), isolate_failures=False), request)

    def stream_alone(
        self, text: str, voice: Any, seed: int | None, *args: Any, **kwargs: Any
    ) -> SeededStream:
        """`stream`: its request, checked now, as the only row of `run_alone`; seed None: a
        random one (`.seed` of the returned stream)."""
        seed = resolve_seed(seed)
        seq = self.request(text, voice, seed, *args, outbox=InlineOutbox(), **kwargs)
        return SeededStream(self.run_alone(seq), seed)

    @torch.inference_mode()
    def speak(
        self,
        tokens: torch.Tensor,
        voice: ChatterboxVoice,
        seed: int,
        generator: torch.Generator,
        noise_tokens: int,
        stream_noise: bool,
        watermark: bool,
    ) -> np.ndarray:
        """generate's S3Gen pass: (1, n) tokens -> (S,) float32 audio, drawing from `generator`
        (the official's), or with a stream's noise pre-drawn over `noise_tokens` (stream_noise:
        the clip a stream approximates); the whole-clip Perth watermark where asked."""
        if tokens.shape[1] == 0:  # nothing to speak (the official would fail in S3Gen)
            return np.zeros(0, dtype=np.float32)
        if stream_noise:
            noise = StreamNoise.for_voice(seed, voice, noise_tokens)
            s3gen = S3GenStream(self.flow, self.hift, voice, noise, WHOLE_UTTERANCE)
            audio = s3gen.push(tokens, final=True).cpu().numpy()
        else:
            mel = self.tokens_to_mel(tokens, voice, generator)
            audio = self.vocode(mel, generator)[0].cpu().numpy()
        return apply_watermark(audio) if watermark else audio

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
    """One Turbo request (`model.request`): up to max_new_tokens + 1 draws, STOP ends it from
    the second draw on, 3 silence tokens appended for the final pass."""

    extra_draws = 1

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
        **knobs: Any,
    ) -> None:
        super().__init__(
            model, voice, seed, sampling, max_new_tokens, chunking, should_stop, outbox, knobs
        )
        self.noise_tokens = self.limit + SILENCE_TOKENS
        self.text_ids = model.text_ids(text)
        positions = 2 + self.voice.t3_prompt_tokens.shape[1] + self.text_ids.shape[1] + self.limit
        self.fits(positions, model.t3.tfmr.wpe.weight.shape[0])

    def open_draws(self, generator: torch.Generator) -> Iterator[torch.Tensor]:
        voice, self.t3_row = self.voice, TurboRow()
        inputs = (voice.speaker_emb, voice.t3_prompt_tokens, self.text_ids, self.sampling)
        return self.model.t3.draws(*inputs, generator, self.max_new_tokens, row=self.t3_row)

    def stops(self, token: int) -> bool:
        # the official checks STOP inside its step loop only: a first-draw STOP is fed back
        return token == STOP_SPEECH and self.frames > 0

    def final_tokens(self) -> torch.Tensor:
        return torch.cat([self.speech_tokens(), silence(self.model.device)[None]], dim=1)


def silence(device: torch.device | str) -> torch.Tensor:
    """The silence tokens S3Gen appends after T3's tokens: (3,)."""
    return torch.full((SILENCE_TOKENS,), SILENCE_TOKEN, dtype=torch.long, device=device)


class ChatterboxTurboModel(S3GenSpeech):
    name, sampling_type, stream_knobs = "Chatterbox Turbo", TurboSampling, TurboKnobs
    request_type = TurboSequence
    required_files, download_patterns = REQUIRED_FILES, DOWNLOAD_PATTERNS
    sizes_type, s3gen_file, meanflow = ChatterboxSizes, S3GEN_FILE, True

    def __init__(self, folder: Path, sizes: ChatterboxSizes, device: str = "cpu") -> None:
        self.folder, self.sizes, self.device = folder, sizes, torch.device(device)
        t3_weights = folder / t3_file(folder)  # Turbo's, or Nano's (GPT-2 small)
        self.t3 = load_part(T3Turbo(sizes.t3), t3_weights, dropped=T3_UNUSED).to(device)
        self.tokenizer = TurboTokenizer(folder)
        self.load_s3gen(sizes)

    @classmethod
    def from_pretrained(
        cls,
        name_or_path: str | Path,
        device: str = "cpu",
        dtype: torch.dtype = torch.float32,
        quantize: str | None = None,
    ) -> ChatterboxTurboModel:
        """S3GenSpeech's; `quantize` ("none", "int8", "auto"; as Qwen3-TTS's): T3's GPT-2
        blocks on the 8-bit CPU path (quant.py); "auto" also S3Gen's estimator projections in
        the fastest format that holds its gate (estimator_format.py), named after T3's in
        `format_decision` where one is kept."""
        model = super().from_pretrained(name_or_path, device, dtype)
        from .estimator_format import choose_estimator_format
        from .quant import quantize_turbo

        quantize_turbo(model, quantize)
        chosen = choose_estimator_format(model, quantize)
        if chosen is not None and chosen.chosen != "float32":
            model.format_decision = "; ".join(
                filter(None, (model.format_decision, chosen.described))
            )
        return model

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
        official's output for the seed (`speak`). seed None: a random one (`result.seed`);
        `knobs`: TurboSampling's fields by name (temperature=, top_k=, ...)."""
        sampling, _ = self.with_knobs(sampling, None, knobs, streamed=False)
        voice, seed = self.resolve_voice(voice), resolve_seed(seed)
        generator = torch.Generator().manual_seed(seed)  # CPU: the official's stream
        ids = self.text_ids(text)
        out = self.t3.generate(
            voice.speaker_emb, voice.t3_prompt_tokens, ids, sampling, generator, max_new_tokens
        )
        speech = torch.cat([out.tokens[out.tokens < S3_VOCAB], silence(self.device)])[None]
        noise_tokens = max_new_tokens + 1 + SILENCE_TOKENS  # the longest S3Gen input
        audio = self.speak(speech, voice, seed, generator, noise_tokens, stream_noise, watermark)
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
        """`text` in `voice` as audio chunks made while T3 draws generate's tokens
        (unwatermarked): S3Gen runs at `chunking`'s pass points, handing out the audio that
        became stable (streaming.py); the final chunk holds the rest. `knobs` by name:
        TurboSampling's fields and first_chunk_tokens / chunk_tokens (`chunking`'s)."""
        args = (sampling, max_new_tokens, chunking)  # TurboSequence's, in its order
        return self.stream_alone(text, voice, seed, *args, **knobs)

    def text_ids(self, text: str) -> torch.Tensor:
        """T3's text input: (1, Lt) token ids."""
        return torch.tensor([self.tokenizer.encode(text)], dtype=torch.long, device=self.device)


def apply_watermark(audio: np.ndarray) -> np.ndarray:
    """The official's whole-clip Perth watermark (audio/perth_watermark.py; the weights of the
    optional resemble-perth, else a RuntimeError saying how to install it)."""
    from ...audio.perth_watermark import shared_watermarker

    return shared_watermarker().apply(audio, SAMPLE_RATE)
