"""What a served TADA request sets by name (`TadaKnobs`), with hume-tada 0.1.9's InferenceOptions
defaults, written only here (FlowOptions and TextSampling read them); the flow head's carry their
served range and labels (contract.knob). No torch: the backend reads them at import."""

from __future__ import annotations

from dataclasses import dataclass

from ..contract import knob


@dataclass(frozen=True)
class TadaKnobs:
    flow_steps: int = knob(
        10,
        1,
        100,
        step=1,
        ui_range=(1, 50),
        label="Flow steps",
        help="Flow-matching steps per token: more cost more time per token.",
    )
    acoustic_cfg: float = knob(
        1.6,
        0.0,
        10.0,
        step=0.1,
        ui_range=(0.0, 5.0),
        label="Acoustic guidance (CFG)",
        help="Classifier-free guidance of the acoustic features (cosine schedule).",
    )
    noise_temperature: float = knob(
        0.9,
        0.0,
        2.0,
        step=0.05,
        label="Noise temperature",
        help="Scale of the flow head's starting noise: lower is steadier.",
    )
    # the text tokens' sampling
    temperature: float = 0.6
    top_p: float = 0.9
    repetition_penalty: float = 1.1
