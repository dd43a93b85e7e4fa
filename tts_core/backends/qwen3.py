"""Adapter: our Qwen3-TTS model (tts_core.load_model) -> the engine's Backend interface.

Every request goes through the model's batch scheduler (continuous batching: up to
`max_batch` streams step together; see models/qwen3_tts/serving). Chunks of one stream come
from one exact, stateful decoder pass, so they are never marked independent: the engine
concatenates them without crossfades.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np

from ..audio import SAMPLE_RATE
from ..engine.backend import QWEN3_SAMPLING, BackendChunk, SynthesisParams, Voice
from ..engine.errors import InputError

log = logging.getLogger(__name__)

DESCRIPTION = (
    "Qwen3-TTS voice cloning. With a transcript of the reference the clone is conditioned on "
    "the reference audio and its words (best); without one, only on a speaker embedding."
)
DEFAULT_MAX_BATCH = 8


def resolve_device(device: str) -> str:
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("--device cuda was asked for, but no CUDA device is available")
    return device


def _decoder_dtype(device: str, dtype: str):  # noqa: ANN202 - torch.dtype | None
    """bfloat16 for the codec decoder on a CPU with native bf16 (AVX512_BF16 / AMX): 1.7-2x
    faster there, ~45 dB SNR against float64 on well-conditioned and real-size random decoders
    (benchmarks/decoder_dtype.py). Elsewhere the model's own dtype (bf16 would be emulated)."""
    import torch

    if device == "cpu" and dtype == "float32" and torch.ops.mkldnn._is_mkldnn_bf16_supported():
        return torch.bfloat16
    return None


class Qwen3Backend:
    name = "qwen3"
    can_clone = True
    needs_reference = True
    independent_phrases = False  # one exact stateful decoder pass: never crossfade
    description = DESCRIPTION

    def __init__(
        self, model: Any, model_name: str, device: str, max_batch: int = DEFAULT_MAX_BATCH
    ) -> None:
        from ..models.qwen3_tts.serving import Scheduler

        self.model = model
        self.model_name = model_name
        self.device = device
        self.weight_format = getattr(model, "weight_format", None)  # "int8", "float32", ...
        codec = getattr(model, "speech_tokenizer", None)
        self.frame_samples = int(getattr(codec, "samples_per_frame", 1920))
        self.sample_rate = int(getattr(codec, "sample_rate", SAMPLE_RATE))
        self.scheduler = Scheduler(model, max_batch=max_batch)  # its thread starts on first use
        self.default_concurrency = self.scheduler.max_batch  # the engine admits as many

    @classmethod
    def load(
        cls,
        name_or_path: str,
        device: str = "auto",
        dtype: str = "auto",
        quantize: str = "auto",
        max_batch: int = DEFAULT_MAX_BATCH,
    ) -> Qwen3Backend:
        """dtype "auto": bfloat16 on CUDA, float32 on CPU; quantize "auto": 8-bit layers on a
        CPU where they keep >= 30 dB SQNR on a calibration run (see load_model); max_batch:
        streams decoded together (the KV arena is sized for it at load)."""
        import torch

        import tts_core

        device = resolve_device(device)
        if dtype == "auto":
            dtype = "bfloat16" if device == "cuda" else "float32"
        model = tts_core.load_model(
            name_or_path,
            device=device,
            dtype=getattr(torch, dtype),
            quantize=quantize,
            decoder_dtype=_decoder_dtype(device, dtype),
        )
        report = model.quantization
        if report is not None:
            log.info("quantized to int8: min layer SQNR %.1f dB (worst: %s)",
                     report.min_sqnr_db, ", ".join(f"{n} {v:.1f}" for n, v in report.worst()))  # fmt: skip
        elif quantize == "auto" and device == "cpu":
            log.info("kept %s weights: int8 did not hold the SQNR bound or cannot run here", dtype)
        codec = model.speech_tokenizer
        decoder = str(codec.decoder_dtype).removeprefix("torch.") if codec is not None else "-"
        log.info("loaded %s on %s (%s, weights %s, codec decoder %s)", name_or_path, device,
                 dtype, model.weight_format, decoder)  # fmt: skip
        return cls(model, str(name_or_path), device, max_batch=max_batch)

    def sampling_defaults(self) -> dict[str, Any]:
        defaults = self.model.generation_defaults
        return {name: getattr(defaults, name) for name in QWEN3_SAMPLING}

    def create_voice(self, audio: np.ndarray | None, reference_text: str | None) -> Voice:
        if audio is None:
            raise InputError(
                "This voice needs a reference clip: upload or record 3-10 s of speech."
            )
        try:
            # on the scheduler's thread, as every computation of the model (see its module doc)
            voice = self.scheduler.call(self.model.create_voice, audio, SAMPLE_RATE,
                                        ref_text=reference_text)  # fmt: skip
        except ValueError as exc:  # the model's own checks on the clip
            raise InputError(f"Reference clip: {exc}") from exc
        mode = getattr(voice, "mode", "icl" if reference_text else "xvector")
        return Voice(self.name, voice, {"mode": mode, "transcript": bool(reference_text)})

    def stream(
        self, text: str, voice: Voice, params: SynthesisParams, cancel: threading.Event
    ) -> Iterator[BackendChunk]:
        language = params.language
        if language != "auto" and language not in self.model.languages:
            raise InputError(f"This model does not speak '{language}'.")
        chunks = self.scheduler.submit(
            text,
            voice.data,
            language,
            first_chunk_frames=params.first_chunk_frames,
            chunk_frames=params.chunk_frames,
            seed=params.seed,
            should_stop=cancel.is_set,  # a Stop frees the row at the next step
            **params.sampling_kwargs(),
        )
        try:
            for chunk in chunks:
                reason = chunk.stop_reason if chunk.final else None
                yield BackendChunk(chunk.audio, independent=False, frames=chunk.frames,
                                   stop_reason=reason, batch_size=chunk.batch_size)  # fmt: skip
                if cancel.is_set():
                    return
        finally:
            chunks.close()  # frees the row and its cache span now, not at garbage collection
