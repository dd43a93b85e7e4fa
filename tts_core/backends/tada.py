"""Adapter: our TADA model (tts_core.models.tada) -> the engine's Backend interface.

Every request goes through the model's TadaScheduler (the one batch engine: up to `max_batch`
streams stepped together on one loop thread, each bit-identical to the same request alone; see
models/tada/serving.py), which computes the voices too. Audio is 24 kHz from the KV-cached
decoder transformer and the windowed CNN (20 frames of context, 15 of lookahead), one stateful
pass per stream, so chunks are never marked independent. A "frame" of the chunk-size settings is
one TADA token (its audio length varies with the token's duration: 20 ms per codec frame).

Cloning is prompt continuation of the reference clip aligned to its transcript: the transcript
is REQUIRED (upstream runs a 1.1B English ASR model without one; we refuse, naming
reference_text). There is no voice without a clip.

Checkpoints (the spec in models/specs.py; `checkpoint_folders`): a TADA model folder (its
config.json says diffusion_head_type "vibevoice") or Hub id, with the codec folder `codec`
beside it when there is one, else the Hub's HumeAI/tada-codec; or a root folder without
config.json holding `model/` and `codec/` (the layout tools/oracle/tada writes, e.g.
tests/fixtures/tada-tiny-a).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from ..audio import SAMPLE_RATE
from ..engine.backend import BackendChunk, ReferenceNeeds, SynthesisParams, Voice
from ..engine.capabilities import Capabilities
from ..engine.errors import InputError
from ..engine.knobs import Knob, sampling_knobs
from .device import resolve_dtype

log = logging.getLogger(__name__)

HUB_CODEC = "HumeAI/tada-codec"
TADA_RATE, TADA_FRAME_RATE = 24_000, 50
# hume-tada 0.1.9's InferenceOptions defaults (FlowOptions / TextSampling in models/tada)
FLOW_STEPS, ACOUSTIC_CFG, NOISE_TEMPERATURE = 10, 1.6, 0.9
TEXT_SAMPLING = {"temperature": 0.6, "top_p": 0.9, "repetition_penalty": 1.1}
# The request knobs this backend reads (besides the shared seed and chunk sizes)
KNOBS = (
    Knob("flow_steps", int, 1, 100, default=FLOW_STEPS, step=1, ui_range=(1, 50),
         label="Flow steps",
         help="Flow-matching steps per token: more cost more time per token."),
    Knob("acoustic_cfg", float, 0.0, 10.0, default=ACOUSTIC_CFG, step=0.1,
         ui_range=(0.0, 5.0), label="Acoustic guidance (CFG)",
         help="Classifier-free guidance of the acoustic features (cosine schedule)."),
    Knob("noise_temperature", float, 0.0, 2.0, default=NOISE_TEMPERATURE, step=0.05,
         label="Noise temperature",
         help="Scale of the flow head's starting noise: lower is steadier."),
    *sampling_knobs(*TEXT_SAMPLING),  # the text tokens' (defaults: sampling_defaults)
)  # fmt: skip

DESCRIPTION = (
    "TADA (Hume AI) voice cloning: it continues the reference clip, aligned to its transcript, "
    "so a clip needs its transcript (reference_text). The flow head's steps, acoustic "
    "guidance and noise temperature and the text sampling are the knobs; 24 kHz."
)


def checkpoint_folders(name_or_path: str | Path) -> tuple[str, str]:
    """(model, codec) for TadaModel.from_pretrained: a root with model/ and codec/ (no
    config.json); a model folder with `codec` beside it; else the codec from the Hub."""
    path = Path(name_or_path).expanduser()
    if path.is_dir() and not (path / "config.json").exists() and (path / "codec").is_dir():
        return str(path / "model"), str(path / "codec")
    if path.is_dir() and (path.parent / "codec").is_dir():
        return str(path), str(path.parent / "codec")
    return str(name_or_path), HUB_CODEC


def load_model(name_or_path: str | Path, device: str = "cpu", dtype: Any = None) -> Any:
    """The library's TadaModel for a checkpoint (`checkpoint_folders`); CPU only (the model
    has no device path yet), dtype None = float32."""
    import torch

    from ..models.tada.model import TadaModel

    if str(device) not in ("cpu", "auto"):
        raise ValueError(f"TADA runs on the CPU only for now (device {device!r} was asked for)")
    model, codec = checkpoint_folders(name_or_path)
    return TadaModel.from_pretrained(model, codec, dtype=dtype or torch.float32)


class TadaBackend:
    name = "tada"
    can_clone = True
    needs_reference = True  # cloning is prompt continuation: no voice without a clip
    # the transcript is required: create_voice refuses a clip without it, naming the field;
    # a saved voice without one does not fit (server/voice_fit.py)
    reference = ReferenceNeeds(sample_rate=TADA_RATE, transcript="required")
    description = DESCRIPTION
    knobs = KNOBS
    # English (tada-1b): the language follows the text; text in pieces is buffered until done;
    # one exact stateful decoder pass: no crossfade
    capabilities = Capabilities(reads_language=False)
    weight_format_reason, decode_step = "", None

    def __init__(self, model: Any, model_name: str, max_batch: int | None = None) -> None:
        from ..serving import EngineLoop

        self.model = model
        self.model_name = model_name
        self.device = "cpu"
        self.sample_rate = TADA_RATE
        self.frame_samples = TADA_RATE // TADA_FRAME_RATE  # one codec frame; a token: 1 or more
        self.weight_format = str(next(model.lm.parameters()).dtype).removeprefix("torch.")
        self.scheduler = EngineLoop(
            model.runner(max_batch), make_request=model.request, thread_name="tts-tada"
        )
        self.default_concurrency = self.scheduler.max_batch

    def close(self) -> None:
        self.scheduler.close()

    @classmethod
    def load(
        cls, name_or_path: str, device: str = "auto", dtype: str = "auto",
        max_batch: int | None = None,
    ) -> TadaBackend:  # fmt: skip
        """A checkpoint (module doc) on the CPU (asked for another device, it says so in the
        log and runs on the CPU); dtype "auto": as backends.device.resolve_dtype for the CPU."""
        import torch

        if device not in ("auto", "cpu"):
            log.warning("TADA runs on the CPU only for now (device %s was asked for)", device)
        dtype = resolve_dtype(dtype, "cpu")
        model = load_model(name_or_path, "cpu", getattr(torch, dtype))
        log.info("loaded TADA %s on cpu (%s, %d Hz)", name_or_path, dtype, TADA_RATE)
        return cls(model, str(name_or_path), max_batch=max_batch)

    def sampling_defaults(self) -> dict[str, Any]:
        """Each knob's default: the official InferenceOptions'."""
        return {**{knob.name: knob.default for knob in KNOBS[:3]}, **TEXT_SAMPLING}

    def create_voice(self, audio: np.ndarray | None, reference_text: str | None) -> Voice:
        """audio: 24 kHz mono float32 reference with its transcript (both required)."""
        if audio is None:
            raise InputError("TADA clones a voice: give a reference clip and its transcript.",
                             "reference")  # fmt: skip
        if not reference_text or not reference_text.strip():
            raise InputError(
                "TADA needs the reference clip's transcript: set reference_text to the words "
                "the clip says.",
                "reference_text",
            )
        clip = np.asarray(audio)
        if clip.ndim != 1 or clip.size == 0 or not np.all(np.isfinite(clip)):
            raise InputError("Reference clip: expected finite mono samples.", "reference")
        try:
            # on the scheduler's thread, as every computation of the model (serving/loop.py)
            prompt = self.scheduler.call(self.model.create_voice, clip.astype(np.float32),
                                         SAMPLE_RATE, reference_text)  # fmt: skip
        except ValueError as exc:
            raise InputError(f"Reference clip: {exc}", "reference") from exc
        return Voice(self.name, prompt, {"mode": "continuation", "transcript": True})

    def options(self, params: SynthesisParams) -> Any:
        """The request's GenerateOptions: the official defaults with its knob values."""
        from ..models.tada.generate import DEFAULT_OPTIONS

        values = {**self.sampling_defaults(), **params.values_of(self.knobs)}
        flow = dataclasses.replace(DEFAULT_OPTIONS.flow, steps=int(values["flow_steps"]),
                                   acoustic_cfg=float(values["acoustic_cfg"]),
                                   noise_temperature=float(values["noise_temperature"]))  # fmt: skip
        text = dataclasses.replace(DEFAULT_OPTIONS.text,
                                   **{name: float(values[name]) for name in TEXT_SAMPLING})  # fmt: skip
        return dataclasses.replace(DEFAULT_OPTIONS, flow=flow, text=text)

    def stream(
        self, text: str, voice: Voice, params: SynthesisParams, cancel: threading.Event
    ) -> Iterator[BackendChunk]:
        """Tokens decoded `first_chunk_frames` then `chunk_frames` at a time; a Stop frees the
        row at the scheduler's next step. `language` is ignored."""
        try:
            chunks = self.scheduler.submit(
                voice.data, text, options=self.options(params), seed=params.seed,
                first_chunk_tokens=params.first_chunk_frames, chunk_tokens=params.chunk_frames,
                should_stop=cancel.is_set,
            )  # fmt: skip
        except ValueError as exc:
            raise InputError(str(exc)) from exc
        try:
            for chunk in chunks:
                yield BackendChunk(chunk.audio, independent=False, frames=chunk.tokens,
                                   stop_reason=chunk.stop_reason, batch_size=chunk.batch_size)  # fmt: skip
                if cancel.is_set():
                    return
        finally:
            chunks.close()
