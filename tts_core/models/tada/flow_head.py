"""TADA's flow-matching head (hume-tada tada/nn/vibevoice.py, VibeVoiceDiffusionHead) and the
Euler solver of TadaForCausalLM._solve_flow_matching, in our own PyTorch.

The head predicts a velocity for the latent [acoustic (A) | Gray bits of duration before (n) |
after (n)] from the noisy latent, the flow time t and the LM's hidden state: adaLN-modulated
SwiGLU layers (x + gate * ffn(norm(x) (1 + scale) + shift)), a final modulated projection.
State-dict keys are the released ones (`prediction_head.*`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from ..layers import RMSNorm, SwiGLU
from .knobs import TadaKnobs

Projection = Callable[[torch.Tensor], torch.Tensor]
FREQUENCY_SIZE = 256  # TimestepEmbedder.frequency_embedding_size
MAX_PERIOD = 10000


def timestep_embedding(t: torch.Tensor, dim: int = FREQUENCY_SIZE) -> torch.Tensor:
    """[cos(t f), sin(t f)], f_i = exp(-ln(10000) i / (dim/2)) in float32: t (N,) -> (N, dim)
    in t's dtype (the official op order)."""
    half = dim // 2
    exponent = -math.log(MAX_PERIOD) * torch.arange(0, half, dtype=torch.float32) / half
    freqs = torch.exp(exponent).to(t.device)
    args = t[:, None].float() * freqs[None]
    return torch.cat([torch.cos(args), torch.sin(args)], dim=-1).to(t.dtype)


class TimestepEmbedder(nn.Module):
    def __init__(self, hidden: int) -> None:
        super().__init__()
        # mlp.0 Linear(256, H), mlp.1 SiLU, mlp.2 Linear(H, H), no biases
        self.mlp = nn.Sequential(
            nn.Linear(FREQUENCY_SIZE, hidden, bias=False),
            nn.SiLU(),
            nn.Linear(hidden, hidden, bias=False),
        )

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        return self.mlp(timestep_embedding(t).to(self.mlp[0].weight.dtype))


