"""The tiny 12 Hz speech tokenizer (official Qwen3TTSTokenizerV2Model), seeded and calibrated.

Both tiny checkpoints share these weights (as the released 0.6B and 1.7B do); their
config.json files differ only in the attention windows, which are not weights.

The calibration statistics (residual stds, output RMS and mean) are computed on a float64 copy
under pure_float64() and only then applied to the float32 weights (one correctly rounded
float32 multiply each), so the weights do not depend on the CPU that builds them: a float32
forward pass would change the statistics in their 7th digit from one CPU to another and with
them the float32 weights. A float64 statistic could still land on the other side of a float32
rounding boundary on another CPU, with probability ~1e-8 per value.
"""

from __future__ import annotations

import copy

import numpy as np
import torch
from init_weights import randomize
from pure_fp64 import pure_float64
from qwen_tts.core import Qwen3TTSTokenizerV2Config, Qwen3TTSTokenizerV2Model

CODEC_SEED = 2026
TARGET_RMS = 0.15  # decoder output level before the final clamp
# Smallest nearest/second-nearest distance gap allowed, per unit |z|. The float32 error of an
# RVQ distance measured on the fixtures is at most 12.4 x 2^-24 x |z| (on an AMD EPYC); the
# floor is 2 x 8 x 16 x 2^-24: a gap twice 8 times a 16 x 2^-24 error (make_goldens then
# checks the measured float64 gap / (2 x float32 error) >= MIN_DECISION_MARGIN = 8).
TIE_FLOOR = 256 * 2.0**-24
MAX_SCALE_STEPS = 200


def build_codec(config: dict, clips: list[np.ndarray]) -> Qwen3TTSTokenizerV2Model:
    """Official tokenizer model from `config` (JSON dict) with seeded, calibrated weights.
    `clips`: the reference clips at 24 kHz as the official encode sees them (float32 (S,))."""
    model = Qwen3TTSTokenizerV2Model(Qwen3TTSTokenizerV2Config(**config)).eval()
    randomize(model, CODEC_SEED)
    _calibrate_encoder_codebooks(model, clips)
    _calibrate_decoder_gain(model)
    return model


@torch.no_grad()
def _encoder_latents(model: Qwen3TTSTokenizerV2Model, audio: torch.Tensor) -> torch.Tensor:
    """(1, hidden, R) latents that enter the Mimi quantizer for `audio` (S,)."""
    enc = model.encoder
    x = enc.encoder(audio[None, None])
    x = enc.encoder_transformer(x.transpose(1, 2), return_dict=True)[0].transpose(1, 2)
    return enc.downsample(x)


def _float64_copy(model):
    return copy.deepcopy(model).to(torch.float64)


@torch.no_grad()
def _calibrate_encoder_codebooks(model, clips: list[np.ndarray]) -> None:
    # Scale each RVQ codebook to the std of the residual it will see (on the first clip), so
    # every layer picks varied codes (an N(0,1) codebook against a tiny residual would collapse
    # onto a few). Where that scale leaves a nearest/second-nearest code pair of a clip closer
    # than TIE_FLOOR x |z| (z: the frame's projected latent, the size the float32 rounding of
    # the residual scales with), the scale is raised 1 % at a time until none is: then no golden
    # code is a near-tie that another CPU's float32 rounding could flip.
    exact = _float64_copy(model)
    with pure_float64():
        latents = [_encoder_latents(exact, torch.from_numpy(c).double()) for c in clips]
    gaps, raised = [], 0
    for name in ("semantic_residual_vector_quantizer", "acoustic_residual_vector_quantizer"):
        rvq = getattr(model.encoder.quantizer, name)
        project = getattr(exact.encoder.quantizer, name).input_proj
        residuals = [project(latent)[0].T for latent in latents]  # (R, D) per clip
        floors = [TIE_FLOOR * r.norm(dim=-1) for r in residuals]
        for layer in rvq.layers:
            book = layer.codebook
            original, base = book.embed_sum.clone(), residuals[0].std().item()
            for step in range(MAX_SCALE_STEPS):
                book.embed_sum.copy_(original).mul_(base * (1 + 0.01 * step))
                book._embed = None
                embed = book.embed.double()  # exactly the float32 codebook the model will hold
                dists = [torch.cdist(r[None], embed[None])[0] for r in residuals]
                low = [d.topk(2, dim=-1, largest=False).values for d in dists]
                if all(
                    bool((v[:, 1] - v[:, 0] >= f).all()) for v, f in zip(low, floors, strict=True)
                ):
                    break
            else:
                raise RuntimeError(f"{name}: no codebook scale keeps every code off a near-tie")
            raised += step > 0
            gaps.append(min(float(((v[:, 1] - v[:, 0]) / v[:, 0]).min()) for v in low))
            residuals = [r - embed[d.argmin(-1)] for r, d in zip(residuals, dists, strict=True)]
            book._embed = None
    print(
        f"encoder RVQ: smallest relative nearest/second distance gap {min(gaps):.2e}; "
        f"{raised} of {len(gaps)} codebook scales raised off near-ties"
    )


@torch.no_grad()
def _calibrate_decoder_gain(model) -> None:
    # Rescale the last conv so random codes decode at TARGET_RMS (few clipped samples).
    gen = torch.Generator().manual_seed(CODEC_SEED + 1)
    codes = torch.randint(0, 2048, (1, 16, 40), generator=gen)
    last = model.decoder.decoder[-1].conv
    last.bias.zero_()
    dec = _float64_copy(model).decoder
    with pure_float64():
        hidden = dec.quantizer.decode(codes)
        hidden = dec.pre_conv(hidden).transpose(1, 2)
        hidden = dec.pre_transformer(inputs_embeds=hidden).last_hidden_state.permute(0, 2, 1)
        for blocks in dec.upsample:
            for block in blocks:
                hidden = block(hidden)
        for block in dec.decoder:
            hidden = block(hidden)
    mean = hidden.mean().item()
    gain = TARGET_RMS / (hidden - mean).pow(2).mean().sqrt().item()
    last.weight.mul_(gain)
    # Remove the DC offset through the bias, so the clamp at +-1 is rarely hit.
    last.bias.fill_(-mean * gain)
