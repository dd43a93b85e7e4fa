"""Qwen3-TTS's declaration for the shared 8-bit toolkit (tts_core/quant: the flow, Int8Linear,
the speed check, the store): which layers become int8 and how its calibration runs.

1. calibrate: a short greedy generation in the loaded float dtype records the inputs of every
   projection (the prefill and a few frames: talker and code-predictor activations);
2. smooth (SmoothQuant, quant/calibration.py): the 1/s is folded exactly into what produces x:
   the RMSNorm weight before q/k/v and before gate/up, the rows of v_proj before o_proj (per kv
   head, shared by the query heads that read it), the rows of up_proj before down_proj;
3. q/k/v and gate/up are fused, and every projection of the talker's and the code predictor's
   layers becomes an Int8Linear;
4. so do the code predictor's 15 lm_heads (each is read once a frame: 15 of them weigh as much
   as 1.6 of its layers); the talker's codec_head, the embeddings and the text projection stay
   in the float dtype;
5. the talker -> code predictor projection (1.7B: 2048 -> 1024, run by all 15 passes, ~13 ms
   of a float32 frame) becomes Int8Linear only where it holds MIN_SQNR_DB on its own: it has
   no norm to fold smoothing into, so it never decides for the other layers.

`auto`'s speed check times the talker step and the code predictor's 15 passes at 1 and 8 rows.
The store reads a saved outcome before the checkpoint (SavedInt8.drop: the float projections it
replaces are never loaded).
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch
from torch import nn

from ...quant import quantize as toolkit
from ...quant.calibration import record_inputs, smoothing_scale
from ...quant.quantize import MIN_SQNR_DB, Block, Candidate, Int8Target, QuantizationReport
from ...quant.speed import TimedStack
from ..layers import DecoderLayer, DecoderStack
from .checkpoint import REQUIRED_FILES

__all__ = ["MIN_SQNR_DB", "Qwen3Int8", "calibrate", "quantize_model"]

# A Qwen3TTSModel, reached through its public members only: model.py's load_model quantizes
# through this module, which does not import it back.
Qwen3TTSModel = Any

CALIBRATION_TEXT = (
    "Calibration: the quick brown fox jumps over the lazy dog, and then it asks, quietly, "
    "whether 42 numbers and a few names like Zoë or Ünal still sound right."
)
CALIBRATION_FRAMES = 4  # + the prefill: each code-predictor layer sees 60 passes, each talker
# layer the prompt (~50 positions) and 4 steps: enough rows for channel maxima and SQNR
MAX_ROWS_KEPT = 32  # per call recorded
# Each fused projection's input is recorded at one of the float projections that read it
RECORD_AT = {
    "self_attn.qkv_proj": "self_attn.q_proj",
    "self_attn.o_proj": "self_attn.o_proj",
    "mlp.gate_up_proj": "mlp.gate_proj",
    "mlp.down_proj": "mlp.down_proj",
}
QKV, OUT, GATE_UP, DOWN = RECORD_AT
# The files the quantized talker is computed from: the weights, the architecture, and what the
# calibration run reads (the prompt's tokens, the generation defaults). Not the codec.
IDENTITY_FILES = tuple(f for f in REQUIRED_FILES if not f.startswith("speech_tokenizer/"))
STACK_PATHS = {"talker": "model", "code_predictor": "code_predictor.model"}  # in the talker
PROJECTION = "code_predictor.small_to_mtp_projection"


def stacks(model: Qwen3TTSModel) -> dict[str, DecoderStack]:
    return {"talker": model.talker.model, "code_predictor": model.talker.code_predictor.model}


def quantize_model(
    model: Qwen3TTSModel,
    smooth: bool = True,
    min_sqnr_db: float | None = None,
    check_speed: bool | None = None,
) -> QuantizationReport:
    """Make the decoder stacks int8 in place (module doc; the flow: quant/quantize.py)."""
    return toolkit.quantize(Qwen3Int8(model), smooth, min_sqnr_db, check_speed)


@torch.inference_mode()
def calibrate(model: Qwen3TTSModel) -> dict:
    """(rows, in) float32 inputs from a greedy run, keyed (stack, layer index, projection)
    for the layers (RECORD_AT) and by name for the heads (Qwen3Int8.heads)."""
    target = Qwen3Int8(model)

    def run() -> None:
        voice = model.silent_voice()
        prompt, settings = model.plan(
            CALIBRATION_TEXT,
            voice,
            "english",
            greedy=True,
            length_cap=False,
            max_new_tokens=CALIBRATION_FRAMES + 1,
        )
        for _ in model.frames(prompt, settings):
            pass

    modules = {**target.recorded_modules(), **target.heads()}
    return record_inputs(modules, run, keep=lambda x: x[-MAX_ROWS_KEPT:])


def smoothing_scales(
    layer: DecoderLayer, inputs: dict[str, torch.Tensor]
) -> dict[str, torch.Tensor]:
    """Per input channel of each projection group, the SmoothQuant scale (module doc)."""
    attn, mlp = layer.self_attn, layer.mlp

    def scale(group: str, *consumers: nn.Linear) -> torch.Tensor:
        return smoothing_scale(inputs[group], [c.weight for c in consumers])

    scales = {}
    if QKV in inputs:
        scales[QKV] = scale(QKV, attn.q_proj, attn.k_proj, attn.v_proj)
    if GATE_UP in inputs:
        scales[GATE_UP] = scale(GATE_UP, mlp.gate_proj, mlp.up_proj)
    if OUT in inputs:
        scales[OUT] = _shared_per_kv_head(scale(OUT, attn.o_proj), attn)
    if DOWN in inputs:
        scales[DOWN] = scale(DOWN, mlp.down_proj)
    return scales


def fused_weights(
    layer: DecoderLayer, scales: dict[str, torch.Tensor]
) -> dict[str, tuple[torch.Tensor, None]]:
    """{projection: ((out, in) float32 weight, no bias)} of the fused, smoothed projections:
    the columns times the input's scale, and the rows of v / up divided by the scale of the
    input they produce (o_proj's / down_proj's)."""
    attn, mlp = layer.self_attn, layer.mlp
    one = torch.ones(())

    def w(linear: nn.Linear) -> torch.Tensor:
        return linear.weight.detach().float()

    s_attn, s_mlp = scales.get(QKV, one), scales.get(GATE_UP, one)
    s_o, s_down = scales.get(OUT, one), scales.get(DOWN, one)
    v_rows = (
        s_o.view(attn.kv_heads, attn.heads // attn.kv_heads, attn.head_dim)[:, 0]
        if s_o.dim()
        else one
    )
    qkv = (
        torch.cat([w(attn.q_proj), w(attn.k_proj), w(attn.v_proj) / v_rows.reshape(-1, 1)]) * s_attn
    )
    gate_up = torch.cat([w(mlp.gate_proj), w(mlp.up_proj) / s_down.reshape(-1, 1)]) * s_mlp
    return {
        QKV: (qkv, None),
        OUT: (w(attn.o_proj) * s_o, None),
        GATE_UP: (gate_up, None),
        DOWN: (w(mlp.down_proj) * s_down, None),
    }


def _shared_per_kv_head(s: torch.Tensor, attn: nn.Module) -> torch.Tensor:
    """o_proj's input channel (head h, dim d) comes from v row (kv head h // group, d), as
    SDPA's enable_gqa pairs them: heads that share a kv head share the scale (the largest)."""
    group = attn.heads // attn.kv_heads
    per_kv = s.view(attn.kv_heads, group, attn.head_dim).amax(dim=1, keepdim=True)
    return per_kv.expand(attn.kv_heads, group, attn.head_dim).reshape(-1)


