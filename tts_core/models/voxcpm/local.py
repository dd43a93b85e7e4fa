"""VoxCPM2's local modules (spec voxcpm2.md sections 7 and 10): FSQ, the patch encoder LocEnc,
the patch diffusion transformer LocDiT (v2: two conditioning tokens) and its CFM Euler solver
with classifier-free guidance (CFG-Zero*) and the sway-sampled timestep schedule."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from .minicpm import MiniCPMStack

SWAY_COEF = 1.0  # official fixed values at inference
CFG_ZERO_EPS = 1e-8
ZERO_INIT_FRACTION = 0.04
TIME_SCALE = 1000.0


class ScalarQuantizer(nn.Module):
    """`fsq_layer`: out_proj(round(tanh(in_proj(h)) * scale) / scale), round half to even."""

    def __init__(self, hidden: int, latent: int, scale: int) -> None:
        super().__init__()
        self.in_proj = nn.Linear(hidden, latent)
        self.out_proj = nn.Linear(latent, hidden)
        self.scale = scale

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(self.in_proj(h))
        return self.out_proj(torch.round(h * self.scale) / self.scale)


class LocEnc(nn.Module):
    """`feat_encoder`: patches (B, T, P, D) -> CLS states (B, T, H) of a bidirectional stack
    over [special_token, in_proj(patch)]."""

    def __init__(self, encoder: MiniCPMStack, feat_dim: int) -> None:
        super().__init__()
        hidden = encoder.cfg.hidden_size
        self.special_token = nn.Parameter(torch.zeros(1, 1, 1, hidden))
        self.in_proj = nn.Linear(feat_dim, hidden)
        self.encoder = encoder

    def forward(self, patches: torch.Tensor) -> torch.Tensor:
        batch, steps, patch, _ = patches.shape
        x = self.in_proj(patches)
        x = torch.cat([self.special_token.expand(batch, steps, 1, -1), x], dim=2)
        out = self.encoder.run(x.reshape(batch * steps, patch + 1, -1), causal=False)
        return out[:, 0].reshape(batch, steps, -1)


def sinusoidal(t: torch.Tensor, dim: int) -> torch.Tensor:
    """Official SinusoidalPosEmb: [sin | cos] of (1000 t) * exp(-k ln(10000) / (dim/2 - 1))."""
    half = dim // 2
    step = math.log(10000) / (half - 1)
    freqs = torch.exp(torch.arange(half, dtype=t.dtype, device=t.device) * -step)
    arg = TIME_SCALE * t[:, None] * freqs[None, :]
    return torch.cat((arg.sin(), arg.cos()), dim=-1)


class TimeMLP(nn.Module):
    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.linear_1 = nn.Linear(hidden, hidden)
        self.linear_2 = nn.Linear(hidden, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear_2(F.silu(self.linear_1(x)))


class LocDiT(nn.Module):
    """`feat_decoder.estimator`: velocity (B, D, P) of x (B, D, P) given mu (B, 2H), t (B,),
    cond (B, D, P) and dt (B,), over tokens [mu as 2 tokens, time, cond_proj, in_proj]."""

    def __init__(self, decoder: MiniCPMStack, feat_dim: int) -> None:
        super().__init__()
        hidden = decoder.cfg.hidden_size
        self.hidden = hidden
        self.in_proj = nn.Linear(feat_dim, hidden)
        self.cond_proj = nn.Linear(feat_dim, hidden)
        self.out_proj = nn.Linear(hidden, feat_dim)
        self.time_mlp = TimeMLP(hidden)
        self.delta_time_mlp = TimeMLP(hidden)
        self.decoder = decoder

    def forward(
        self,
        x: torch.Tensor,
        mu: torch.Tensor,
        t: torch.Tensor,
        cond: torch.Tensor,
        dt: torch.Tensor,
    ) -> torch.Tensor:
        tokens = self.tokens(x, mu, self.time_token(t, dt), cond)
        return self.velocity(self.decoder.run(tokens, causal=False), x.shape[-1])

    def time_token(self, t: torch.Tensor, dt: torch.Tensor) -> torch.Tensor:
        """(B, H): time_mlp(sin_emb(t)) + delta_time_mlp(sin_emb(dt)), in the model dtype."""
        dtype = self.in_proj.weight.dtype
        time = self.time_mlp(sinusoidal(t, self.hidden).to(dtype))
        return time + self.delta_time_mlp(sinusoidal(dt, self.hidden).to(dtype))

    def tokens(
        self, x: torch.Tensor, mu: torch.Tensor, time: torch.Tensor, cond: torch.Tensor
    ) -> torch.Tensor:
        """The decoder's input (B, 3 + 2P, H): [mu as 2 tokens, time, cond_proj, in_proj]."""
        x = self.in_proj(x.transpose(1, 2))
        cond = self.cond_proj(cond.transpose(1, 2))
        mu = mu.view(x.shape[0], -1, x.shape[-1])
        return torch.cat([mu, time[:, None], cond, x], dim=1)

    def velocity(self, hidden: torch.Tensor, patch: int) -> torch.Tensor:
        """The decoder's output (B, 3 + 2P, H) -> velocity (B, D, P) from the last P tokens."""
        return self.out_proj(hidden[:, hidden.shape[1] - patch :]).transpose(1, 2)


