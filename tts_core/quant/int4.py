"""4-bit weights for the bandwidth-bound linears (the code predictor's): half the bytes of int8.

Format, per (out, in) weight in groups of GROUP inputs:
  s_w (out,)             = max |W[o, :]| / (7 * 16)        a float scale per output channel
  m   (out, in / GROUP)  in 1..16                          a 4-bit multiplier per group
  w4  (out, in)          in -8..7                          a 4-bit weight
  W[o, k] ~ s_w[o] * m[o, k / GROUP] * w4[o, k]
so each group has its own scale s_w[o] * m (the two-level scales of llama.cpp's k-quants), and
the effective weight W_eff = m * w4 is an integer in -128..112: an int8 weight. The layer
computes exactly what Int8Linear (linear.py) computes over (W_eff, s_w): activations int8 per
row, an exact integer sum, ((float)sum * s_x) * s_w (+ bias). Hence
* the torch path is Int8Linear over W_eff (torch._int_mm, or the int8 kernel where it runs),
  equal bit for bit to the 4-bit kernel;
* a row's output depends on that row alone (exact integer sums, per-row activation scale): batch
  invariance holds as for the 8-bit layers;
* the bytes read per call are ~4.25 bits a weight (nibbles + one byte of m per GROUP weights).

The kernel (models/native/int4_linear.c, AVX-512 VNNI) unpacks nibbles to bytes, sums each group
with vpdpbusd into int32 and adds m times that sum: integers, exact (|sum| < 2^31 for
in < 65,000: at most 255 * 128 per product, as for Int8Linear).

Measured on the busy 2-core Zen 5 (benchmarks/int4_bench.py, results/int4_bench-*.json): one
pass of the 0.6B code predictor's linears (81 MB int8, 43 MB int4: both beyond the 32 MB
L3) 0.61x the int8 time at 1 row, 0.76x at 8; the talker's 28 layers at 1 row 0.51x; the loaded
0.6B's code predictor, a frame's 15 passes on 1 thread, 0.72x (112 -> 81 ms). Converting its
layers from int8: 1.3 s.

Rounding (`quantize_int4`): per group, m is the smallest multiplier whose range holds the group's
largest weight, or one less (its largest weights then clip to -8 / 7) where that gives the group
a smaller squared error: round-to-nearest with a clipping search of one step.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from ..models import native
from .linear import MIN_SCALE, Int8Linear, NativeLinear

GROUP = 32  # inputs per group scale (the kernel's unit: 8 vpdpbusd steps of 4 inputs)
W4_MIN, W4_MAX = -8, 7
MULT_MAX = 16  # m in 1..16: 4 bits; 16 * -8 = -128 still an int8
BLOCK = 16  # output channels per 64-byte vector (the kernel's layout)


def quantize_int4(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(out, in) float weight, in a multiple of GROUP -> (w4 (out, in) int8 in -8..7,
    m (out, in / GROUP) uint8 in 1..16, s_w (out,) float32) (module doc)."""
    out, inp = weight.shape
    if inp % GROUP:
        raise ValueError(f"in_features {inp} is not a multiple of {GROUP}")
    w = weight.detach().float().view(out, inp // GROUP, GROUP)  # (out, G, GROUP)
    scale = w.abs().amax(dim=(1, 2)).clamp_min(MIN_SCALE) / (W4_MAX * MULT_MAX)  # (out,)
    need = w.abs().amax(dim=2) / (W4_MAX * scale[:, None])  # (out, G) in [0, 16]
    fits = need.ceil().clamp(1, MULT_MAX)  # largest weight within +-7 steps
    best_m, best_err = None, None
    for m in (fits, (fits - 1).clamp_min(1)):
        step = (m * scale[:, None])[..., None]  # (out, G, 1)
        q = torch.round(w / step).clamp(W4_MIN, W4_MAX)
        err = (q * step - w).pow(2).sum(dim=2)  # (out, G)
        if best_m is None:
            best_m, best_err, best_q = m, err, q
        else:
            better = err < best_err
            best_m = torch.where(better, m, best_m)
            best_q = torch.where(better[..., None], q, best_q)
    return best_q.reshape(out, inp).to(torch.int8), best_m.to(torch.uint8), scale


def effective_int8(w4: torch.Tensor, mult: torch.Tensor) -> torch.Tensor:
    """(out, in) int8 W_eff = m * w4, the weights the layer multiplies by (module doc)."""
    return (w4.to(torch.int16) * mult.to(torch.int16).repeat_interleave(GROUP, dim=1)).to(
        torch.int8
    )


def pack_nibbles(w4: torch.Tensor) -> torch.Tensor:
    """(out, in) int8 in -8..7 -> (out16 / 16, in / 32, 4, 64) uint8, the kernel's layout:
    byte [ob][g][p][4 j + t] holds W[16 ob + j][32 g + 8 p + t] + 8 in its low nibble and
    W[16 ob + j][32 g + 8 p + 4 + t] + 8 in its high one (out zero padded to 16)."""
    out, inp = w4.shape
    out_b = -(-out // BLOCK) * BLOCK
    u = torch.full((out_b, inp), 8, dtype=torch.uint8)  # a zero weight
    u[:out] = (w4.to(torch.int16) + 8).to(torch.uint8)
    # (ob, j, g, p, half, t) -> (ob, g, p, half, j, t)
    v = u.view(out_b // BLOCK, BLOCK, inp // GROUP, 4, 2, 4).permute(0, 2, 3, 4, 1, 5)
    return (v[:, :, :, 0] | (v[:, :, :, 1] << 4)).reshape(out_b // BLOCK, inp // GROUP, 4, 64)


def pack_multipliers(mult: torch.Tensor) -> torch.Tensor:
    """(out, G) uint8 -> (out16 / 16, G, 16) uint8: [ob][g][j] = m[16 ob + j][g] (padding 1)."""
    out, groups = mult.shape
    out_b = -(-out // BLOCK) * BLOCK
    padded = torch.ones(out_b, groups, dtype=torch.uint8)
    padded[:out] = mult
    return padded.view(out_b // BLOCK, BLOCK, groups).permute(0, 2, 1).contiguous()


class Int4Linear(NativeLinear):
    """A bias-optional linear layer over 4-bit weights with group scales (module doc); float
    input and output. Where the 4-bit kernel runs (native.int4_linear: AVX-512 VNNI) it reads
    the packed nibbles; elsewhere `fallback`, an Int8Linear over the effective int8 weights,
    computes the same numbers bit for bit (at int8's bytes). The call path is NativeLinear's
    (linear.py): the kernel's entry and the weights' pointers bound once per placement."""

    _weights_bound = ("weight_nibbles", "group_mult", "weight_sum128", "weight_scale", "bias")

    def __init__(
        self,
        w4: torch.Tensor,
        mult: torch.Tensor,
        scale: torch.Tensor,
        bias: torch.Tensor | None = None,
    ) -> None:
        super().__init__()
        self.out_features, self.in_features = w4.shape
        kernel = native.int4_linear()
        self.fallback: Int8Linear | None = None
        if kernel is None:
            self.fallback = Int8Linear.from_int8(effective_int8(w4, mult), scale, bias)
            return
        self.register_buffer("weight_scale", scale.float().contiguous())
        self.register_buffer("bias", None if bias is None else bias.float().contiguous())
        self.register_buffer("weight_nibbles", pack_nibbles(w4))
        self.register_buffer("group_mult", pack_multipliers(mult))
        # 128 * sum_k W_eff[o, k]: the kernel feeds activations as q + 128 (unsigned bytes)
        self.register_buffer(
            "weight_sum128", effective_int8(w4, mult).sum(dim=1, dtype=torch.int32) * 128
        )

    @classmethod
    def from_float(cls, weight: torch.Tensor, bias: torch.Tensor | None = None) -> Int4Linear:
        return cls(*quantize_int4(weight), None if bias is None else bias.detach().float())

    @classmethod
    def from_int8(cls, layer: Int8Linear) -> Int4Linear:
        """The 4-bit layer over an 8-bit layer's weights as it computes them (q * s_w: smoothing
        folded in); the int8 rounding it starts from is 1/16 of a 4-bit step at most."""
        weight = layer.int8_weight().float() * layer.weight_scale[:, None].float()
        return cls.from_float(weight, layer.bias)

    def _entries(self) -> tuple[Callable[..., int], None] | None:
        kernel = native.int4_linear() if self.fallback is None else None
        return None if kernel is None else (kernel, None)

    def _unbound_forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.fallback is not None:
            return self.fallback(x)
        return self.forward_reference(x)  # moved, or the kernel no longer loads: slow, same

    def int8_weight(self) -> torch.Tensor:
        """(out, in) int8 effective weights m * w4."""
        if self.fallback is not None:
            return self.fallback.int8_weight()
        return effective_int8(*self.unpacked())

    def unpacked(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(w4 (out, in) int8, m (out, G) uint8) back from the kernel's layout."""
        nib = self.weight_nibbles
        blocks, groups = nib.shape[:2]
        halves = torch.stack([nib & 0x0F, nib >> 4], dim=3)  # (ob, g, p, half, 64)
        u = halves.view(blocks, groups, 4, 2, BLOCK, 4).permute(0, 4, 1, 2, 3, 5)
        w4 = u.reshape(blocks * BLOCK, groups * GROUP)[: self.out_features].to(torch.int8) - 8
        mult = self.group_mult.permute(0, 2, 1).reshape(blocks * BLOCK, groups)
        return w4, mult[: self.out_features]

    def reference(self) -> Int8Linear:
        """The same layer as an Int8Linear over W_eff (its forward_reference: torch._int_mm)."""
        if self.fallback is not None:
            return self.fallback
        return Int8Linear.from_int8(self.int8_weight(), self.weight_scale, self.bias)

    def forward_reference(self, x: torch.Tensor) -> torch.Tensor:
        return self.reference().forward_reference(x)

    def extra_repr(self) -> str:
        kernel = "int8 fallback" if self.fallback is not None else "native int4 avx512vnni"
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, group={GROUP}, "
            f"kernel={kernel}"
        )


def int4_in_place(root: nn.Module) -> list[str]:
    """Every Int8Linear under `root` whose inputs are a multiple of GROUP becomes an Int4Linear
    over its weights (from_int8); returns their names."""
    names = []
    for name, module in list(root.named_modules()):
        if isinstance(module, Int8Linear) and module.in_features % GROUP == 0:
            parent_name, _, attr = name.rpartition(".")
            parent = root.get_submodule(parent_name) if parent_name else root
            setattr(parent, attr, Int4Linear.from_int8(module))
            names.append(name)
    return names
