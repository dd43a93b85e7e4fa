"""Convolutions and matmuls over a weight laid out once in oneDNN's blocked format (CPU).

A plain `conv1d` or matmul hands oneDNN the weight in PyTorch's layout and oneDNN copies it into
its blocked layout on every call. For a codec's wide layers over a few frames that copy costs
more than the arithmetic: the Qwen3-TTS decoder's 1024 -> 1536, k7 conv over a 6-frame chunk
(30 steps) takes 15.0 ms in float32 and 4.7 ms in bfloat16 as a plain call, 2.0 and 0.8 ms over
a weight laid out once (2-core Zen 5, `benchmarks/decoder_ab.py`). Here a layer lays its weight
out at its first call of a given input shape and keeps it, keyed by that shape and the weight's
storage, version, dtype and device, so a reload, `.to()` or `set_dtype` lays it out again; a copy
or a pickle starts empty (oneDNN's opaque tensors have no storage to copy).

A conv takes this path only where its weight outweighs its input window (out_channels x kernel
>= WEIGHT_PER_STEP x steps): over long inputs the plain call is as fast (the decoder's 96- and
192-channel convs over thousands of steps: 0.9-1.4x). The choice depends on the layer and the
input's length only, so a request's bytes stay defined by its chunking and thread count. The
numbers are oneDNN's for the same layer summed in another order: bfloat16 results are equal
(float32 accumulation, one rounding), float32 ones differ by ~1e-7 relative, as a plain call over
another chunk length already does.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

WEIGHT_PER_STEP = 2  # out_channels * kernel / steps at which laying out pays (decoder_ab.py)
# A linear's one layout, made for this many rows whatever a call's rows: a layout per row count
# (as convs need) held up to 3 copies of the decoder's linears (+211 MB resident at the released
# size in float32); over the decoder's shapes (512..3072 x 512..3072, 2-120 rows) any row
# count's layout gave the same bits and the same time (Zen 5, float32 and bf16), and one fixed
# hint keeps a request's bytes independent of which shapes came before on any CPU.
LINEAR_ROWS_HINT = 16
_DTYPES = (torch.float32, torch.bfloat16)


class _LaidOut:
    """One layer's weight in oneDNN's layout, per input shape (the layout oneDNN picks depends on
    it, and a call of another shape over it can be far slower than a plain call: a 768-channel
    1x1 conv laid out for 256 steps and called over 192 took 37 ms, plain 2 ms, at its own shape
    1 ms). At most KEEP shapes are kept, the least used let go first: a stream's steady chunk
    and its first one stay, while the reference's prefix and the last chunk, whose lengths
    change with every request, take turns in the third place. Which shapes are kept changes the
    speed only: a shape is always computed over its own layout."""

    KEEP = 3

    def __init__(self) -> None:
        self.weight: tuple | None = None  # the weight the layouts were made from
        self.by_shape: dict[tuple, torch.Tensor] = {}
        self.uses: dict[tuple, int] = {}

    def get(self, weight: tuple, shape: tuple, lay_out: Callable[[], torch.Tensor]) -> torch.Tensor:
        if weight != self.weight:  # a reload, .to() or set_dtype: every old layout is stale
            self.weight, self.by_shape, self.uses = weight, {}, {}
        if shape not in self.by_shape:
            while len(self.by_shape) >= self.KEEP:
                rarest = min(self.uses, key=self.uses.__getitem__)  # the oldest of equals
                del self.by_shape[rarest], self.uses[rarest]
            self.by_shape[shape] = lay_out()
            self.uses[shape] = 0
        self.uses[shape] += 1
        return self.by_shape[shape]

    def __deepcopy__(self, memo: dict) -> _LaidOut:
        return _LaidOut()

    def __reduce__(self) -> tuple:
        return (_LaidOut, ())


def _usable(weight: torch.Tensor, x: torch.Tensor) -> bool:
    return (
        x.device.type == "cpu"
        and x.dtype == weight.dtype
        and x.dtype in _DTYPES
        and not (torch.is_grad_enabled() and weight.requires_grad)
        and torch.backends.mkldnn.is_available()
        and torch.backends.mkldnn.enabled
    )


def _kept(
    owner: nn.Module, weight: torch.Tensor, shape: tuple, lay_out: Callable[[], torch.Tensor]
) -> torch.Tensor:
    """owner's copy of `weight` laid out for inputs of `shape`, made again when the weight
    changed (storage, version, dtype or device)."""
    kept = owner.__dict__.get("_laid_out")
    if kept is None:
        kept = owner.__dict__["_laid_out"] = _LaidOut()
    version = None if weight.is_inference() else weight._version  # inference tensors have none
    return kept.get((weight.data_ptr(), version, weight.dtype, weight.device), shape, lay_out)


def conv1d(conv: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """conv(x) for an input (B, C_in, T) already padded; any other module is just called."""
    steps = x.shape[-1]
    if (
        not isinstance(conv, nn.Conv1d)
        or conv.groups != 1
        or conv.padding != (0,)
        or conv.out_channels * conv.kernel_size[0] < WEIGHT_PER_STEP * steps
        or not _usable(conv.weight, x)
    ):
        return conv(x)
    stride, dilation = [1, conv.stride[0]], [1, conv.dilation[0]]

    shape = [x.shape[0], x.shape[1], 1, steps]

    def lay_out() -> torch.Tensor:  # (C_out, C_in, k) as a (C_out, C_in, 1, k) conv2d weight
        return torch.ops.mkldnn._reorder_convolution_weight(
            conv.weight.detach().unsqueeze(2), [0, 0], stride, dilation, 1, shape
        )

    weight = _kept(conv, conv.weight, tuple(shape), lay_out)
    out = torch.ops.mkldnn._convolution_pointwise(
        x.unsqueeze(2), weight, conv.bias, [0, 0], stride, dilation, 1, "none", [], ""
    )
    return out.squeeze(2)


def matmul(
    owner: nn.Module,
    x: torch.Tensor,
    weight: torch.Tensor,
    matrix: Callable[..., torch.Tensor],
) -> torch.Tensor:
    """x (..., K) @ matrix() (K, N), where the matrix is made from `weight` (a parameter of
    `owner`; its change lays the matrix out again). The laid-out copy is kept on `owner` and made
    from `matrix(keep=False)`, so the owner need not keep a plain copy beside it."""
    if not _usable(weight, x):
        return x @ matrix()
    rows = x.reshape(-1, x.shape[-1])

    def lay_out() -> torch.Tensor:  # (N, K), a linear layer's weight
        as_linear = matrix(keep=False).detach().t().contiguous()
        return torch.ops.mkldnn._reorder_linear_weight(as_linear, rows.shape[0])

    laid = _kept(owner, weight, (rows.shape[0],), lay_out)
    out = torch.ops.mkldnn._linear_pointwise(rows, laid, None, "none", [], "")
    return out.view(*x.shape[:-1], -1)


def linear(layer: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    """layer(x) for x (..., in_features), over the weight laid out once where it pays
    (out_features >= WEIGHT_PER_STEP x rows, as a conv's rule): the codec decoder's linears
    over a few frames. The bias is added inside oneDNN's call: bfloat16 results are then equal
    to the plain call's (one rounding); float32 ones differ by ~1e-7 relative, as convs do."""
    rows = x.numel() // x.shape[-1]
    if layer.out_features < WEIGHT_PER_STEP * rows or not _usable(layer.weight, x):
        return F.linear(x, layer.weight, layer.bias)

    def lay_out() -> torch.Tensor:
        weight = layer.weight.detach().contiguous()
        return torch.ops.mkldnn._reorder_linear_weight(weight, LINEAR_ROWS_HINT)

    laid = _kept(layer, layer.weight, (), lay_out)  # one layout, whatever the rows
    out = torch.ops.mkldnn._linear_pointwise(x.reshape(rows, -1), laid, layer.bias, "none", [], "")
    return out.view(*x.shape[:-1], -1)


class Linear(nn.Linear):
    """nn.Linear over `linear`: same parameters and state dict."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(self, x)


def lay_out_linears(model: nn.Module) -> None:
    """Every plain nn.Linear in `model` becomes a `Linear` (its class only: the module,
    its parameters and hooks stay)."""
    for module in model.modules():
        if type(module) is nn.Linear:
            module.__class__ = Linear


def _conv_flops(x_shape, w_shape, *_args, out_shape, **_kwargs) -> int:  # noqa: ANN001
    """2 x outputs x (C_in x k): (B, C_out, 1, T') out of a (C_out, C_in, 1, k) weight."""
    return 2 * out_shape.numel() * w_shape[1] * w_shape[2] * w_shape[3]


def _linear_flops(x_shape, w_shape, *_args, out_shape, **_kwargs) -> int:  # noqa: ANN001
    return 2 * out_shape.numel() * x_shape[-1]


def flop_formulas() -> dict:
    """torch.utils.flop_counter.FlopCounterMode(custom_mapping=...) for these oneDNN calls,
    which it does not know: a floor's FLOPs count the laid-out layers as the plain ones."""
    ops = torch.ops.mkldnn
    return {
        ops._convolution_pointwise: _conv_flops,
        ops._linear_pointwise: _linear_flops,
    }
