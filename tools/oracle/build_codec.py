"""The tiny 12 Hz speech tokenizer (official Qwen3TTSTokenizerV2Model), seeded and calibrated.

Both tiny checkpoints share these weights (as the released 0.6B and 1.7B do); their
config.json files differ only in the attention windows, which are not weights.
"""

from __future__ import annotations

import torch
from init_weights import randomize
from qwen_tts.core import Qwen3TTSTokenizerV2Config, Qwen3TTSTokenizerV2Model

CODEC_SEED = 2026
TARGET_RMS = 0.15  # decoder output level before the final clamp


def build_codec(config: dict, ref_audio_24k) -> Qwen3TTSTokenizerV2Model:
    """Official tokenizer model from `config` (JSON dict) with seeded, calibrated weights."""
    model = Qwen3TTSTokenizerV2Model(Qwen3TTSTokenizerV2Config(**config)).eval()
    randomize(model, CODEC_SEED)
    _calibrate_encoder_codebooks(model, torch.from_numpy(ref_audio_24k))
    _calibrate_decoder_gain(model)
    return model


@torch.no_grad()
def _encoder_latents(model: Qwen3TTSTokenizerV2Model, audio: torch.Tensor) -> torch.Tensor:
    """(1, hidden, R) latents that enter the Mimi quantizer for `audio` (S,)."""
    enc = model.encoder
    x = enc.encoder(audio[None, None])
    x = enc.encoder_transformer(x.transpose(1, 2), return_dict=True)[0].transpose(1, 2)
    return enc.downsample(x)


@torch.no_grad()
def _calibrate_encoder_codebooks(model, audio: torch.Tensor) -> None:
    # Scale each RVQ codebook to the std of the residual it will see, so every layer picks
    # varied codes (an N(0,1) codebook against a tiny residual would collapse onto a few).
    latents = _encoder_latents(model, audio)
    quantizer = model.encoder.quantizer
    gaps = []
    for rvq in (
        quantizer.semantic_residual_vector_quantizer,
        quantizer.acoustic_residual_vector_quantizer,
    ):
        residual = rvq.input_proj(latents)[0].T  # (R, D)
        for layer in rvq.layers:
            book = layer.codebook
            scale = residual.std().item()
            book.embed_sum.mul_(scale)
            book._embed = None
            embed = book.embed
            dists = torch.cdist(residual[None].double(), embed[None].double())[0]
            top2 = dists.topk(2, largest=False).values  # (R, 2)
            gaps.append(float(((top2[:, 1] - top2[:, 0]) / top2[:, 0]).min()))
            residual = residual - embed[dists.argmin(-1)]
            book._embed = None
    print(f"encoder RVQ: smallest relative nearest/second distance gap {min(gaps):.2e}")


@torch.no_grad()
def _calibrate_decoder_gain(model) -> None:
    # Rescale the last conv so random codes decode at TARGET_RMS (few clipped samples).
    gen = torch.Generator().manual_seed(CODEC_SEED + 1)
    codes = torch.randint(0, 2048, (1, 16, 40), generator=gen)
    dec = model.decoder
    last = dec.decoder[-1].conv
    last.bias.zero_()
    hidden = dec.quantizer.decode(codes)
    hidden = dec.pre_conv(hidden).transpose(1, 2)
    hidden = dec.pre_transformer(inputs_embeds=hidden).last_hidden_state.permute(0, 2, 1)
    for blocks in dec.upsample:
        for block in blocks:
            hidden = block(hidden)
    for block in dec.decoder:
        hidden = block(hidden)
    centered = hidden - hidden.mean()
    last.weight.mul_(TARGET_RMS / centered.pow(2).mean().sqrt())
    # Remove the DC offset through the bias, so the clamp at +-1 is rarely hit.
    last.bias.fill_(-hidden.mean().item() * TARGET_RMS / centered.pow(2).mean().sqrt().item())
