"""What every model's calibration shares: the inputs its projections see on a short run,
recorded by forward pre-hooks, and SmoothQuant's per-channel scale.

SmoothQuant (alpha 0.5): per input channel j, s_j = sqrt(max|x_j| / max|W[:, j]|); x_j / s_j
and W[:, j] * s_j give the same product, while an activation outlier channel no longer sets the
per-row scale of every other channel. Where 1/s is folded (a norm's weight, the rows of the
projection that produces x) is the model's declaration (its quantize module).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Hashable

import torch
from torch import nn

MAX_ROWS = 128  # per layer in all: the SQNR products run at M = rows, and load time counts
SMOOTH_ALPHA = 0.5


@torch.inference_mode()
def record_inputs(
    modules: dict[Hashable, nn.Module],
    run: Callable[[], object],
    keep: Callable[[torch.Tensor], torch.Tensor],
) -> dict[Hashable, torch.Tensor]:
    """{key: (rows, in) float32} inputs each module saw while `run()` ran: of each call the rows
    `keep` picks from its (rows, in) input, then at most MAX_ROWS in all, evenly spaced."""
    recorded: dict[Hashable, list[torch.Tensor]] = defaultdict(list)
    hooks = [
        module.register_forward_pre_hook(_recorder(recorded[key], keep))
        for key, module in modules.items()
    ]
    try:
        run()
    finally:
        for hook in hooks:
            hook.remove()
    return {key: spread(torch.cat(rows), MAX_ROWS) for key, rows in recorded.items() if rows}


def _recorder(sink: list[torch.Tensor], keep: Callable[[torch.Tensor], torch.Tensor]):  # noqa: ANN202
    def hook(_module: nn.Module, args: tuple) -> None:
        x = args[0].detach().reshape(-1, args[0].shape[-1]).float()
        sink.append(keep(x).clone())

    return hook


def spread(rows: torch.Tensor, count: int) -> torch.Tensor:
    """At most `count` rows, evenly spaced (prefill and decode steps both represented)."""
    if rows.shape[0] <= count:
        return rows
    return rows[torch.linspace(0, rows.shape[0] - 1, count).round().long()]


def smoothing_scale(x: torch.Tensor, weights: list[torch.Tensor]) -> torch.Tensor:
    """(in,) SmoothQuant scale of input `x` (rows, in) read by the (out, in) `weights`."""
    activation = x.abs().amax(dim=0).clamp_min(1e-5)  # (in,)
    weight = torch.stack([w.detach().abs().amax(dim=0).float() for w in weights])
    weight = weight.amax(dim=0).clamp_min(1e-5)
    return (activation**SMOOTH_ALPHA / weight ** (1 - SMOOTH_ALPHA)).clamp(1e-2, 1e2)
