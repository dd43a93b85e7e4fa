"""Qwen3TTSModel: voice cloning (ICL or x-vector), preset and designed voices, streamed.

model = load_model("Qwen/Qwen3-TTS-12Hz-0.6B-Base")
voice = model.create_voice(audio, sample_rate, ref_text="...")   # ref_text=None: x-vector
for chunk in model.stream("Hello", voice): play(chunk.audio)
result = model.generate("Hello", voice, greedy=True)

The other checkpoint types of the family take their voices from the model instead of a clip:
CustomVoice `model.preset_voice(name, instruct=None)` (names: `model.speakers`), VoiceDesign
`model.design_voice(instruct)`. A voice works on the type it was made for only.
`non_streaming_mode` (generate / stream / plan) picks the official text layout; None = the
official default of the checkpoint's type (Base False, the other two True).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ...audio.analysis import resample
from ...audio.cadence import Cadence
from ...serving.alone import InlineOutbox, run_alone
from ..checkpoint import load_safetensors
from ..contract import SeededStream, read_knobs, reference_audio, resolve_seed
from ..layers import compile_stack
from .checkpoint import (
    build_talker,
    load_speaker_encoder,
    load_speech_tokenizer,
    load_talker,
    random_speaker_encoder,
    random_speech_tokenizer,
    resolve_checkpoint,
)
from .chunk import SAMPLE_RATE, AudioChunk, GenerationResult
from .config import GenerationDefaults, Qwen3TTSConfig, load_config, load_generation_defaults
from .decode_settings import DecodeSettings, Knobs, length_cap_frames
from .prompt import (
    Prompt,
    SpecialTextVectors,
    build_prompt,
    instruct_text_ids,
    ref_text_ids,
    target_text_ids,
)
from .serving.fed import FedSequence
from .serving.runner import DEFAULT_POSITIONS_PER_ROW, Qwen3Runner
from .serving.sequence import Qwen3Sequence
from .text_tokenizer import TextTokenizer
from .voice import Voice

if TYPE_CHECKING:
    from ...quant.store import SavedInt8
    from .codec.speech_tokenizer import SpeechTokenizer
    from .codec.streaming import DecoderState

__all__ = ["SAMPLE_RATE", "AudioChunk", "GenerationResult", "Qwen3TTSModel", "Voice", "load_model"]

log = logging.getLogger(__name__)
MODEL = "Qwen3-TTS"  # in the errors that list its knobs


class Qwen3TTSModel:
    def __init__(
        self,
        config: Qwen3TTSConfig,
        generation_defaults: GenerationDefaults,
        talker: torch.nn.Module,
        text_tokenizer: TextTokenizer,
        speaker_encoder: Any = None,
        speech_tokenizer: Any = None,
    ) -> None:
        self.config = config
        self.generation_defaults = generation_defaults
        self.talker = talker.eval().requires_grad_(False)
        self.text_tokenizer = text_tokenizer
        self.speaker_encoder = speaker_encoder
        self.speech_tokenizer = speech_tokenizer
        self.quantization: Any = None  # a quantize.QuantizationReport once quantized
        self.format_decision = ""  # why `weight_format` was chosen, in words ("": as asked)
        self.cuda_graphs = False  # the served step as CUDA graphs (load_model's cuda_graphs)
        with torch.inference_mode():
            self.special = SpecialTextVectors.compute(self.talker, config)

    @property
    def device(self) -> torch.device:
        return self.talker.device

    @property
    def dtype(self) -> torch.dtype:
        return self.talker.dtype

    @property
    def languages(self) -> tuple[str, ...]:
        return self.config.languages

    @property
    def model_type(self) -> str:
        """The checkpoint's tts_model_type: "base", "custom_voice" or "voice_design"."""
        return self.config.tts_model_type

    @property
    def speakers(self) -> tuple[str, ...]:
        """A CustomVoice checkpoint's preset names (its talker_config.spk_id); () otherwise."""
        return self.config.speakers if self.model_type == "custom_voice" else ()

    @property
    def instruct_supported(self) -> bool:
        """False on a CustomVoice checkpoint whose instructions the official ignores (0.6B)."""
        return self.config.instruct_supported

    @property
    def weight_format(self) -> str:
        """ "int8" when the decoder stacks are quantized, else the float dtype's name."""
        if self.quantization is not None:
            return self.quantization.mode
        return str(self.dtype).removeprefix("torch.")

    @classmethod
    def from_pretrained(
        cls,
        name_or_path: str | Path,
        device: str = "cpu",
        dtype: torch.dtype = torch.float32,
        int8: SavedInt8 | None = None,
    ) -> Qwen3TTSModel:
        """`int8`: a saved int8 model (quant/store.py) whose layers take the place of the float
        projections, which are then neither allocated nor read; the report is set too."""
        from .checkpoint import check_model_weights

        folder = resolve_checkpoint(name_or_path)
        config = load_config(folder)
        # Errors come in the order of the parts: model.safetensors, generation config, text
        # tokenizer, codec. The codec loads before the talker: its decoder is briefly float32
        # (its derived tensors come from the wide weights) while little else is resident yet.
        with load_safetensors(folder / "model.safetensors") as weights:
            check_model_weights(config, weights)
            defaults = load_generation_defaults(folder)
            text_tokenizer = TextTokenizer.from_folder(folder)
            codec = load_speech_tokenizer(folder / "speech_tokenizer", device, dtype)
            quantized = int8 is not None and int8.report.applied
            talker = load_talker(
                config, weights, device, dtype, drop=int8.drop if quantized else None
            )
            if quantized:
                int8.install(talker)
            speaker_encoder = load_speaker_encoder(config, weights, device, dtype)
        model = cls(config, defaults, talker, text_tokenizer, speaker_encoder, codec)
        if quantized:
            model.quantization = int8.report
        return model

    @classmethod
    def from_config(
        cls,
        config_folder: str | Path,
        device: str = "cpu",
        dtype: torch.dtype = torch.float32,
        seed: int = 0,
        with_codec: bool = True,
    ) -> Qwen3TTSModel:
        """Real-size model with random weights from a folder of released JSONs (no weights read).

        The codec and speaker encoder are built too when `with_codec` and the folder has
        speech_tokenizer/config.json; the text tokenizer comes from the folder's files.
        """
        folder = Path(config_folder)
        config = load_config(folder)
        talker = build_talker(config, device, dtype, seed=seed)
        encoder = codec = None
        if with_codec and (folder / "speech_tokenizer" / "config.json").is_file():
            if config.tts_model_type == "base":
                encoder = random_speaker_encoder(config, device, dtype, seed=seed)
            codec = random_speech_tokenizer(folder / "speech_tokenizer", device, dtype, seed=seed)
        defaults = load_generation_defaults(folder)
        tokenizer = TextTokenizer.from_folder(folder)
        return cls(config, defaults, talker, tokenizer, encoder, codec)

    def compile(self) -> Qwen3TTSModel:
        """Opt-in torch.compile of the talker and code-predictor layer stacks (same results;
        the first request pays the compile time; falls back to eager if compiling fails)."""
        compile_stack(self.talker.model)
        compile_stack(self.talker.code_predictor.model)
        return self

    def silent_voice(self) -> Voice:
        """A voice needing no reference (int8 calibration): an x-vector of zeros (Base), the
        first preset (CustomVoice), no description (VoiceDesign)."""
        if self.model_type == "custom_voice":
            return self.preset_voice(self.speakers[0])
        if self.model_type == "voice_design":
            return self.design_voice(None)
        hidden = self.config.talker.stack.hidden_size
        return Voice(speaker_embedding=torch.zeros(hidden, device=self.device, dtype=self.dtype))

    @torch.inference_mode()
    def create_voice(
        self,
        audio: np.ndarray | str | Path,
        sample_rate: int | None = None,
        ref_text: str | None = None,
    ) -> Voice:
        """ICL voice when ref_text is given (reference codes + transcript), else x-vector only.
        `audio`: samples at `sample_rate`, or a path to an audio file."""
        if self.model_type != "base":
            raise ValueError(
                f"create_voice clones a reference clip, which a Base checkpoint does; this "
                f"checkpoint is {self.model_type!r}: use {_VOICE_MAKER[self.model_type]}"
            )
        audio, sample_rate = reference_audio(audio, sample_rate)
        wav = _mono_float32(audio)
        if sample_rate <= 0:
            raise ValueError(f"sample_rate must be positive, got {sample_rate}")
        if wav.shape[0] * SAMPLE_RATE / sample_rate < self._samples_per_frame():
            raise ValueError(
                f"reference audio is shorter than one codec frame "
                f"({self._samples_per_frame()} samples at {SAMPLE_RATE} Hz)"
            )
        if self.speaker_encoder is None:
            raise RuntimeError("this model has no speaker encoder (built with from_config?)")
        wav_24k = wav  # librosa's resampling (ours) as the official's
        if sample_rate != SAMPLE_RATE:
            wav_24k = resample(wav, int(sample_rate), SAMPLE_RATE).astype(np.float32)
        embedding = self.speaker_encoder.embed(wav_24k).to(self.device, self.dtype)
        if ref_text is None or not ref_text.strip():
            return Voice(speaker_embedding=embedding)
        codec = self._codec()
        codes = codec.encode(wav_24k, SAMPLE_RATE)
        voice = Voice(speaker_embedding=embedding, ref_codes=codes.long().cpu(), ref_text=ref_text)
        self._warm_decoder(codec, voice)  # now, not in the first request
        return voice

    def preset_voice(self, name: str, instruct: str | None = None) -> Voice:
        """A CustomVoice checkpoint's preset speaker `name` (case-insensitive, as the official),
        optionally with an instruction (how to speak: emotion, style, pace); a ValueError where
        the official silently drops it (the 0.6B CustomVoice: config `tts_model_size` "0b6"),
        so a caller never believes an instruction was followed when it was not."""
        self._check_type("custom_voice", "preset_voice")
        if not isinstance(name, str) or name.lower() not in self.config.talker.spk_id:
            raise ValueError(f"unknown speaker {name!r}; this checkpoint has: {self.speakers}")
        instruct = _instruction(instruct)
        if instruct is not None and not self.instruct_supported:
            raise ValueError(
                f"this CustomVoice checkpoint (tts_model_size {self.config.tts_model_size!r}) "
                "does not follow instructions: the official generate_custom_voice drops "
                "`instruct` on it. Leave instruct empty, or use the 1.7B CustomVoice."
            )
        return Voice(None, speaker=name.lower(), instruct=instruct, model_type="custom_voice")

    def design_voice(self, instruct: str | None) -> Voice:
        """A VoiceDesign checkpoint's voice from a natural-language description (empty or
        None: no description, as the official allows)."""
        self._check_type("voice_design", "design_voice")
        return Voice(None, instruct=_instruction(instruct), model_type="voice_design")

    def _check_type(self, wanted: str, method: str) -> None:
        if self.model_type != wanted:
            raise ValueError(
                f"{method} needs a {wanted!r} checkpoint; this one is {self.model_type!r}"
                f" (use {_VOICE_MAKER[self.model_type]})"
            )

    def generate(
        self, text: str, voice: Voice, language: str | None = "auto", **kwargs: Any
    ) -> GenerationResult:
        """Whole utterance: the stream collected (same engine, same numbers); takes the same
        keyword arguments as `stream` (its chunks: 25 frames unless given)."""
        chunk_frames = kwargs.pop("chunk_frames", 25)
        kwargs.setdefault("first_chunk_frames", chunk_frames)
        stream = self.stream(text, voice, language, chunk_frames=chunk_frames, **kwargs)
        chunks = list(stream)
        audio = np.concatenate([chunk.audio for chunk in chunks])
        codes = torch.cat([chunk.codes for chunk in chunks])
        return GenerationResult(
            audio=audio, codes=codes, stop_reason=chunks[-1].stop_reason, seed=stream.seed
        )

    def stream(
        self, text: str, voice: Voice, *args: Any, seed: int | None = None, **kwargs: Any
    ) -> SeededStream:
        """Iterator of AudioChunks (`.seed`: the seed used, None: a random one); validates
        everything before the first `next()`. `args` / `kwargs`: `request`'s (language,
        should_stop and decode_settings.Knobs by name); another name is a TypeError listing them.

        The decode engine with one row (tts_core.serving.run_alone), stepped on the thread
        that iterates: the chunks are those a served EngineLoop gives the same request.
        should_stop: asked before every frame; True ends the stream there without a final
        chunk. Closing the generator frees the request's caches at once."""
        started = time.perf_counter()
        seed = resolve_seed(seed)
        seq = self.request(text, voice, *args, seed=seed, outbox=InlineOutbox(), **kwargs)
        seq.chunk_started = started  # the first chunk's compute includes this setup
        return SeededStream(self._stepped_alone(seq), seed)

    def frames(self, prompt: Prompt, settings: DecodeSettings) -> Iterator[torch.Tensor]:
        """The (G,) int64 code frames of a planned request (`plan`), without audio: the same
        engine as `stream`, on the calling thread, and no codec needed (calibration, accuracy
        runs). Closing the generator frees the request's caches at once."""
        seq = Qwen3Sequence(
            self.talker,
            prompt,
            settings,
            None,
            Cadence(1, 1),
            _never,
            audio=False,
            outbox=InlineOutbox(),
        )
        chunks = self._stepped_alone(seq)

        def frames() -> Iterator[torch.Tensor]:
            try:
                for chunk in chunks:
                    yield from chunk
            finally:
                chunks.close()

        return frames()

    def _stepped_alone(self, seq: Qwen3Sequence) -> Iterator[Any]:
        """What `seq` (made with an InlineOutbox) hands out, stepped on the thread that iterates
        by a private one-row engine made at the first `next()`; its size is checked now."""
        steps = run_alone(lambda: Qwen3Runner.alone(self, seq), seq)
        self.talker.ensure_rope(seq.positions_needed())  # ValueError now: longer than the talker
        return steps

    def runner(self, max_batch: int = 8, cache_positions: int | None = None) -> Qwen3Runner:
        """The StepModel of a served EngineLoop (serving/runner.py): `max_batch` rows over one
        talker KV arena of `cache_positions` (default max_batch * 1024), where a request
        reserves its prompt + frame limit when admitted. Its RoPE table is a parallel op: a
        server builds it on a thread that ends (backends/qwen3.py, engine/model_thread.py)."""
        capacity = cache_positions or max_batch * DEFAULT_POSITIONS_PER_ROW
        return Qwen3Runner(self, max_batch, capacity)

    def request(
        self,
        text: str,
        voice: Voice,
        language: str | None = "auto",
        *,
        seed: int | None = None,
        should_stop: Callable[[], bool] | None = None,
        cache_positions: int | None = None,
        outbox: Any = None,
        **knobs: Any,
    ) -> Qwen3Sequence:
        """A checked request for the engine (ValueError / TypeError now, as `stream`), whose
        chunks are AudioChunks: a served EngineLoop's `make_request`, run on its thread.
        cache_positions: the served runner's arena (`runner.capacity`): a prompt it cannot
        hold with one frame is refused, the frame limit capped to it. outbox: where the chunks
        go (None: a Handoff to a consumer on another thread)."""
        chosen = read_knobs(MODEL, Knobs, knobs)
        prompt, settings = self._plan(text, voice, language, chosen, seed)
        self._codec()  # no codec: fail now, not at the first chunk
        stop = should_stop or _never
        seq = Qwen3Sequence(
            self.talker, prompt, settings, voice, chosen.cadence(), stop, outbox=outbox
        )
        return seq.fit(cache_positions)

    def plan(
        self, text: str, voice: Voice, language: str | None = "auto", **knobs: Any
    ) -> tuple[Prompt, DecodeSettings]:
        """Validate a request and build its prompt and decode settings (what `request` starts
        from); raises ValueError / TypeError on bad input. `knobs`: `stream`'s seed and knobs."""
        seed = knobs.pop("seed", None)
        return self._plan(text, voice, language, read_knobs(MODEL, Knobs, knobs), seed)

    def _plan(
        self, text: str, voice: Voice, language: str | None, knobs: Knobs, seed: int | None
    ) -> tuple[Prompt, DecodeSettings]:
        with torch.inference_mode():
            prompt = self._prompt(text, voice, language, knobs.non_streaming_mode)
        cap = length_cap_frames(prompt.text_tokens) if knobs.length_cap else None
        return prompt, knobs.settings(self.generation_defaults, cap, seed)

    def fed_prefill_tokens(self, voice: Voice) -> int:
        """Target-text tokens the prompt's prefill holds (text fed in pieces, issue #27): one in
        x-vector mode (and for preset / designed voices, always fed with non_streaming_mode
        False); T2 - len(ref_text ids) in ICL mode (T2 = reference frames + 1)."""
        self._check_voice(voice)
        ref_ids = self._ref_ids(voice)
        return 1 if ref_ids is None else voice.ref_codes.shape[0] + 1 - len(ref_ids)

    def fed_request(
        self,
        role_ids: list[int],
        target_ids: list[int],
        voice: Voice,
        language: str | None = "auto",
        *,
        seed: int | None = None,
        should_stop: Callable[[], bool] | None = None,
        cache_positions: int | None = None,
        **knobs: Any,
    ) -> FedSequence:
        """`request` for text fed in pieces (serving/fed.py): the prompt from the role ids and
        the `fed_prefill_tokens` first target ids, its trailing vectors those that follow them
        (tts_eos comes with done); no length cap until done (then from the whole text, when
        `length_cap`). Fed text is always in the streaming-text layout: non_streaming_mode=True
        (the whole text first) is a ValueError."""
        chosen = read_knobs(MODEL, Knobs, knobs)
        if chosen.non_streaming_mode:
            raise ValueError("text fed in pieces needs non_streaming_mode=False")
        language = _checked_language(language)
        tail = self.text_tokenizer.encode("<|im_end|>\n<|im_start|>assistant\n")
        with torch.inference_mode():
            prompt = self._build(voice, [*role_ids, *target_ids, *tail], language, False)
        prompt.trailing = prompt.trailing[:-1]  # tts_eos: at done
        decoding = chosen.settings(self.generation_defaults, None, seed)  # cap: at done
        self._codec()  # no codec: fail now, not at the first chunk
        seq = FedSequence(
            self.talker,
            prompt,
            decoding,
            voice,
            chosen.cadence(),
            should_stop or _never,
            text_tokens=len(target_ids),
            length_cap=chosen.length_cap,
        )
        return seq.fit(cache_positions)

    def new_decoder_state(self, voice: Voice) -> DecoderState:
        """A fresh codec-decoder state for one stream; for ICL, a clone of the voice's warm
        state (the decoder after the reference frames)."""
        codec = self._codec()
        if voice.ref_codes is None:
            return codec.decoder.init_state(batch_size=1)
        return self._warm_decoder(codec, voice).clone()

    def _warm_decoder(self, codec: SpeechTokenizer, voice: Voice) -> DecoderState:
        """The decoder state after the voice's reference frames (their audio dropped),
        computed once per voice and codec."""
        cached = voice.warm_decoder
        if cached is None or cached[0] != id(codec):
            warm = codec.decoder.init_state(batch_size=1)
            codec.decoder.decode_step(voice.ref_codes.T[None].to(self.device), warm)
            cached = voice.warm_decoder = (id(codec), warm)
        return cached[1]

    @torch.inference_mode()
    def decode_chunk(
        self,
        state: DecoderState,
        frames: list[torch.Tensor],
        compute_s: float,
        stop_reason: str | None,
        batch_size: int = 1,
    ) -> AudioChunk:
        """Code frames (each (G,) int64) -> the next AudioChunk of the stream whose decoder
        state this is; `compute_s` is the time spent on it before decoding."""
        clock = time.perf_counter()
        group_count = self.config.talker.num_code_groups
        codes = torch.stack(frames) if frames else torch.zeros(0, group_count, dtype=torch.long)
        if frames:
            decoder = self._codec().decoder
            audio = decoder.decode_step(codes.T[None], state)[0].float().cpu().numpy()
        else:
            audio = np.zeros(0, dtype=np.float32)
        return AudioChunk(
            audio=audio.astype(np.float32, copy=False),
            frames=len(frames),
            compute_s=compute_s + (time.perf_counter() - clock),
            final=stop_reason is not None,
            stop_reason=stop_reason,
            codes=codes.cpu(),
            batch_size=batch_size,
        )

    def _prompt(
        self, text: str, voice: Voice, language: str | None, non_streaming_mode: bool | None = None
    ) -> Prompt:
        if not isinstance(text, str) or not text.strip():
            raise ValueError("text is empty")
        language = _checked_language(language)
        if non_streaming_mode is None:
            non_streaming_mode = self.config.default_non_streaming_mode
        ids = target_text_ids(self.text_tokenizer, text)
        return self._build(voice, ids, language, non_streaming_mode)

    def _build(self, voice: Voice, ids: list[int], language: str, non_streaming: bool) -> Prompt:
        """The prompt of `voice` for the full template ids (role + text + tail)."""
        self._check_voice(voice)
        ref_ids = self._ref_ids(voice)
        if ref_ids is not None and (voice.ref_codes.ndim != 2 or voice.ref_codes.shape[0] < 1):
            raise ValueError("reference codes must be (R >= 1, groups)")
        speaker_embedding = voice.speaker_embedding
        if voice.model_type == "custom_voice":  # the preset's row of the codec embedding
            row = self.config.talker.spk_id[voice.speaker]
            speaker_embedding = self.talker.codec_embed(torch.tensor([[row]], device=self.device))
        instruct = _instruction(voice.instruct)
        return build_prompt(
            self.talker,
            self.config,
            self.special,
            ids,
            language,
            speaker_embedding,
            ref_ids=ref_ids,
            ref_codes=voice.ref_codes,
            speaker=voice.speaker,
            instruct_ids=None
            if instruct is None
            else instruct_text_ids(self.text_tokenizer, instruct),
            non_streaming_mode=non_streaming,
        )

    def _check_voice(self, voice: Voice) -> None:
        """A voice made for another checkpoint type is an error naming both."""
        if not isinstance(voice, Voice):
            raise TypeError(f"voice must be a Voice, got {type(voice).__name__}")
        kind = getattr(voice, "model_type", "base")
        if kind != self.model_type:
            raise ValueError(
                f"a {_VOICE_NAME[kind]} cannot be used with this {self.model_type!r} checkpoint;"
                f" use {_VOICE_MAKER[self.model_type]}"
            )
        if kind == "custom_voice" and voice.speaker not in self.config.talker.spk_id:
            raise ValueError(
                f"unknown speaker {voice.speaker!r}; this checkpoint has: {self.speakers}"
            )
        if _instruction(voice.instruct) is not None and not self.instruct_supported:
            raise ValueError(
                "this CustomVoice checkpoint does not follow instructions "
                "(the official drops them): leave instruct empty"
            )
        if kind == "base" and voice.speaker_embedding is None:
            raise ValueError("a Base voice needs its speaker embedding (model.create_voice)")

    def _ref_ids(self, voice: Voice) -> list[int] | None:
        """The reference transcript's ids of an ICL voice (None: x-vector voice)."""
        if voice.ref_codes is None:
            return None
        if not voice.ref_text or not voice.ref_text.strip():
            raise ValueError("an ICL voice needs its reference transcript (ref_text)")
        return ref_text_ids(self.text_tokenizer, voice.ref_text)

    def _codec(self):
        if self.speech_tokenizer is None:
            raise RuntimeError("this model has no speech tokenizer (built with from_config?)")
        return self.speech_tokenizer

    def _samples_per_frame(self) -> int:
        return int(getattr(self.speech_tokenizer, "samples_per_frame", 1920))


