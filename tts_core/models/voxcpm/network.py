"""The VoxCPM2 network without the AudioVAE: every tensor of `model.safetensors`, under its
released key (spec voxcpm2.md section 2.1), and the math of prefill and one generation step
(sections 8 and 9). Generation order, random numbers and audio live in model.py."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ..layers import KVCache
from .config import VoxCPM2Config
from .local import EulerCFM, LocDiT, LocEnc, ScalarQuantizer
from .minicpm import MiniCPMStack, StackSpec


@dataclass
class DecodeState:
    """One generation's running state: KV caches, next position, last hidden states."""

    base_caches: list[KVCache]
    residual_caches: list[KVCache]
    position: int
    lm_hidden: torch.Tensor  # (1, H)
    residual_hidden: torch.Tensor  # (1, H)


class VoxCPM2Network(nn.Module):
    def __init__(self, cfg: VoxCPM2Config) -> None:
        super().__init__()
        self.cfg = cfg
        lm = cfg.lm
        hidden = lm.hidden_size
        base = StackSpec.derive(lm)
        self.base_lm = MiniCPMStack(base, lm, cfg.max_length, vocab_size=lm.vocab_size)
        residual = StackSpec.derive(
            lm, layers=cfg.residual_lm_num_layers, use_rope=not cfg.residual_lm_no_rope
        )
        self.residual_lm = MiniCPMStack(residual, lm, cfg.max_length)
        enc, dit = cfg.encoder, cfg.dit.stack
        enc_spec, dit_spec = StackSpec.local(lm, enc), StackSpec.local(lm, dit)
        patch = cfg.patch_size
        self.feat_encoder = LocEnc(MiniCPMStack(enc_spec, lm, patch + 1), cfg.feat_dim)
        estimator = LocDiT(MiniCPMStack(dit_spec, lm, 2 * patch + 3), cfg.feat_dim)
        self.feat_decoder = EulerCFM(estimator, cfg.feat_dim, cfg.dit.mean_mode)
        self.fsq_layer = ScalarQuantizer(
            hidden, cfg.scalar_quantization_latent_dim, cfg.scalar_quantization_scale
        )
        self.enc_to_lm_proj = nn.Linear(enc.hidden_dim, hidden)
        self.lm_to_dit_proj = nn.Linear(hidden, dit.hidden_dim)
        self.res_to_dit_proj = nn.Linear(hidden, dit.hidden_dim)
        self.fusion_concat_proj = nn.Linear(2 * hidden, hidden)
        self.stop_proj = nn.Linear(hidden, hidden)
        self.stop_head = nn.Linear(hidden, 2, bias=False)
        self.scale_emb = lm.scale_emb if lm.use_mup else 1.0

    @property
    def dtype(self) -> torch.dtype:
        return self.stop_head.weight.dtype

    @property
    def device(self) -> torch.device:
        return self.stop_head.weight.device

    def encode_patches(self, patches: torch.Tensor) -> torch.Tensor:
        """LocEnc + enc_to_lm_proj: (1, T, P, D) -> (1, T, H)."""
        return self.enc_to_lm_proj(self.feat_encoder(patches))

    @torch.inference_mode()
    def prefill(
        self,
        tokens: torch.Tensor,
        patches: torch.Tensor,
        text_mask: torch.Tensor,
        audio_mask: torch.Tensor,
        positions: int | None = None,
    ) -> DecodeState:
        """tokens (1, T) int64, patches (1, T, P, D), masks (1, T) float 0/1 -> state after
        the prompt (base LM output FSQ'd at audio positions only); the caches hold `positions`
        (prompt + steps to come; default max_length)."""
        feat = self.encode_patches(patches)
        text = self.base_lm.embed_tokens(tokens) * self.scale_emb
        combined = text_mask[..., None] * text + audio_mask[..., None] * feat
        base_caches = self.base_lm.request_caches(self.dtype, self.device, positions)
        enc = self.base_lm.run(combined, base_caches, 0)
        enc = self.fsq_layer(enc) * audio_mask[..., None] + enc * text_mask[..., None]
        fused = self.fusion_concat_proj(torch.cat((enc, audio_mask[..., None] * feat), dim=-1))
        residual_caches = self.residual_lm.request_caches(self.dtype, self.device, positions)
        res = self.residual_lm.run(fused, residual_caches, 0)
        return DecodeState(base_caches, residual_caches, tokens.shape[1], enc[:, -1], res[:, -1])

    def dit_condition(self, state: DecodeState) -> torch.Tensor:
        """mu (1, 2 H_dit) = [lm_to_dit_proj(lm_h), res_to_dit_proj(res_h)]."""
        return torch.cat(
            (self.lm_to_dit_proj(state.lm_hidden), self.res_to_dit_proj(state.residual_hidden)),
            dim=-1,
        )

    def stop_logits(self, state: DecodeState) -> torch.Tensor:
        return self.stop_head(F.silu(self.stop_proj(state.lm_hidden)))

    @torch.inference_mode()
    def advance(self, state: DecodeState, embed: torch.Tensor) -> None:
        """One LM step on the new patch's embedding (1, H): base LM (then FSQ, always), then
        the residual LM on fusion_concat_proj([lm_h, embed]). Updates `state` in place."""
        pos = state.position
        lm_hidden = self.base_lm.run(embed[:, None], state.base_caches, pos)[:, 0]
        lm_hidden = self.fsq_layer(lm_hidden)
        fused = self.fusion_concat_proj(torch.cat((lm_hidden, embed), dim=-1))
        state.residual_hidden = self.residual_lm.run(fused[:, None], state.residual_caches, pos)[
            :, 0
        ]
        state.lm_hidden = lm_hidden
        state.position = pos + 1
