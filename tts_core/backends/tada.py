"""TADA (tts_core.models.tada) as a declaration over NeuralBackend (neural.py). Audio is 24 kHz,
one stateful decoder pass per stream (20 frames of context, 15 of lookahead); a "frame" of the
chunk sizes is one TADA token (20 ms per codec frame of its duration).

Cloning continues the reference clip aligned to its transcript, so the transcript is required
(upstream runs a 1.1B English ASR model without one; we refuse, naming reference_text); there
is no voice without a clip.

Checkpoints (`checkpoint_folders`): a TADA model folder or Hub id, with the codec folder `codec`
beside it, else the Hub's HumeAI/tada-codec; or a root without config.json holding `model/` and
`codec/` (tools/oracle/tada's layout, e.g. tests/fixtures/tada-tiny-a).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from pathlib import Path
from typing import Any

from ..engine.backend import ReferenceNeeds, SynthesisParams
from ..engine.knobs import knobs_of
from ..models.tada.knobs import TadaKnobs
from ..serving import RequestStream
from .neural import NeuralBackend

log = logging.getLogger(__name__)

HUB_CODEC = "HumeAI/tada-codec"
TADA_RATE, TADA_FRAME_RATE = 24_000, 50
KNOBS = knobs_of(TadaKnobs)  # the flow head's and the text sampling's

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


class TadaBackend(NeuralBackend):
    name, title = "tada", "TADA"
    needs_reference = True  # cloning is prompt continuation: no voice without a clip
    # the transcript is required: create_voice refuses a clip without it, naming the field;
    # a saved voice without one does not fit (server/voice_fit.py)
    reference = ReferenceNeeds(sample_rate=TADA_RATE, transcript="required")
    description = DESCRIPTION
    knobs = KNOBS
    knob_defaults = dataclasses.asdict(TadaKnobs())  # the text sampling's too
    default_max_batch = 4  # models/tada/runner.py's DEFAULT_MAX_BATCH
    chunk_frames = "tokens"
    sample_rate = TADA_RATE
    frame_samples = TADA_RATE // TADA_FRAME_RATE  # one codec frame; a token: 1 or more

    def __init__(
        self, model: Any, model_name: str, device: str = "cpu", max_batch: int | None = None
    ) -> None:
        super().__init__(model, model_name, device, max_batch)
        self.weight_format = str(next(model.lm.parameters()).dtype).removeprefix("torch.")

    @classmethod
    def resolve_device(cls, device: str) -> str:
        """The CPU (asked for another device, it says so in the log and runs on the CPU)."""
        if device not in ("auto", "cpu"):
            log.warning("TADA runs on the CPU only for now (device %s was asked for)", device)
        return "cpu"

    load_model = staticmethod(load_model)

    def submit(
        self, text: str, voice: Any, params: SynthesisParams, cancel: threading.Event
    ) -> RequestStream:
        """model.request's arguments: the knobs as GenerateOptions, the chunk sizes in tokens
        (`language` is ignored)."""
        from ..models.tada.generate import served_options

        return self.loop.submit(
            voice,
            text,
            options=served_options(TadaKnobs(**self.knob_values(params))),
            seed=params.seed,
            first_chunk_tokens=params.first_chunk_frames,
            chunk_tokens=params.chunk_frames,
            should_stop=cancel.is_set,
        )
