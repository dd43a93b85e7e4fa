"""Quantize a loaded Qwen3-TTS model to 8-bit decoder stacks, with outlier smoothing.

quantize_model(model):
1. calibrate: a short greedy generation in the loaded float dtype records, per linear layer,
   the inputs it saw (the prefill and a few frames: talker and code-predictor activations);
2. smooth (SmoothQuant, alpha 0.5): per input channel j, s_j = sqrt(max|x_j| / max|W[:, j]|);
   x_j / s_j and W[:, j] * s_j give the same product, while an activation outlier channel no
   longer sets the per-row scale of every other channel. The 1/s is folded exactly into what
   produces x: the RMSNorm weight before q/k/v and before gate/up, the rows of v_proj before
   o_proj (per kv head, shared by the query heads that read it), the rows of up_proj before
   down_proj;
3. fuse q/k/v and gate/up, and replace every projection of the talker's and the code
   predictor's layers by an Int8Linear (per-row activation scales: see int8.py);
4. the code predictor's 15 lm_heads become Int8Linear too (each is read once a frame: 15 of
   them weigh as much as 1.6 of its layers); the talker's codec_head, the embeddings and the
   text projection stay in the float dtype;
5. the talker -> code predictor projection (1.7B: 2048 -> 1024, run by all 15 passes, ~13 ms
   of a float32 frame) becomes Int8Linear only where it holds the SQNR bound on its own: it has
   no norm to fold smoothing into, so it never decides for the other layers;
6. report each layer's output SQNR on the calibration inputs against the float layer.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

from ..layers import DecoderLayer, DecoderStack
from .int8 import Int8Linear, sqnr_db

if TYPE_CHECKING:
    from .model import Qwen3TTSModel

CALIBRATION_TEXT = (
    "Calibration: the quick brown fox jumps over the lazy dog, and then it asks, quietly, "
    "whether 42 numbers and a few names like Zoë or Ünal still sound right."
)
CALIBRATION_FRAMES = 4  # + the prefill: each code-predictor layer sees 60 passes, each talker
# layer the prompt (~50 positions) and 4 steps: enough rows for channel maxima and SQNR
MAX_ROWS_KEPT = 32  # per call recorded
MAX_ROWS = 128  # per layer in all: the SQNR products run at M = rows, and load time counts
SMOOTH_ALPHA = 0.5
# Each input is recorded once, at one of the projections that read it: q/k/v share theirs, as
# do gate/up (the keys are the groups smoothing_scales and fused_weights use).
RECORD_AT = {"attn_in": "self_attn.q_proj", "o_in": "self_attn.o_proj",
             "mlp_in": "mlp.gate_proj", "down_in": "mlp.down_proj"}  # fmt: skip
MIN_SQNR_DB = 30.0  # `auto` keeps int8 only if every layer holds this on the calibration run


@dataclass
class QuantizationReport:
    mode: str
    layer_sqnr_db: dict[str, float] = field(default_factory=dict)
    applied: bool = False

    @property
    def min_sqnr_db(self) -> float:
        return min(self.layer_sqnr_db.values(), default=float("inf"))

    def worst(self, count: int = 3) -> list[tuple[str, float]]:
        return sorted(self.layer_sqnr_db.items(), key=lambda item: item[1])[:count]


def stacks(model: Qwen3TTSModel) -> dict[str, DecoderStack]:
    return {"talker": model.talker.model, "code_predictor": model.talker.code_predictor.model}


@torch.inference_mode()
def quantize_model(
    model: Qwen3TTSModel, smooth: bool = True, min_sqnr_db: float | None = None
) -> QuantizationReport:
    """Make the decoder stacks int8 in place (see module doc) and return per-layer SQNR.

    With `min_sqnr_db`, nothing is changed unless every layer reaches it on the calibration
    run (`report.applied` says which): the float model stays exactly as loaded otherwise.
    """
    inputs = calibrate(model)
    report, plans = QuantizationReport("int8"), []
    for stack_name, stack in stacks(model).items():
        for index, layer in enumerate(stack.layers):
            prefix = f"{stack_name}.layers.{index}"
            mine = {
                g: inputs[(stack_name, index, g)]
                for g in RECORD_AT
                if (stack_name, index, g) in inputs
            }
            scales = smoothing_scales(layer, mine) if smooth else {}
            modules = {}
            for group, (attr, weight) in fused_weights(layer, scales).items():
                modules[attr] = Int8Linear(weight)
                if group in mine:
                    x = mine[group] / scales[group] if group in scales else mine[group]
                    report.layer_sqnr_db[f"{prefix}.{attr}"] = sqnr_db(
                        x @ weight.t(), modules[attr](x)
                    )
            plans.append((layer, scales, modules))
    heads = model.talker.code_predictor.lm_head
    quantized_heads = [Int8Linear.from_linear(head) for head in heads]
    for index, (head, quantized) in enumerate(zip(heads, quantized_heads, strict=True)):
        x = inputs.get(("code_predictor", "lm_head", index))
        if x is not None:
            report.layer_sqnr_db[f"code_predictor.lm_head.{index}"] = sqnr_db(
                x @ head.weight.detach().float().t(), quantized(x)
            )
    if min_sqnr_db is not None and report.min_sqnr_db < min_sqnr_db:
        return report
    for layer, scales, modules in plans:
        _install(layer, scales, modules)
    for index, quantized in enumerate(quantized_heads):
        heads[index] = quantized
    _quantize_projection(model, inputs.get(("code_predictor", "projection")), report)
    report.applied = True
    return report


def _quantize_projection(model: Qwen3TTSModel, x: torch.Tensor | None,
                         report: QuantizationReport) -> None:  # fmt: skip
    """Step 5 of the module doc: in place, and in the report, only if it holds MIN_SQNR_DB."""
    predictor = model.talker.code_predictor
    projection = predictor.small_to_mtp_projection
    if not isinstance(projection, nn.Linear) or x is None:
        return
    quantized = Int8Linear.from_linear(projection)
    sqnr = sqnr_db(F.linear(x, projection.weight.detach().float(),
                            projection.bias.detach().float()), quantized(x))  # fmt: skip
    if sqnr >= MIN_SQNR_DB:
        report.layer_sqnr_db["code_predictor.small_to_mtp_projection"] = sqnr
        predictor.small_to_mtp_projection = quantized


@torch.inference_mode()
def calibrate(model: Qwen3TTSModel) -> dict[tuple, torch.Tensor]:
    """(rows, in) float32 inputs from a greedy run, keyed (stack, layer index, input group)
    for the layers (see RECORD_AT) and ("code_predictor", "lm_head", i) for the heads."""
    from .decode_loop import FrameLoop, resolve_settings
    from .model import Voice

    recorded: dict[tuple, list[torch.Tensor]] = defaultdict(list)
    hooks = []
    for stack_name, stack in stacks(model).items():
        for index, layer in enumerate(stack.layers):
            for group, name in RECORD_AT.items():
                sink = recorded[(stack_name, index, group)]
                hooks.append(layer.get_submodule(name).register_forward_pre_hook(_recorder(sink)))
    for index, head in enumerate(model.talker.code_predictor.lm_head):
        sink = recorded[("code_predictor", "lm_head", index)]
        hooks.append(head.register_forward_pre_hook(_recorder(sink)))
    projection = model.talker.code_predictor.small_to_mtp_projection
    if isinstance(projection, nn.Linear):
        sink = recorded[("code_predictor", "projection")]
        hooks.append(projection.register_forward_pre_hook(_recorder(sink)))
    try:
        voice = Voice(speaker_embedding=torch.zeros(
            model.config.talker.stack.hidden_size, device=model.device, dtype=model.dtype))  # fmt: skip
        prompt = model._prompt(CALIBRATION_TEXT, voice, "english")
        settings = resolve_settings(model.generation_defaults,
                                    {"max_new_tokens": CALIBRATION_FRAMES + 1}, greedy=True)  # fmt: skip
        loop = FrameLoop(model.talker, model.special, prompt, settings)
        try:
            for _ in loop.frames():
                pass
        finally:
            loop.release()
    finally:
        for hook in hooks:
            hook.remove()
    return {key: _spread(torch.cat(rows), MAX_ROWS) for key, rows in recorded.items() if rows}


def _spread(rows: torch.Tensor, count: int) -> torch.Tensor:
    """At most `count` rows, evenly spaced (prefill and decode steps both represented)."""
    if rows.shape[0] <= count:
        return rows
    return rows[torch.linspace(0, rows.shape[0] - 1, count).round().long()]


def _recorder(sink: list[torch.Tensor]):  # noqa: ANN202
    def hook(_module: nn.Module, args: tuple) -> None:
        x = args[0].detach().reshape(-1, args[0].shape[-1]).float()
        sink.append(x[-MAX_ROWS_KEPT:].clone())

    return hook


# ------------------------------------------------------------------------------ smoothing
def smoothing_scales(
    layer: DecoderLayer, inputs: dict[str, torch.Tensor]
) -> dict[str, torch.Tensor]:
    """Per input channel of each projection group, the SmoothQuant scale (module doc)."""
    attn, mlp = layer.self_attn, layer.mlp
    scales = {}
    if "attn_in" in inputs:
        scales["attn_in"] = _scales(inputs["attn_in"], (attn.q_proj, attn.k_proj, attn.v_proj))
    if "mlp_in" in inputs:
        scales["mlp_in"] = _scales(inputs["mlp_in"], (mlp.gate_proj, mlp.up_proj))
    if "o_in" in inputs:
        scales["o_in"] = _shared_per_kv_head(_scales(inputs["o_in"], (attn.o_proj,)), attn)
    if "down_in" in inputs:
        scales["down_in"] = _scales(inputs["down_in"], (mlp.down_proj,))
    return scales


def fused_weights(
    layer: DecoderLayer, scales: dict[str, torch.Tensor]
) -> dict[str, tuple[str, torch.Tensor]]:
    """{input group: (attribute, (out, in) float32 weight)} of the fused, smoothed projections:
    the columns times the input's scale, and the rows of v / up divided by the scale of the
    input they produce (o_proj's / down_proj's)."""
    attn, mlp = layer.self_attn, layer.mlp
    one = torch.ones(())

    def w(linear: nn.Linear) -> torch.Tensor:
        return linear.weight.detach().float()

    s_attn, s_mlp = scales.get("attn_in", one), scales.get("mlp_in", one)
    s_o, s_down = scales.get("o_in", one), scales.get("down_in", one)
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
        "attn_in": ("self_attn.qkv_proj", qkv),
        "o_in": ("self_attn.o_proj", w(attn.o_proj) * s_o),
        "mlp_in": ("mlp.gate_up_proj", gate_up),
        "down_in": ("mlp.down_proj", w(mlp.down_proj) * s_down),
    }


def _install(layer: DecoderLayer, scales: dict[str, torch.Tensor], modules: dict) -> None:
    """Fold the input scales of q/k/v and gate/up into their RMSNorm weights and put the int8
    modules in place of the float projections."""
    attn, mlp = layer.self_attn, layer.mlp
    with torch.no_grad():
        for norm, group in (
            (layer.input_layernorm, "attn_in"),
            (layer.post_attention_layernorm, "mlp_in"),
        ):
            if group in scales:
                norm.weight.div_(scales[group].to(norm.weight.dtype))
    attn.qkv_sizes = (attn.q_proj.out_features, attn.k_proj.out_features, attn.v_proj.out_features)
    del attn.q_proj, attn.k_proj, attn.v_proj, mlp.gate_proj, mlp.up_proj
    attn.qkv_proj, attn.o_proj = modules["self_attn.qkv_proj"], modules["self_attn.o_proj"]
    mlp.gate_up_proj, mlp.down_proj = modules["mlp.gate_up_proj"], modules["mlp.down_proj"]


def _scales(x: torch.Tensor, consumers: tuple[nn.Linear, ...]) -> torch.Tensor:
    activation = x.abs().amax(dim=0).clamp_min(1e-5)  # (in,)
    weight = torch.stack([c.weight.detach().abs().amax(dim=0).float() for c in consumers])
    weight = weight.amax(dim=0).clamp_min(1e-5)
    return (activation**SMOOTH_ALPHA / weight ** (1 - SMOOTH_ALPHA)).clamp(1e-2, 1e2)


def _shared_per_kv_head(s: torch.Tensor, attn: nn.Module) -> torch.Tensor:
    """o_proj's input channel (head h, dim d) comes from v row (kv head h // group, d), as
    SDPA's enable_gqa pairs them: heads that share a kv head share the scale (the largest)."""
    group = attn.heads // attn.kv_heads
    per_kv = s.view(attn.kv_heads, group, attn.head_dim).amax(dim=1, keepdim=True)
    return per_kv.expand(attn.kv_heads, group, attn.head_dim).reshape(-1)