def sway_schedule(steps: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """t_span: linspace(1, 0, steps + 1) + coef (cos(pi/2 t) - 1 + t), in the model dtype."""
    t = torch.linspace(1, 0, steps + 1, dtype=dtype, device=device)
    return t + SWAY_COEF * (torch.cos(torch.pi / 2 * t) - 1 + t)


class EulerCFM(nn.Module):
    """`feat_decoder` (UnifiedCFM inference): Euler flow matching from noise z to a patch."""

    def __init__(self, estimator: LocDiT, feat_dim: int, mean_mode: bool = False) -> None:
        super().__init__()
        self.estimator = estimator
        self.feat_dim = feat_dim
        self.mean_mode = mean_mode

    def forward(
        self, z: torch.Tensor, mu: torch.Tensor, cond: torch.Tensor, steps: int, cfg_value: float
    ) -> torch.Tensor:
        """z (B, D, P) noise (temperature 1), mu (B, 2H), cond (B, D, P) -> patch (B, D, P)."""
        return self.solve_requests([z], [mu], [cond], steps, [cfg_value])[0]

    def solve_requests(
        self,
        zs: list[torch.Tensor],
        mus: list[torch.Tensor],
        conds: list[torch.Tensor],
        steps: int,
        cfg_values: list[float],
        run_decoder: Callable[[list[torch.Tensor]], list[torch.Tensor]] | None = None,
    ) -> list[torch.Tensor]:
        """The Euler solve of R requests at once, each of B rows (z (B, D, P), mu (B, 2H), cond
        (B, D, P); B = 1 when R > 1) with its own cfg value and the same `steps`: every op of a
        request is the op it makes alone, so its patch is bit-identical to solving it alone;
        only the LocDiT's transformer sees every request's tokens, through `run_decoder` (a
        list of (2B, T, H) token tensors -> their final-norm hidden states; default: one call
        each). The time token is the same for all (same t) and computed once."""
        estimator = self.estimator
        if run_decoder is None:
            run_decoder = lambda tokens: [estimator.decoder.run(x, causal=False) for x in tokens]  # noqa: E731
        patch = zs[0].shape[-1]
        t_span = sway_schedule(steps, zs[0].dtype, zs[0].device)
        t, dt = t_span[0], t_span[0] - t_span[1]
        zero_init = max(1, int((steps + 1) * ZERO_INIT_FRACTION))
        xs = list(zs)
        mu_ins = [torch.cat([mu, torch.zeros_like(mu)]) for mu in mus]
        cond_ins = [torch.cat([cond, cond]) for cond in conds]
        for step in range(1, steps + 1):
            if step <= zero_init:
                velocities = [torch.zeros_like(x) for x in xs]
            else:
                t_in = t.reshape(1).expand(2 * xs[0].shape[0])
                dt_in = dt.expand_as(t_in) if self.mean_mode else torch.zeros_like(t_in)
                time = estimator.time_token(t_in, dt_in)
                tokens = [
                    estimator.tokens(torch.cat([x, x]), mu_in, time, cond_in)
                    for x, mu_in, cond_in in zip(xs, mu_ins, cond_ins, strict=True)
                ]
                velocities = [
                    guided_velocity(estimator.velocity(hidden, patch), cfg)
                    for hidden, cfg in zip(run_decoder(tokens), cfg_values, strict=True)
                ]
            xs = [x - dt * velocity for x, velocity in zip(xs, velocities, strict=True)]
            t = t - dt
            if step < steps:
                dt = t - t_span[step + 1]
        return xs


def guided_velocity(out: torch.Tensor, cfg_value: float) -> torch.Tensor:
    """CFG-Zero*: the estimator's output (2B, D, P), conditional rows then unconditional ->
    v_u s* + cfg (v_c - v_u s*), s* = <v_c, v_u> / (|v_u|^2 + eps) per row over D x P."""
    batch = out.shape[0] // 2
    v_cond, v_uncond = out[:batch], out[batch:]
    pos, neg = v_cond.reshape(batch, -1), v_uncond.reshape(batch, -1)
    dot = torch.sum(pos * neg, dim=1, keepdim=True)
    norm = torch.sum(neg**2, dim=1, keepdim=True) + CFG_ZERO_EPS
    s_star = (dot / norm).view(batch, 1, 1)
    return v_uncond * s_star + cfg_value * (v_cond - v_uncond * s_star)