def _float_projections(layer: DecoderLayer) -> list[nn.Linear]:
    attn, mlp = layer.self_attn, layer.mlp
    return [
        attn.q_proj,
        attn.k_proj,
        attn.v_proj,
        attn.o_proj,
        mlp.gate_proj,
        mlp.up_proj,
        mlp.down_proj,
    ]


def _timed_floats(layer: DecoderLayer) -> list[tuple[nn.Module, int]]:
    return [(m, m.in_features) for m in _float_projections(layer)]


class Qwen3Int8(Int8Target):
    """The talker's decoder stacks and the code predictor's heads (module doc)."""

    speed_rows = (1, 8)  # one stream, and the default batch of streams decoded together
    record_at = RECORD_AT
    folds = {QKV: ("input_layernorm.weight",), GATE_UP: ("post_attention_layernorm.weight",)}
    smoothing_scales = staticmethod(smoothing_scales)
    smoothed_weights = staticmethod(fused_weights)

    def __init__(self, model: Qwen3TTSModel) -> None:
        self.model, self.root = model, model.talker
        self.float_dtype, self.device = model.talker.dtype, model.talker.device

    def blocks(self) -> list[Block]:
        return [
            Block(f"{name}.layers.{i}", f"{STACK_PATHS[name]}.layers.{i}", layer, (name, i))
            for name, stack in stacks(self.model).items()
            for i, layer in enumerate(stack.layers)
        ]

    def heads(self) -> dict[str, nn.Linear]:
        """The code predictor's heads and its input projection (where it has one), by name."""
        predictor = self.model.talker.code_predictor
        heads = {f"code_predictor.lm_head.{i}": head for i, head in enumerate(predictor.lm_head)}
        if isinstance(predictor.small_to_mtp_projection, nn.Linear):
            heads[PROJECTION] = predictor.small_to_mtp_projection
        return heads

    # ---------------------------------------------------------------- speed check
    def timed_stacks(self) -> list[TimedStack]:
        passes = {"talker": 1, "code_predictor": len(self.model.talker.code_predictor.lm_head)}
        return [
            self.timed_stack(stack.layers, passes[name], _timed_floats)
            for name, stack in stacks(self.model).items()
        ]

    def speed_key(self) -> dict:
        shapes = {
            name: [
                len(stack.layers),
                *(tuple(m.weight.shape) for m in _float_projections(stack.layers[0])),
            ]
            for name, stack in stacks(self.model).items()
        }
        return {
            "dtype": str(self.float_dtype),
            "shapes": shapes,
            "passes": len(self.model.talker.code_predictor.lm_head),
        }

    # ---------------------------------------------------------------- quantizing
    def calibrate(self) -> dict:
        return calibrate(self.model)

    def other_candidates(self, inputs: dict) -> list[Candidate]:
        return [
            Candidate(
                name,
                head.weight.detach().float(),
                None if head.bias is None else head.bias.detach().float(),
                inputs.get(name),
                optional_bound=MIN_SQNR_DB if name == PROJECTION else None,
            )
            for name, head in self.heads().items()
        ]

    # ---------------------------------------------------------------- the store
    @classmethod
    def identity_files(cls, checkpoint: Path) -> tuple[str, ...]:
        return IDENTITY_FILES

    @classmethod
    def weights_file(cls, checkpoint: Path) -> str:
        return "model.safetensors"

    @classmethod
    def code_paths(cls) -> list[Path]:
        """The package (the calibration run is the model's own decode on the serving engine),
        the shared layers and checkpoint loader, and the engine."""
        package = Path(__file__).resolve().parent
        models = package.parent
        return [
            *sorted(package.rglob("*.py")),
            models / "layers.py",
            models / "checkpoint.py",
            *sorted((models.parent / "serving").glob("*.py")),
        ]

    @classmethod
    def calibration_key(cls) -> dict:
        return {
            "text": CALIBRATION_TEXT,
            "frames": CALIBRATION_FRAMES,
            "max_rows_kept": MAX_ROWS_KEPT,
        }

    @classmethod
    def storage_free(cls, checkpoint: Path, dtype: torch.dtype) -> Qwen3Int8:
        from .config import load_config
        from .talker import Talker

        return cls(SimpleNamespace(talker=Talker(load_config(checkpoint).talker).to(dtype)))

    @staticmethod
    def replace(talker: nn.Module, name: str, module: nn.Module) -> None:
        """A module (or a placeholder) in place; q/k/v and gate/up go where they are fused."""
        parent_name, _, attr = name.rpartition(".")
        parent = talker.get_submodule(parent_name)
        if attr == "qkv_proj" and "q_proj" in parent._modules:
            del parent.q_proj, parent.k_proj, parent.v_proj
        elif attr == "gate_up_proj" and "gate_proj" in parent._modules:
            del parent.gate_proj, parent.up_proj
        setattr(parent, attr, module)
