"""Audio sanity (finite, in [-1, 1], rate and length from the config) and the released
geometry (key names and shapes of audiovae.pth as voxcpm2.md section 2.2 lists them)."""

from __future__ import annotations

from pathlib import Path

import torch

from tts_core.models.voxcpm import AudioVAE, VoxCPM2Config


def test_tiny_audio_is_finite_bounded_and_sized(tiny_vae: AudioVAE, vae_goldens) -> None:
    latents = vae_goldens["decode_input"]
    audio = tiny_vae.decode(latents)
    assert audio.dtype == torch.float32 and bool(torch.isfinite(audio).all())
    assert float(audio.abs().max()) <= 1.0 and float(audio.std()) > 0.05  # tanh output, not silent
    assert tiny_vae.out_sample_rate == 48000 and tiny_vae.decode_hop_length == 30
    assert audio.shape == (2, latents.shape[-1] * 30)
    clips = vae_goldens["encode_input"]
    assert tiny_vae.encode(clips).shape == (2, 8, -(-clips.shape[-1] // 10))


def _release_vae_on_meta(folder: Path) -> AudioVAE:
    with torch.device("meta"):  # shapes only: no 94 M parameters allocated
        return AudioVAE(VoxCPM2Config.from_folder(folder).audio_vae)


def test_release_geometry_matches_the_released_file(release_config_folder: Path) -> None:
    vae = _release_vae_on_meta(release_config_folder)
    state = vae.state_dict()
    assert len(state) == 312
    assert sum(k.startswith("encoder.") for k in state) == 121
    assert sum(k.startswith("decoder.") for k in state) == 191
    floats = sum(v.numel() for v in state.values() if v.is_floating_point())
    assert round(floats / 1e6, 1) == 94.2
    assert state["decoder.sr_bin_boundaries"].shape == (3,)
    shapes = {
        "encoder.block.0.weight_v": (128, 1, 7),
        "encoder.block.1.block.0.block.1.weight_v": (128, 1, 7),  # depthwise
        "encoder.block.4.block.4.weight_v": (2048, 1024, 16),
        "encoder.fc_mu.weight_v": (64, 2048, 3),
        "decoder.model.0.weight_v": (64, 1, 7),
        "decoder.model.1.weight_v": (2048, 64, 1),
        "decoder.model.2.block.1.weight_v": (2048, 1024, 16),  # transposed: (C_in, C_out, 2s)
        "decoder.model.2.block.1.weight_g": (2048, 1, 1),  # norm per input channel
        "decoder.model.7.block.1.weight_v": (64, 32, 4),
        "decoder.model.8.alpha": (1, 32, 1),
        "decoder.model.9.weight_v": (1, 32, 7),
        "decoder.sr_cond_model.2.scale_embed.weight": (4, 2048),
        "decoder.sr_cond_model.7.bias_embed.weight": (4, 64),
    }
    for key, shape in shapes.items():
        assert tuple(state[key].shape) == shape, key


def test_release_streaming_state_table(release_config_folder: Path) -> None:
    """voxcpm2.md section 13: index 0: 6; per block: transposed conv 1 (C_in), residual units
    6/18/54 (C_out); index 9: 6."""
    vae = _release_vae_on_meta(release_config_folder)
    histories = vae.init_state().histories
    sizes = [(h.buffer.shape[1], h.size) for h in histories]
    expected = [(64, 6)]
    for c_in in (2048, 1024, 512, 256, 128, 64):
        expected += [(c_in, 1), (c_in // 2, 6), (c_in // 2, 18), (c_in // 2, 54)]
    assert sizes == expected + [(32, 6)]


def test_release_sized_decode_gives_1920_samples_per_frame(release_config_folder: Path) -> None:
    """Real sizes, random weights (the release weights are not available here): 2 latent frames
    -> 2 x 1920 finite samples in [-1, 1] at 48 kHz, one full pass and streamed frame by frame.
    (Stream == full is checked against an error model on the tiny checkpoint, whose goldens
    record E; no exact value exists for these random weights, so no closeness is claimed here.)"""
    vae = AudioVAE(VoxCPM2Config.from_folder(release_config_folder).audio_vae)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, tensor in vae.state_dict().items():
            if name.endswith("weight_v"):
                tensor.copy_(torch.randn(tensor.shape, generator=gen))
            elif name.endswith("weight_g"):
                tensor.fill_(0.5)
    vae.refresh_derived()
    assert vae.decoder.sr_bucket == 3  # bucketize(48000, [20000, 30000, 40000])
    latents = torch.randn(1, 64, 2, generator=gen)
    audio = vae.decode(latents)
    assert vae.out_sample_rate == 48000 and audio.shape == (1, 2 * 1920)
    state = vae.init_state()
    streamed = torch.cat([vae.decode_step(latents[..., i : i + 1], state) for i in range(2)], -1)
    for result in (audio, streamed):
        assert result.shape == (1, 3840) and bool(torch.isfinite(result).all())
        assert float(result.abs().max()) <= 1.0
