"""AudioVAE V2 of VoxCPM2: 16 kHz audio -> latents (encode), latents -> 48 kHz audio (decode),
and an exact per-stream streaming decoder.

```python
vae = AudioVAE.from_folder(folder)                  # strict load of audiovae.safetensors / .pth
z = vae.encode(audio_16k)                           # (B, D, ceil(N / hop)), hop = prod(encoder_rates)
wav = vae.decode(z)                                 # (B, T * prod(decoder_rates)), in [-1, 1]
state = vae.init_state(batch_size=1)                # VAEDecoderState: .reset(), .clone()
pcm = vae.decode_step(z[..., a:b], state)           # concatenated steps == decode(z)
```

Sizes come from `audio_vae_config`; for the release that is 64 latents at 25 Hz, 1920 output
samples per latent frame at 48 kHz. The VAE always computes in float32 (as the official package
casts it back to float32 whatever the model dtype); `set_dtype(torch.float64)` is for tests.
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from ..layers import Snake1d
from .audiovae_layers import (
    CausalDecoderBlock,
    CausalEncoderBlock,
    SampleRateCondition,
    WNCausalConv1d,
    WNCausalTransposeConv1d,
)
from .checkpoint import load_audiovae_state
from .config import AudioVAEConfig, VoxCPM2Config
from .vae_streaming import ConvHistory, VAEDecoderState


class CausalEncoder(nn.Module):
    """conv 1 -> d (k7) -> blocks doubling channels (stride = each rate) -> fc_mu (k3).

    `fc_logvar` is in the checkpoint and loaded, but inference only uses the mean."""

    def __init__(self, cfg: AudioVAEConfig) -> None:
        super().__init__()
        d_model = cfg.encoder_dim
        blocks: list[nn.Module] = [WNCausalConv1d(1, d_model, 7, padding=3)]
        for stride in cfg.encoder_rates:
            d_model *= 2
            groups = d_model // 2 if cfg.depthwise else 1
            blocks.append(CausalEncoderBlock(d_model, stride, groups))
        self.block = nn.Sequential(*blocks)
        self.fc_mu = WNCausalConv1d(d_model, cfg.latent_dim, 3, padding=1)
        self.fc_logvar = WNCausalConv1d(d_model, cfg.latent_dim, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc_mu(self.block(x))


class CausalDecoder(nn.Module):
    """`model`: [depthwise k7 conv, 1x1 conv] (or one k7 conv), decoder blocks, Snake, k7 conv
    to 1 channel, tanh. Before each block: the sample-rate condition of `out_sample_rate`."""

    def __init__(self, cfg: AudioVAEConfig) -> None:
        super().__init__()
        latent, channels = cfg.latent_dim, cfg.decoder_dim
        if cfg.depthwise:
            layers: list[nn.Module] = [
                WNCausalConv1d(latent, latent, 7, padding=3, groups=latent),
                WNCausalConv1d(latent, channels, 1),
            ]
        else:
            layers = [WNCausalConv1d(latent, channels, 7, padding=3)]
        conditioned: list[int] = []
        for i, stride in enumerate(cfg.decoder_rates):
            input_dim, output_dim = channels // 2**i, channels // 2 ** (i + 1)
            conditioned.append(len(layers))
            groups = output_dim if cfg.depthwise else 1
            layers.append(CausalDecoderBlock(input_dim, output_dim, stride, groups))
        layers += [Snake1d(output_dim), WNCausalConv1d(output_dim, 1, 7, padding=3), nn.Tanh()]
        self.model = nn.ModuleList(layers)
        self.sr_cond_model: nn.ModuleDict | None = None
        self.sr_bucket = -1  # bucket of out_sample_rate, set by `refresh_derived`
        self.out_sample_rate = cfg.out_sample_rate
        if cfg.sr_bin_boundaries is not None:
            boundaries = torch.tensor(cfg.sr_bin_boundaries, dtype=torch.int32)
            self.register_buffer("sr_bin_boundaries", boundaries)
            buckets = len(cfg.sr_bin_boundaries) + 1
            self.sr_cond_model = nn.ModuleDict(
                {
                    str(i): SampleRateCondition(layers[i].input_channels, buckets)
                    for i in conditioned
                }
            )
        slot = 0
        for module in self.modules():  # streaming history slots, in module order
            if isinstance(module, (WNCausalConv1d, WNCausalTransposeConv1d)) and module.history > 0:
                module.slot = slot
                slot += 1

    def stateful_convs(self) -> list[WNCausalConv1d | WNCausalTransposeConv1d]:
        convs = [m for m in self.modules() if getattr(m, "slot", -1) >= 0]
        return sorted(convs, key=lambda m: m.slot)

    def refresh_derived(self) -> None:
        """The condition bucket, from the loaded `sr_bin_boundaries` buffer as the official
        `torch.bucketize(out_sample_rate, boundaries)` (48000 -> 3 for the release)."""
        if self.sr_cond_model is not None and not self.sr_bin_boundaries.is_meta:
            rate = torch.tensor([self.out_sample_rate], dtype=torch.int32)
            self.sr_bucket = int(torch.bucketize(rate, self.sr_bin_boundaries.cpu())[0])

    def forward(self, x: torch.Tensor, state: VAEDecoderState | None = None) -> torch.Tensor:
        for i, layer in enumerate(self.model):
            if self.sr_cond_model is not None and str(i) in self.sr_cond_model:
                x = self.sr_cond_model[str(i)](x, self.sr_bucket)
            if isinstance(layer, (WNCausalConv1d, CausalDecoderBlock)):
                x = layer(x, state)
            else:
                x = layer(x)
        return x


class AudioVAE(nn.Module):
    """AudioVAE V2. Keys of `state_dict()` are exactly those of the released `audiovae.pth`."""

    def __init__(self, cfg: AudioVAEConfig) -> None:
        super().__init__()
        self.config = cfg
        self.encoder = CausalEncoder(cfg)
        self.decoder = CausalDecoder(cfg)
        self.latent_dim = cfg.latent_dim
        self.hop_length = cfg.hop_length  # input samples per latent frame
        self.decode_hop_length = cfg.decode_hop_length  # output samples per latent frame
        self.sample_rate = cfg.sample_rate
        self.out_sample_rate = cfg.out_sample_rate
        self.refresh_derived()

    @classmethod
    def from_folder(
        cls,
        folder: str | Path,
        device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.float32,
        config: AudioVAEConfig | None = None,
    ) -> AudioVAE:
        """Config from `config.json` (unless given), weights from `audiovae.safetensors`
        (preferred, as the official loader) or `audiovae.pth`, loaded strictly (checkpoint.py)."""
        vae = cls(config or VoxCPM2Config.from_folder(folder).audio_vae)
        load_audiovae_state(vae, folder)
        return vae.to(device=device).set_dtype(dtype).eval()

    @torch.no_grad()
    def refresh_derived(self) -> None:
        """Recompute weight-normed weights and the condition bucket (after load / dtype change)."""
        for module in self.modules():
            if hasattr(module, "refresh_weight"):
                module.refresh_weight()
        self.decoder.refresh_derived()

    def set_dtype(self, dtype: torch.dtype) -> AudioVAE:
        """Cast the parameters and recompute the derived weights in `dtype` (returns self)."""
        self.to(dtype=dtype)
        self.refresh_derived()
        return self

    @property
    def dtype(self) -> torch.dtype:
        return self.decoder.model[0].weight_v.dtype

    @property
    def device(self) -> torch.device:
        return self.decoder.model[0].weight_v.device

    @torch.inference_mode()
    def encode(self, audio: torch.Tensor) -> torch.Tensor:
        """Audio at `sample_rate` ((N,), (B, N) or (B, 1, N)) -> latent means (B, D, ceil(N/hop)).

        Zeros are appended up to a multiple of the hop (official `preprocess`)."""
        audio = torch.as_tensor(audio)
        if audio.dim() == 1:
            audio = audio[None, None]
        elif audio.dim() == 2:
            audio = audio[:, None]
        if audio.dim() != 3 or audio.shape[1] != 1 or audio.shape[-1] == 0:
            raise ValueError(
                f"audio must be (N,), (B, N) or (B, 1, N) with N > 0, got {tuple(audio.shape)}"
            )
        audio = audio.to(device=self.device, dtype=self.dtype)
        pad = -audio.shape[-1] % self.hop_length
        return self.encoder(F.pad(audio, (0, pad)))

    @torch.inference_mode()
    def decode(self, latents: torch.Tensor) -> torch.Tensor:
        """Latents (B, D, T) -> audio (B, T * decode_hop_length) at `out_sample_rate`, one full pass."""
        return self.decoder(self._check_latents(latents)).squeeze(1)

    def init_state(self, batch_size: int = 1) -> VAEDecoderState:
        """A fresh stream: zero histories (= the full decode's zero left padding)."""
        histories = [
            ConvHistory(
                torch.zeros(
                    batch_size, conv.in_channels, conv.history, dtype=self.dtype, device=self.device
                )
            )
            for conv in self.decoder.stateful_convs()
        ]
        return VAEDecoderState(histories=histories, batch_size=batch_size)

    @torch.inference_mode()
    def decode_step(self, latents: torch.Tensor, state: VAEDecoderState) -> torch.Tensor:
        """The next t >= 1 latent frames of a stream (B, D, t) -> (B, t * decode_hop_length).

        Concatenated outputs equal `decode` of the concatenated latents (float rounding aside),
        whatever the split. `state` is updated in place."""
        latents = self._check_latents(latents)
        if latents.shape[0] != state.batch_size:
            raise ValueError(f"batch {latents.shape[0]} != state batch {state.batch_size}")
        if state.dtype != self.dtype or state.device != self.device:
            raise ValueError(
                f"state is {state.dtype}/{state.device}, model {self.dtype}/{self.device}"
            )
        audio = self.decoder(latents, state).squeeze(1)
        state.frames_seen += latents.shape[-1]
        return audio

    def _check_latents(self, latents: torch.Tensor) -> torch.Tensor:
        latents = torch.as_tensor(latents)
        if latents.dim() != 3 or latents.shape[1] != self.latent_dim or latents.shape[-1] == 0:
            raise ValueError(
                f"latents must be (B, {self.latent_dim}, T) with T >= 1, got {tuple(latents.shape)}"
            )
        return latents.to(device=self.device, dtype=self.dtype)