def _never() -> bool:
    return False


# How each checkpoint type makes its voices (error messages name them).
_VOICE_MAKER = {
    "base": "model.create_voice(audio, sample_rate, ref_text)",
    "custom_voice": "model.preset_voice(name, instruct=None) with a name from model.speakers",
    "voice_design": "model.design_voice(instruct)",
}
_VOICE_NAME = {
    "base": "cloned (Base) voice",
    "custom_voice": "CustomVoice preset voice",
    "voice_design": "VoiceDesign voice",
}


def _instruction(instruct: object) -> str | None:
    """None or a non-empty string: "" and None both mean no instruction (as the official)."""
    if instruct is None or instruct == "":
        return None
    if not isinstance(instruct, str):
        raise ValueError(f"instruct must be a string, got {type(instruct).__name__}")
    return instruct


def _mono_float32(audio: np.ndarray) -> np.ndarray:
    wav = np.asarray(audio, dtype=np.float32)
    if wav.ndim == 2:  # (samples, channels), as the official averages the last axis
        wav = wav.mean(axis=-1).astype(np.float32)
    if wav.ndim != 1 or wav.size == 0:
        raise ValueError(f"reference audio must be a non-empty mono signal, got shape {wav.shape}")
    return wav


def load_model(
    name_or_path: str | Path,
    device: str = "cpu",
    dtype: torch.dtype = torch.float32,
    compile: bool = False,
    cuda_graphs: bool | str | None = "auto",
    quantize: str | None = None,
    decoder_dtype: torch.dtype | None = None,
    warm_chunks: tuple[int, ...] = (2, 6),
) -> Qwen3TTSModel:
    """Hub repo id or local folder -> ready Qwen3TTSModel (`compile`: see Qwen3TTSModel.compile;
    `cuda_graphs`: "auto" (or None) = on for CUDA, where the served runner captures its decode
    step per batch bucket at start (serving/cuda_graphs.py); "off" / False: eager).

    quantize: None/"none" keeps the weights in `dtype`; "int8" makes the talker's and the code
    predictor's layers 8-bit (CPU; see quantize.py); "int4" as "int8", then the code predictor
    4-bit (int4.py); "auto" does as "int8" on a CPU where the int8 matmul runs faster than the
    float layers (quant/speed.py) and every layer keeps >= 30 dB SQNR on a calibration run, else
    keeps `dtype` (`model.format_decision` says why), and makes the code predictor 4-bit where
    int4.py's gate holds on this checkpoint. `model.quantization` holds the report (None when not
    quantized). The outcome of "int8" and "auto" is saved at the first load and read by the next
    ones (quant/store.py: no calibration then; TTS_CORE_INT8_CACHE=0 turns it off).
    decoder_dtype: the codec decoder's own dtype (None: `dtype`); the encoder stays as loaded
    so reference codes stay exact. warm_chunks: chunk sizes (frames) the decoder runs once on
    dummy codes at load, so a request's first chunk costs what a steady one does.
    """
    from ...quant.quantize import requested_mode, why_not_int8
    from .serving.cuda_graphs import resolve_cuda_graphs

    graphs = resolve_cuda_graphs(cuda_graphs, device)  # a bad value fails before the load
    four_bit = str(quantize).lower() == "int4"  # int8, the code predictor in 4 bits (int4.py)
    mode = requested_mode("int8" if four_bit else quantize)
    why_not = why_not_int8(mode, device, "; on a GPU use dtype=torch.bfloat16")
    if mode != "none" and not why_not:
        model = _load_int8(name_or_path, device, dtype, auto=mode == "auto")
        if model.quantization is not None and (four_bit or mode == "auto"):
            from .int4 import predictor_format

            model.format_decision += f"; {predictor_format(model, forced=four_bit)}"
    else:
        model = Qwen3TTSModel.from_pretrained(name_or_path, device=device, dtype=dtype)
        if why_not:
            model.format_decision = f"kept {model.weight_format}: {why_not}"
    codec = model.speech_tokenizer
    if codec is not None:
        if decoder_dtype is not None:
            codec.set_decoder_dtype(decoder_dtype)  # before any voice caches a warm state
        if warm_chunks:
            codec.decoder.warm_up(tuple(warm_chunks))
    model.cuda_graphs = graphs
    return model.compile() if compile else model


def _load_int8(name_or_path: str | Path, device: str, dtype: torch.dtype, auto: bool):
    """The checkpoint quantized (`auto`: with its SQNR bound and speed check), or the outcome
    saved at an earlier load (quant/store.py): then nothing is calibrated, timed or rounded,
    and the float projections it replaces are never loaded."""
    from ...quant.store import load_int8
    from . import quantize

    folder = resolve_checkpoint(name_or_path)
    target, report = load_int8(
        quantize.Qwen3Int8,
        folder,
        dtype,
        quantize.MIN_SQNR_DB if auto else None,
        auto,
        lambda saved: quantize.Qwen3Int8(
            Qwen3TTSModel.from_pretrained(folder, device=device, dtype=dtype, int8=saved)
        ),
    )
    model = target.model
    model.quantization = report if report.applied else None
    model.format_decision = report.described
    return model


def _checked_language(language: object) -> str:
    """None -> "auto"; anything but a string is a ValueError (build_prompt checks the name)."""
    language = "auto" if language is None else language
    if not isinstance(language, str):
        raise ValueError(f"language must be a string, got {type(language).__name__}")
    return language
