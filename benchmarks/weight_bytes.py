"""Weight bytes read per generated codec frame, computed from a checkpoint's JSON configs.

One frame costs one talker step (28 layers + final norm + codec_head), 15 code-predictor passes
(5 layers + norm + one lm_head each, plus the input projection when the widths differ) and one
incremental decoder frame (everything but the codebook tables, which are gathered row by row,
and the RVQ input_proj, which decoding never uses). Embedding look-ups and the KV caches are
left out, as in the spec's table (§2.2). Divided by the measured read bandwidth this is the
least time a frame can take on a machine whose decoding is bound by weight traffic.

    .venv/bin/python benchmarks/weight_bytes.py assets/checkpoints/Qwen3-TTS-12Hz-0.6B-Base
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict, dataclass
from pathlib import Path

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
# "int8": the talker's and code predictor's layer projections and the code predictor's
# lm_heads at 1 byte (+ a float32 scale per output channel), everything else (norms, codec_head,
# the talker->predictor projection, the codec decoder) in float32.
FORMATS = ("float32", "bfloat16", "int8")


@dataclass(frozen=True)
class FrameParams:
    """Parameters read per frame, by component."""

    talker_step: int
    code_predictor: int  # all passes of one frame
    code_predictor_passes: int
    decoder_frame: int
    talker_projections: int = 0  # of talker_step: the layers' q/k/v/o/gate/up/down weights
    code_predictor_projections: int = 0  # of code_predictor: layer projections and lm_heads
    projection_rows: int = 0  # output channels of those projections (one int8 scale each)

    @property
    def total(self) -> int:
        return self.talker_step + self.code_predictor + self.decoder_frame

    def bytes(self, fmt: str) -> dict[str, int]:
        """Bytes per frame in weight format `fmt` (see FORMATS)."""
        if fmt != "int8":
            size = DTYPE_BYTES[fmt]
            return {
                "talker_step": self.talker_step * size,
                "code_predictor": self.code_predictor * size,
                "decoder_frame": self.decoder_frame * size,
                "total": self.total * size,
            }
        talker = 4 * (self.talker_step - self.talker_projections) + self.talker_projections
        predictor = 4 * (self.code_predictor - self.code_predictor_projections)
        predictor += self.code_predictor_projections
        scales = 4 * self.projection_rows
        decoder = 4 * self.decoder_frame
        return {
            "talker_step": talker,
            "code_predictor": predictor + scales,
            "decoder_frame": decoder,
            "total": talker + predictor + scales + decoder,
        }


def decoder_layer_params(cfg: dict) -> int:
    """One Qwen3 decoder layer: attention (with per-head q/k norms), SwiGLU MLP, two norms."""
    hidden, head_dim = cfg["hidden_size"], cfg["head_dim"]
    q_width = cfg["num_attention_heads"] * head_dim
    kv_width = cfg["num_key_value_heads"] * head_dim
    attention = hidden * q_width + 2 * hidden * kv_width + q_width * hidden
    bias = (q_width + 2 * kv_width + hidden) if cfg.get("attention_bias") else 0
    mlp = 3 * hidden * cfg["intermediate_size"]
    norms = 2 * head_dim + 2 * hidden
    return attention + bias + mlp + norms


def projection_params(cfg: dict) -> tuple[int, int]:
    """(weights, output rows) of one layer's seven projections (what int8 quantizes)."""
    hidden, head_dim = cfg["hidden_size"], cfg["head_dim"]
    q_width = cfg["num_attention_heads"] * head_dim
    kv_width = cfg["num_key_value_heads"] * head_dim
    weights = (
        hidden * (q_width + 2 * kv_width) + q_width * hidden + 3 * hidden * cfg["intermediate_size"]
    )
    rows = q_width + 2 * kv_width + hidden + 2 * cfg["intermediate_size"] + hidden
    return weights, rows


def talker_step_params(talker: dict) -> int:
    stack = talker["num_hidden_layers"] * decoder_layer_params(talker)
    return stack + talker["hidden_size"] + talker["vocab_size"] * talker["hidden_size"]


def code_predictor_pass_params(talker: dict) -> int:
    """One pass: the stack, its norm, one lm_head, and the talker->predictor projection."""
    predictor = talker["code_predictor_config"]
    hidden = predictor["hidden_size"]
    stack = predictor["num_hidden_layers"] * decoder_layer_params(predictor) + hidden
    head = predictor["vocab_size"] * hidden
    projection = 0 if talker["hidden_size"] == hidden else talker["hidden_size"] * hidden + hidden
    return stack + head + projection


