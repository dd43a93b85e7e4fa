"""Qwen3-TTS (tts_core.models.qwen3_tts) as a declaration over NeuralBackend (neural.py), with
what is its own: the codec decoder's format chosen at load (`_choose_decoder_dtype`), the served
runner's KV arena and CUDA graphs (`decode_step`), the language, text fed in pieces, and the
CustomVoice / VoiceDesign checkpoints' own voices.

Text in pieces (`stream_fed`, issue #27) is a row that waits for its next text token
(qwen3_tts/serving/fed.py FedRequest): speech starts after the first words (x-vector mode: the
first stable token; ICL: once the prompt's share of the text, T2 - len(ref_text) tokens, is in)
and the audio is bit-identical to the whole text's.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from ..audio import SAMPLE_RATE
from ..engine.backend import (
    CANCEL_POLL_S,
    BackendChunk,
    ReferenceNeeds,
    SynthesisParams,
    TextInlet,
    Voice,
)
from ..engine.capabilities import Capabilities
from ..engine.errors import InputError
from ..engine.knobs import knobs_of
from ..engine.model_thread import run_on_passing_thread
from ..models.qwen3_tts.config import GenerationDefaults
from ..serving import DEFAULT_PREFILL_CHUNK, EngineLoop, RequestStream
from .neural import NeuralBackend

log = logging.getLogger(__name__)

DESCRIPTION = (
    "Qwen3-TTS voice cloning. With a transcript of the reference the clone is conditioned on "
    "the reference audio and its words (best); without one, only on a speaker embedding."
)
TASK_TYPES = {"base": "Base", "custom_voice": "CustomVoice", "voice_design": "VoiceDesign"}
OWN_VOICES = {
    "CustomVoice": "name a preset voice",
    "VoiceDesign": "describe the voice in instructions",
}
# The request knobs this backend reads besides the shared ones: generation_config.json's names
# that are sampling knobs; their defaults the checkpoint's (knob_defaults)
KNOBS = knobs_of(GenerationDefaults)


def _choose_decoder_dtype(model: Any, device: str, dtype: str, quantize: str = "auto") -> str:
    """On a float32 CPU model, the codec decoder's format (codec/int8.py choose_decoder_format):
    bfloat16 where the CPU has native bf16 arithmetic (AVX512_BF16 or AMX): there it is 1.7-2x
    faster at ~45 dB SNR against float64; AVX-512 without it is ~1.6x slower, AVX2 ~40x
    (benchmarks/decoder_dtype.py, BENCHMARKS.md); without it, int8 on a VNNI CPU where its audio
    keeps >= 30 dB SNR against float32 (unless `quantize` is "none"), else float32.
    Decided by the CPU's flags and the weights, never by timing: a seeded request's bytes must not
    depend on how busy the machine was at load (a timed choice flipped on a loaded 2-core box).
    Returns the choice, in words, for the log."""
    codec = model.speech_tokenizer
    if codec is None or device != "cpu" or dtype != "float32":
        return "as the weights"
    # no voice has cached a decoder state yet
    return codec.choose_decoder_format(_native_bf16_cpu(), int8=str(quantize).lower() != "none")


# oneDNN's instruction-set names, lowest first (its ONEDNN_MAX_CPU_ISA values; AVX10_1_512 is
# AVX512_CORE_FP16's newer name): a cap below AVX512_CORE_BF16 leaves oneDNN no bf16 arithmetic.
ONEDNN_ISAS = (
    "SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX2_VNNI_2", "AVX512_CORE", "AVX512_CORE_VNNI",
    "AVX512_CORE_BF16", "AVX512_CORE_FP16", "AVX10_1_512", "AVX512_CORE_AMX",
    "AVX10_1_512_AMX", "AVX512_CORE_AMX_FP16", "AVX10_1_512_AMX_FP16",
)  # fmt: skip


def _onednn_allows(isa: str) -> bool:
    """Whether ONEDNN_MAX_CPU_ISA (unset, ALL or DEFAULT: no cap) lets oneDNN use `isa`: how a
    CPU without native bf16 (a 2-vCPU Xeon VM, a Zen 3) is emulated on one that has it."""
    cap = os.environ.get("ONEDNN_MAX_CPU_ISA", "ALL").upper()
    if cap in ("ALL", "DEFAULT", ""):
        return True
    if cap not in ONEDNN_ISAS:
        raise ValueError(f"ONEDNN_MAX_CPU_ISA={cap!r}: not one of oneDNN's ISAs {ONEDNN_ISAS}")
    return ONEDNN_ISAS.index(cap) >= ONEDNN_ISAS.index(isa)


def _native_bf16_cpu() -> str | None:
    """The native bf16 instruction set of this CPU ("AMX" or "AVX512_BF16"), else None
    (also where oneDNN has no bf16 path at all, or ONEDNN_MAX_CPU_ISA caps it below)."""
    import torch

    if not torch.ops.mkldnn._is_mkldnn_bf16_supported():
        return None
    for name, check, isa in (
        ("AMX", "_is_amx_tile_supported", "AVX512_CORE_AMX"),
        ("AVX512_BF16", "_is_avx512_bf16_supported", "AVX512_CORE_BF16"),
    ):
        if getattr(torch.cpu, check, lambda: False)() and _onednn_allows(isa):
            return name
    return None


def served_loop(
    model: Any,
    max_batch: int = NeuralBackend.default_max_batch,
    cache_positions: int | None = None,
    prefill_chunk: int | None = None,
) -> EngineLoop:
    """The model's requests stepped together on one loop thread (tts_core/serving/loop.py: its
    thread starts on first use): its runner (`max_batch` rows over a KV arena of
    `cache_positions`, default max_batch * 1024) and its checked requests, held to that arena."""
    # built on a thread that ends: its RoPE table is a parallel op (engine/model_thread.py)
    runner = run_on_passing_thread(lambda: model.runner(max_batch, cache_positions))
    request = functools.partial(model.request, cache_positions=runner.capacity)
    return EngineLoop(
        runner,
        prefill_chunk or DEFAULT_PREFILL_CHUNK,
        thread_name="tts-scheduler",
        make_request=request,
    )


def decode_step_of(loop: EngineLoop) -> str:
    """How the served decode step runs: "CUDA graphs" when its runner captured them, else
    "eager" (a CPU, cuda_graphs "off", or a capture that failed: logged by cuda_graphs.py)."""
    graphs = loop.runner.graphs
    captured = graphs is not None and any(b.graph is not None for b in graphs.buckets.values())
    return "CUDA graphs" if captured else "eager"


class Qwen3Backend(NeuralBackend):
    name, title = "qwen3", "Qwen3-TTS"
    needs_reference = True  # a Base checkpoint clones; CustomVoice / VoiceDesign: see __init__
    # the transcript makes the closest clone (ICL); without it the speaker embedding alone
    reference = ReferenceNeeds(sample_rate=24_000, transcript="used")
    description = DESCRIPTION
    knobs = KNOBS  # their defaults: the checkpoint's generation_config.json
    chunk_frames = "frames"  # codec frames of 1920 samples
    # reads the language; stream_fed: speaks while the text arrives
    capabilities = Capabilities(takes_text_pieces=True, waits_on_loop=True)

    def __init__(
        self, model: Any, model_name: str, device: str, max_batch: int | None = None
    ) -> None:
        super().__init__(model, model_name, device, max_batch)
        self.weight_format = model.weight_format  # "int8", "float32", ...
        self.weight_format_reason = model.format_decision  # quantize "auto"'s, in words
        codec = model.speech_tokenizer
        self.frame_samples = int(getattr(codec, "samples_per_frame", 1920))
        self.sample_rate = int(getattr(codec, "sample_rate", SAMPLE_RATE))
        self.decode_step = decode_step_of(self.loop)  # "CUDA graphs" or "eager" (info)
        defaults = model.generation_defaults
        self.knob_defaults = {knob.name: getattr(defaults, knob.name) for knob in self.knobs}
        # the checkpoint's type (#41): a CustomVoice / VoiceDesign model speaks with voices
        # it makes itself (`model_voice`), never from a clip
        kind = model.model_type
        self.task_type = TASK_TYPES[kind]  # vLLM-Omni's name of what this checkpoint does
        self.can_clone = self.needs_reference = kind == "base"
        self.speakers = tuple(model.speakers)
        self.capabilities = replace(
            self.capabilities, task_type=self.task_type, speakers=self.speakers
        )
        # False on a 0.6B CustomVoice: its instructions are refused (the official drops them)
        self.instruct_supported = kind != "base" and bool(model.instruct_supported)

    def served_loop(self, model: Any, max_batch: int) -> EngineLoop:
        return served_loop(model, max_batch)

    # --- loading ----------------------------------------------------------------------------
    @classmethod
    def load(
        cls,
        name_or_path: str,
        device: str = "auto",
        dtype: str = "auto",
        quantize: str = "auto",
        max_batch: int | None = None,
        cuda_graphs: str = "auto",
    ) -> Qwen3Backend:
        """NeuralBackend.load with quantize "auto": 8-bit layers on a CPU where they are faster
        and keep >= 30 dB SQNR (see load_model); max_batch: the KV arena is sized for it at
        load; cuda_graphs: "auto" = the served decode step captured as CUDA graphs on CUDA
        (eager elsewhere, or where capture fails), "off" = eager (`decode_step` says which)."""
        backend = super().load(
            name_or_path, device, dtype, max_batch, quantize=quantize, cuda_graphs=cuda_graphs
        )
        log.info("decode step: %s (cuda_graphs %s on %s)", backend.decode_step, cuda_graphs, device)
        return backend

    @staticmethod
    def load_model(
        name_or_path: str,
        device: str,
        dtype: Any,
        quantize: str = "auto",
        cuda_graphs: str = "auto",
    ) -> Any:
        """The library's model, its codec decoder's format chosen (`_choose_decoder_dtype`)."""
        from ..models.qwen3_tts.model import load_model

        model = load_model(
            name_or_path, device=device, dtype=dtype, quantize=quantize, cuda_graphs=cuda_graphs
        )
        dtype_name = str(dtype).removeprefix("torch.")
        decoder = _choose_decoder_dtype(model, device, dtype_name, quantize)
        report = model.quantization
        if report is not None:
            worst = ", ".join(f"{n} {v:.1f}" for n, v in report.worst())
            log.info(
                "quantized to int8: min layer SQNR %.1f dB (worst: %s)", report.min_sqnr_db, worst
            )
        elif model.format_decision:
            log.info("weights: %s", model.format_decision)
        log.info("%s: weights %s, codec decoder %s", name_or_path, model.weight_format, decoder)
        return model

    # --- voices -----------------------------------------------------------------------------
    def create_voice(self, audio: Any, reference_text: str | None) -> Voice:
        """A Base checkpoint's clone (NeuralBackend's); the others make their own voices."""
        if self.task_type != "Base":
            how = OWN_VOICES[self.task_type]
            raise InputError(
                f"This {self.task_type} checkpoint makes its own voices: {how}.", "voice"
            )
        return super().create_voice(audio, reference_text)

    def voice_summary(self, voice: Any, reference_text: str | None) -> dict[str, Any]:
        return {"mode": voice.mode, "transcript": bool(reference_text)}  # "icl" / "xvector"

    def model_voice(self, spec: Any) -> Voice:
        """A CustomVoice preset (`spec.speaker`, optional `spec.instruct`) or a VoiceDesign
        voice (`spec.instruct`: its description); InputError naming what is wrong."""
        if self.task_type == "Base":
            raise InputError("This checkpoint clones voices: give a reference clip.", "voice")
        try:
            if self.task_type == "CustomVoice":
                if not spec.speaker:
                    raise ValueError(f"name a preset voice: one of {', '.join(self.speakers)}")
                voice = self.model.preset_voice(spec.speaker, instruct=spec.instruct)
            else:
                voice = self.model.design_voice(spec.instruct)
        except ValueError as exc:
            param = "instructions" if "instruct" in str(exc) else "voice"
            raise InputError(str(exc), param) from exc
        summary = {"mode": voice.mode, "speaker": voice.speaker, "instruct": bool(voice.instruct)}
        return Voice(self.name, voice, summary)

    # --- requests ---------------------------------------------------------------------------
    def submit(
        self, text: str, voice: Any, params: SynthesisParams, cancel: threading.Event
    ) -> RequestStream:
        return self.loop.submit(text, voice, **self.request_args(params, cancel))

    def stream_fed(
        self, text: TextInlet, voice: Voice, params: SynthesisParams, cancel: threading.Event
    ) -> Iterator[BackendChunk]:
        """`stream` for text that arrives in pieces: the same chunks as the whole text's."""
        from ..models.qwen3_tts.serving.fed import FedRequest

        fed = FedRequest(self.loop, voice.data, **self.request_args(params, cancel))
        text.attach(fed)  # the text so far now, later pieces as they are pushed
        # a cancel, or a piece the model refused (failure: e.g. a prompt over the cache), ends
        # the request even while its row waits for text
        stop = lambda: cancel.is_set() or text.failure is not None  # noqa: E731
        yield from self.delivered(fed.chunks(stop, CANCEL_POLL_S), params, cancel)
        if text.failure is not None:
            raise text.failure

    def request_args(self, params: SynthesisParams, cancel: threading.Event) -> dict[str, Any]:
        """model.request's keywords besides the text and the voice; the knobs that are set by
        name (the others: the checkpoint's generation_config.json, as the model resolves)."""
        language = params.language
        if language != "auto" and language not in self.model.languages:
            raise InputError(f"This model does not speak '{language}'.", "language")
        return dict(
            language=language,
            # the streaming-text layout for every served row: the shortest prompt (earliest
            # first audio), exact to the official's non_streaming_mode=False, and the one
            # text fed in pieces needs; model.generate keeps the official default (#41)
            non_streaming_mode=False,
            first_chunk_frames=params.first_chunk_frames,
            chunk_frames=params.chunk_frames,
            seed=params.seed,
            should_stop=cancel.is_set,  # a Stop frees the row at the next step
            **params.values_of(self.knobs),
        )
