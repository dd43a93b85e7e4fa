"""The codec decoder in 8 bits on VNNI (quant.Int8Conv1d / Int8Linear), and `auto`'s choice of
the decoder's format.

`quantize_decoder` puts int8 layers in place of the float ones that carry the decoder's FLOPs:
the dense convs of the upsampling stack down to MIN_CONV_CHANNELS output channels, the
transposed convs (their matmul), the ConvNeXt blocks' linear layers; and of every layer with a
sum over features ahead of them (the quantizer's projections, the pre-conv, the transformer's
linears), though those cost little: on 2 threads a float GEMM rounds by how many steps it is
given, and an int8 layer behind it would turn that ulp into a quantum that grows through the
stack (1.4e-3 between chunk sizes, measured). The transformer's attention and norms (float64),
depthwise convs, the last stage's narrow convs and elementwise steps stay float. Every int8
layer scales its activations per row (a conv: per output step's window), so the stream computes
what one pass over all frames does, bit for bit.

Measured on a 2-core Zen 5, a steady 6-frame chunk of a real-size random decoder
(benchmarks/decoder_ab.py --int8, 1 thread): float32 46.8 ms a frame, int8 23.2, bfloat16 22.7;
audio SNR against float32: int8 44.5 dB, bfloat16 45.2 dB. So `auto` (`choose_decoder_format`)
keeps bfloat16 where the CPU has it natively (as fast, more accurate), takes int8 where a VNNI
kernel runs and the checkpoint's own audio holds MIN_AUDIO_SNR_DB (the tiny test checkpoints,
which amplify rounding ~700x, do not), and float32 elsewhere: decided by the CPU's flags and the
weights, never by timing (a seeded request's bytes must not depend on the load's timing).
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from ....quant.conv import Int8Conv1d
from ....quant.linear import Int8Linear, sqnr_db
from ....quant.quantize import MIN_SQNR_DB
from ...native import int8_linear
from .decoder import CodecDecoder
from .layers import CausalConv1d, CausalTransConv1d, ConvNeXtBlock

# Narrower convs stay float: at 96 channels (11520 steps a 6-frame chunk) the int8 conv's
# im2col copy and row quantization cost what the float conv did (~8 ms each, 1 thread). Since
# the kernel reads the windows in place the int8 k7 conv there is ~0.6x the float one (CPU time,
# 1 thread, busy box: 4.8 vs 8.2 ms); lowering this changes the int8 decoder's audio, so it
# waits for its own gate measurement.
MIN_CONV_CHANNELS = 192
MIN_AUDIO_SNR_DB = MIN_SQNR_DB  # the gate `auto` uses for the 8-bit layers, on the audio
GATE_FRAMES = 16  # codes decoded for the gate: 1.3 s of audio, past every conv's history
VNNI_KERNELS = ("avx512vnni", "avxvnni")  # where int8 was measured faster than float32


def quantize_decoder(
    decoder: CodecDecoder, min_conv_channels: int = MIN_CONV_CHANNELS
) -> CodecDecoder:
    """Quantize `decoder` (float32) in place; returns it. Its dtype stays float32 (activations,
    states, the layers left float); convs with fewer than `min_conv_channels` outputs stay float
    (tests pass 1: the tiny checkpoints' convs are all narrow)."""
    if decoder.dtype != torch.float32:
        raise ValueError(f"quantize a float32 decoder, not {decoder.dtype}")
    for group in (decoder.quantizer.rvq_first, decoder.quantizer.rvq_rest):
        group.output_proj = Int8Conv1d(group.output_proj)
    for parent in list(decoder.pre_transformer.modules()):
        for name, child in parent.named_children():
            if isinstance(child, nn.Linear):
                setattr(parent, name, Int8Linear.from_linear(child))
    for module in [decoder.pre_conv, *decoder.upsample.modules(), *decoder.decoder.modules()]:
        if isinstance(module, CausalTransConv1d):
            module.quantize()
        elif isinstance(module, CausalConv1d) and _dense(module.conv, min_conv_channels):
            module.conv = Int8Conv1d(module.conv)
        elif isinstance(module, ConvNeXtBlock):
            module.pwconv1 = Int8Linear.from_linear(module.pwconv1)
            module.pwconv2 = Int8Linear.from_linear(module.pwconv2)
    decoder.weight_format = "int8"
    return decoder


def _dense(conv: nn.Conv1d, min_channels: int) -> bool:
    return conv.groups == 1 and conv.out_channels >= min_channels


@torch.inference_mode()
def audio_snr_db(
    decoder: CodecDecoder, quantized: CodecDecoder, frames: int = GATE_FRAMES
) -> float:
    """SNR (dB) of `quantized`'s waveform against `decoder`'s over the same seeded random codes."""
    cfg = decoder.config
    generator = torch.Generator().manual_seed(0)
    codes = torch.randint(
        0, cfg.codebook_size, (1, cfg.num_quantizers, frames), generator=generator
    )
    return sqnr_db(decoder(codes), quantized(codes))


def choose_decoder_format(
    decoder: CodecDecoder, native_bf16: str | None, int8: bool = True
) -> tuple[CodecDecoder, str]:
    """`auto`'s decoder for a float32 CPU model: (the decoder to use, the choice in words).

    native_bf16: the CPU's native bf16 instruction set (e.g. "AVX512_BF16") or None; int8: False
    where the model's weights were asked to stay float (quantize "none"). The float32 `decoder`
    comes back as it is, converted to bfloat16 in place, or quantized in place (a float copy is
    kept only while the gate decodes, and comes back instead where int8 fails it)."""
    made = decoder.weight_format or str(decoder.dtype).removeprefix("torch.")
    if made != "float32":  # quantized before, or a dtype the caller set: kept
        return decoder, f"{made} (as set)"
    if native_bf16 is not None:
        return decoder.set_dtype(torch.bfloat16), f"bfloat16 (native on this CPU: {native_bf16})"
    kernel = int8_linear()
    isa = None if kernel is None else kernel.isa.name
    if not int8 or isa not in VNNI_KERNELS:
        why = "int8 not asked for" if not int8 else f"no VNNI int8 kernel here ({isa})"
        return decoder, f"float32 (no native bfloat16; {why})"
    reference = copy.deepcopy(decoder)
    snr = audio_snr_db(reference, quantize_decoder(decoder))
    if snr < MIN_AUDIO_SNR_DB:
        return reference, f"float32 (int8 audio SNR {snr:.1f} dB < {MIN_AUDIO_SNR_DB:g} dB)"
    return decoder, f"int8 on {isa} (audio SNR {snr:.1f} dB against float32; no native bf16)"