def modulate(x: torch.Tensor, shift: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return x * (1 + scale) + shift


class HeadLayer(nn.Module):
    def __init__(self, hidden: int, ffn: int, eps: float) -> None:
        super().__init__()
        self.ffn = SwiGLU(hidden, ffn)
        self.norm = RMSNorm(hidden, eps)
        self.adaLN_modulation = nn.Sequential(nn.SiLU(), nn.Linear(hidden, 3 * hidden, bias=False))

    def forward(self, x: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        shift, scale, gate = self.adaLN_modulation(c).chunk(3, dim=-1)
        return x + gate * self.ffn(modulate(self.norm(x), shift, scale))


class UnscaledRMSNorm(nn.Module):
    """RMSNorm without a weight (FinalLayer.norm_final), statistics in float32."""

    def __init__(self, eps: float) -> None:
        super().__init__()
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x.float()
        return (y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + self.eps)).type_as(x)


class FinalLayer(nn.Module):
    def __init__(self, hidden: int, out: int, eps: float) -> None:
        super().__init__()
        self.norm_final = UnscaledRMSNorm(eps)
        self.linear = nn.Linear(hidden, out, bias=False)
        self.adaLN_modulation = nn.Sequential(nn.SiLU(), nn.Linear(hidden, 2 * hidden, bias=False))

    def forward(self, x: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        shift, scale = self.adaLN_modulation(c).chunk(2, dim=-1)
        return self.linear(modulate(self.norm_final(x), shift, scale))


class FlowHead(nn.Module):
    """velocity(x (N, L), t (N,), condition (N, H)) -> (N, L); L = latent size, H = head width
    (the LM's hidden size, or its bottleneck)."""

    def __init__(
        self, hidden: int, latent: int, layers: int, ffn_ratio: float, eps: float = 1e-5
    ) -> None:
        super().__init__()
        ffn = int(hidden * ffn_ratio)
        self.noisy_images_proj = nn.Linear(latent, hidden, bias=False)
        self.cond_proj = nn.Linear(hidden, hidden, bias=False)
        self.t_embedder = TimestepEmbedder(hidden)
        self.layers = nn.ModuleList(HeadLayer(hidden, ffn, eps) for _ in range(layers))
        self.final_layer = FinalLayer(hidden, latent, eps)

    def forward(self, x: torch.Tensor, t: torch.Tensor, condition: torch.Tensor) -> torch.Tensor:
        x = self.noisy_images_proj(x)
        c = self.cond_proj(condition) + self.t_embedder(t)
        for layer in self.layers:
            x = layer(x, c)
        return self.final_layer(x, c)


# ----------------------------------------------------------------------------------- the solver
@dataclass(frozen=True)
class FlowOptions:
    """The flow part of hume-tada's InferenceOptions (its defaults; the served ones TadaKnobs')."""

    steps: int = TadaKnobs.flow_steps  # num_flow_matching_steps
    acoustic_cfg: float = TadaKnobs.acoustic_cfg  # acoustic_cfg_scale
    duration_cfg: float = 1.0  # duration_cfg_scale
    cfg_schedule: str = "cosine"  # constant | linear | cosine
    time_schedule: str = "logsnr"  # uniform | cosine | logsnr
    noise_temperature: float = TadaKnobs.noise_temperature


def time_schedule(steps: int, kind: str, device: torch.device | str = "cpu") -> torch.Tensor:
    """The ODE's times (steps + 1,) in [0, 1], float32 as the official builds them."""
    if kind == "cosine":
        u = torch.linspace(0, 1, steps + 1, device=device)
        return 0.5 * (1 - torch.cos(math.pi * u))
    if kind == "logsnr":  # uniform in log-SNR over [5, -5]: t = sigmoid(-log_snr / 2)
        t = torch.sigmoid(-torch.linspace(5.0, -5.0, steps + 1, device=device) / 2)
        t[0], t[-1] = 0.0, 1.0
        return t
    if kind == "uniform":
        return torch.linspace(0, 1, steps + 1, device=device)
    raise ValueError(f"unknown time schedule {kind!r}")


def scheduled_cfg(base: float, t: float, kind: str) -> float:
    """The guidance scale at ODE time t (Python floats, as the official)."""
    if kind == "constant" or base == 1.0:
        return base
    if kind == "linear":
        return 1.0 + (base - 1.0) * (1.0 - t)
    if kind == "cosine":
        return 1.0 + (base - 1.0) * 0.5 * (1.0 + math.cos(math.pi * t))
    raise ValueError(f"unknown cfg schedule {kind!r}")


def guided_velocity(
    head: FlowHead,
    x: torch.Tensor,
    t: torch.Tensor,
    cond: torch.Tensor,
    neg: torch.Tensor,
    acoustic_cfg: float,
    duration_cfg: float,
    acoustic_dim: int,
    project: Projection,
) -> torch.Tensor:
    """TadaForCausalLM._compute_velocity: x (N, L), t scalar tensor, cond/neg (N, H) hidden
    states, `project` the bottleneck (identity without one). With guidance, the conditional and
    unconditional rows run as one batch [cond; neg] (the official call, bottleneck included) and
    mix per part: the acoustic dims with acoustic_cfg, the duration dims with duration_cfg
    (computed even at 1.0: neg + 1.0 (pos - neg), as the official, which rounds differently
    from pos)."""
    rows = x.shape[0]
    if acoustic_cfg == 1.0:
        return head(x, t.repeat(rows).to(x), project(cond))
    both = head(torch.cat([x, x]), t.repeat(2 * rows).to(x), project(torch.cat([cond, neg])))
    pos, negative = both.chunk(2, dim=0)
    return torch.cat(
        [
            (negative + acoustic_cfg * (pos - negative))[..., :acoustic_dim],
            (negative + duration_cfg * (pos - negative))[..., acoustic_dim:],
        ],
        dim=-1,
    )


def solve(
    head: FlowHead,
    noise: torch.Tensor,
    cond: torch.Tensor,
    neg: torch.Tensor,
    options: FlowOptions,
    acoustic_dim: int,
    project: Projection | None = None,
) -> torch.Tensor:
    """Euler steps from `noise` (N, L) at t = 0 to t = 1 (TadaForCausalLM._solve_flow_matching
    without forced durations); cond/neg (N, H) hidden states, `project` the bottleneck."""
    project = project or _identity
    times = time_schedule(options.steps, options.time_schedule, noise.device)
    x, t = noise, times[0]
    for i in range(1, len(times)):
        dt = times[i] - t
        value = t.item()
        velocity = guided_velocity(
            head,
            x,
            t,
            cond,
            neg,
            scheduled_cfg(options.acoustic_cfg, value, options.cfg_schedule),
            scheduled_cfg(options.duration_cfg, value, options.cfg_schedule),
            acoustic_dim,
            project,
        )
        x = x + dt * velocity
        t = times[i]
    return x


def _identity(x: torch.Tensor) -> torch.Tensor:
    return x