def _conv(c_in: int, c_out: int, kernel: int, bias: bool = True, groups: int = 1) -> int:
    return c_in // groups * c_out * kernel + (c_out if bias else 0)


def _convnext(dim: int) -> int:
    depthwise = _conv(dim, dim, 7, groups=dim)
    return depthwise + 2 * dim + _conv(dim, 4 * dim, 1) + _conv(4 * dim, dim, 1) + dim


def _residual_unit(dim: int) -> int:
    return 2 * 2 * dim + _conv(dim, dim, 7) + _conv(dim, dim, 1)  # two SnakeBeta (alpha, beta)


def _codec_transformer(dec: dict) -> int:
    hidden, latent, head_dim = dec["hidden_size"], dec["latent_dim"], dec["head_dim"]
    q_width = dec["num_attention_heads"] * head_dim
    kv_width = dec["num_key_value_heads"] * head_dim
    attention = hidden * q_width + 2 * hidden * kv_width + q_width * hidden
    if dec.get("attention_bias"):
        attention += q_width + 2 * kv_width + hidden
    layer = attention + 3 * hidden * dec["intermediate_size"] + 2 * hidden + 2 * hidden
    projections = _conv(latent, hidden, 1) + _conv(hidden, latent, 1)  # input/output (biased)
    return projections + dec["num_hidden_layers"] * layer + hidden  # final norm


def decoder_frame_params(speech_tokenizer: dict) -> int:
    """Codec decoder weights read for one incremental frame (no codebooks, no input_proj)."""
    dec = speech_tokenizer["decoder_config"]
    codebook_dim, latent, width = dec["codebook_dim"], dec["latent_dim"], dec["decoder_dim"]
    groups = 2 if dec["num_semantic_quantizers"] < dec["num_quantizers"] else 1
    output_proj = groups * _conv(codebook_dim // 2, codebook_dim, 1, bias=False)
    total = output_proj + _conv(codebook_dim, latent, 3) + _codec_transformer(dec)
    for factor in dec["upsampling_ratios"]:
        total += _conv(latent, latent, factor) + _convnext(latent)
    total += _conv(latent, width, 7)
    for i, rate in enumerate(dec["upsample_rates"]):
        c_in, c_out = width // 2**i, width // 2 ** (i + 1)
        total += 2 * c_in + _conv(c_in, c_out, 2 * rate) + 3 * _residual_unit(c_out)
    last = width // 2 ** len(dec["upsample_rates"])
    return total + 2 * last + _conv(last, 1, 7)


def frame_params(checkpoint: Path) -> FrameParams:
    """checkpoint: a folder with config.json and speech_tokenizer/config.json."""
    talker = json.loads((checkpoint / "config.json").read_text())["talker_config"]
    codec = json.loads((checkpoint / "speech_tokenizer" / "config.json").read_text())
    passes = talker["num_code_groups"] - 1
    predictor = talker["code_predictor_config"]
    t_weights, t_rows = projection_params(talker)
    p_weights, p_rows = projection_params(predictor)
    return FrameParams(
        talker_step=talker_step_params(talker),
        code_predictor=passes * code_predictor_pass_params(talker),
        code_predictor_passes=passes,
        decoder_frame=decoder_frame_params(codec),
        talker_projections=talker["num_hidden_layers"] * t_weights,
        code_predictor_projections=passes
        * (
            predictor["num_hidden_layers"] * p_weights
            + predictor["vocab_size"] * predictor["hidden_size"]
        ),
        projection_rows=talker["num_hidden_layers"] * t_rows
        + passes * (predictor["num_hidden_layers"] * p_rows + predictor["vocab_size"]),
    )


def floor_ms(bytes_per_frame: int, bandwidth_gbps: float) -> float:
    """Least time per frame (ms) when every weight byte crosses the memory bus once."""
    return 1000.0 * bytes_per_frame / (bandwidth_gbps * 1e9)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("checkpoint", type=Path)
    args = ap.parse_args()
    params = frame_params(args.checkpoint)
    out = {"params": asdict(params) | {"total": params.total}}
    for fmt in FORMATS:
        out[fmt + "_mb"] = {k: round(v / 1e6, 1) for k, v in params.bytes(fmt).items()}
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
