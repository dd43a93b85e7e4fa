"""S3Gen token-to-mel `flow` (CausalMaskedDiffWithXvec + meanflow CausalConditionalCFM; spec
chatterbox.md 8.1, 8.3): prompt + generated tokens -> encoder -> mu (80 x 2T), then 2 Euler
steps t = 0, 1/2, 1 of the estimator from noise whose generated part is drawn first.
`meanflow=False` is the English model's regular CFM: one full-length noise draw, 10 Euler
steps on a cosine schedule, each a batch of 2 (conditional, and mu/spks/cond zeroed) combined
with classifier-free guidance 0.7 (`solve_euler`)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .config import MELS, S3_VOCAB, DecoderSizes, EncoderSizes
from .estimator import ConditionalDecoder
from .flow_encoder import UpsampleConformerEncoder

TOKEN_MEL_RATIO = 2
MEANFLOW_STEPS = 2
CFM_STEPS = 10  # the English model's n_cfm_timesteps
CFG_RATE = 0.7  # CFM_PARAMS inference_cfg_rate


class CFM(nn.Module):
    def __init__(self, sizes: DecoderSizes, meanflow: bool = True) -> None:
        super().__init__()
        self.estimator = ConditionalDecoder(sizes, meanflow)


class Flow(nn.Module):
    def __init__(
        self, encoder: EncoderSizes, decoder: DecoderSizes, spk_dim: int, meanflow: bool = True
    ) -> None:
        super().__init__()
        self.meanflow = meanflow
        self.input_embedding = nn.Embedding(S3_VOCAB, encoder.size)
        self.spk_embed_affine_layer = nn.Linear(spk_dim, MELS)
        self.encoder = UpsampleConformerEncoder(encoder)
        self.encoder_proj = nn.Linear(encoder.size, MELS)
        self.decoder = CFM(decoder, meanflow)

    def draw_noise(self, n_tokens: int, generator: torch.Generator | None) -> torch.Tensor:
        """S3Token2Wav.flow_inference's first draw: randn(1, 80, 2 n_tokens) (float32, CPU
        generator order), before the CFM's full-length draw."""
        return torch.randn(1, MELS, TOKEN_MEL_RATIO * n_tokens, generator=generator)

    @torch.inference_mode()
    def inference(
        self,
        tokens: torch.Tensor,
        prompt_token: torch.Tensor,
        prompt_feat: torch.Tensor,
        embedding: torch.Tensor,
        generator: torch.Generator | None,
        noise: torch.Tensor | None = None,
        prompt_noise: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """tokens (1, T), prompt_token (1, Tp), prompt_feat (1, Tm, 80), embedding (1, E) -> mel
        (1, 80, 2(Tp + T) - Tm) of the generated part. Draws, in the official order: `noise`
        (1, 80, 2T) unless given, then randn over the full length unless `prompt_noise`
        (1, 80, >= 2 Tp) gives its prompt part (a stream's: no draw here)."""
        z, mu, spks, cond = self.cfm_inputs(
            tokens, prompt_token, prompt_feat, embedding, generator, noise, prompt_noise
        )
        mask = torch.ones(1, 1, mu.shape[2], dtype=mu.dtype, device=mu.device)
        solve = self._euler if self.meanflow else self._cfg_euler
        return solve(z, mu, mask, spks, cond)[:, :, prompt_feat.shape[1] :]

    def cfm_inputs(
        self,
        tokens: torch.Tensor,
        prompt_token: torch.Tensor,
        prompt_feat: torch.Tensor,
        embedding: torch.Tensor,
        generator: torch.Generator | None,
        noise: torch.Tensor | None,
        prompt_noise: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """`inference` up to the Euler steps: the CFM's start z, mu and cond (1, 80, Tm_all),
        spks (1, 80)."""
        dtype = self.spk_embed_affine_layer.weight.dtype
        if noise is None and self.meanflow:  # the regular CFM draws only the full-length z
            noise = self.draw_noise(tokens.shape[1], generator)
        spks = self.spk_embed_affine_layer(F.normalize(embedding.to(dtype), dim=1))  # (1, 80)
        token = torch.cat([prompt_token, tokens], dim=1).long()
        h = self.encoder(self.input_embedding(token))  # (1, 2(Tp+T), C); no padding mask: B=1
        mu = self.encoder_proj(h).transpose(1, 2).contiguous()  # (1, 80, Tm_all)
        prompt_mels = prompt_feat.shape[1]
        cond = torch.zeros(1, mu.shape[2], MELS, dtype=mu.dtype, device=mu.device)
        cond[:, :prompt_mels] = prompt_feat
        if prompt_noise is None:
            z = torch.randn(mu.shape, generator=generator).to(device=mu.device, dtype=mu.dtype)
        else:  # the streaming path: the prompt part given, the rest overwritten below
            z = mu.new_zeros(mu.shape)
            prompt_part = mu.shape[2] - noise.shape[2]
            z[..., :prompt_part] = prompt_noise[..., :prompt_part].to(z)
        # meanflow: the generated frames start from the first draw (prompt_len counts from the
        # end, so an odd prompt mel length shifts it by one as in the official).
        if noise is not None:
            z[..., mu.shape[2] - noise.shape[2] :] = noise.to(z)
        return z, mu, spks, cond.transpose(1, 2)

    def _cfg_euler(self, x, mu, mask, spks, cond) -> torch.Tensor:
        """solve_euler (batch 1): t on 1 - cos(pi/2 linspace(0, 1, 11)); each step runs the
        estimator on [conditional | mu, spks, cond zeroed] and steps x by
        dt ((1 + 0.7) v_cond - 0.7 v_uncond), the official's buffers and op order."""
        t_span = torch.linspace(0, 1, CFM_STEPS + 1, device=mu.device, dtype=mu.dtype)
        t_span = 1 - torch.cos(t_span * 0.5 * torch.pi)
        steps = x.shape[2]
        x_in = x.new_zeros(2, MELS, steps)
        mask_in = x.new_zeros(2, 1, steps)
        mu_in = x.new_zeros(2, MELS, steps)
        t_in = x.new_zeros(2)
        spks_in = x.new_zeros(2, MELS)
        cond_in = x.new_zeros(2, MELS, steps)
        estimator = self.decoder.estimator
        for t, r in zip(t_span[:-1], t_span[1:], strict=True):
            t, r = t.unsqueeze(0), r.unsqueeze(0)
            x_in[:1] = x_in[1:] = x
            mask_in[:1] = mask_in[1:] = mask
            mu_in[:1] = mu
            t_in[:1] = t_in[1:] = t
            spks_in[:1] = spks
            cond_in[:1] = cond
            v, v_uncond = torch.split(
                estimator(x_in, mask_in, mu_in, t_in, spks_in, cond_in), [1, 1], dim=0
            )
            v = (1.0 + CFG_RATE) * v - CFG_RATE * v_uncond
            x = x + (r - t) * v
        return x

    def _euler(self, x, mu, mask, spks, cond) -> torch.Tensor:
        """basic_euler: x += (r - t) v(x, t, r) for (t, r) in (0, 1/2), (1/2, 1)."""
        t_span = torch.linspace(0, 1, MEANFLOW_STEPS + 1, device=mu.device, dtype=mu.dtype)
        estimator = self.decoder.estimator
        for t, r in zip(t_span[:-1], t_span[1:], strict=True):
            t, r = t[None], r[None]
            v = estimator(x, mask, mu, t, spks, cond, r)
            x = x + (r - t) * v
        return x
