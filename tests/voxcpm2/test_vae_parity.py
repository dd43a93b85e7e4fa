"""Our AudioVAE V2 against the official voxcpm==2.0.3 goldens on the tiny checkpoint.

Tolerances: the float error model of tests/qwen3/conftest.py (see tests/voxcpm2/conftest.py):
each float32 result must be within 5 E of the float32 golden and 4 E of the exact float64
value, E being the golden's own recorded float32 error; float64 results within 8 E x 2^-29.
"""

from __future__ import annotations

import torch
from qwen3.conftest import check_fp32, fp64_bound

from tts_core.models.voxcpm import AudioVAE


def test_encode_matches_official(tiny_vae: AudioVAE, vae_goldens) -> None:
    latents = tiny_vae.encode(vae_goldens["encode_input"])
    print(check_fp32(latents, vae_goldens, "encode_latents"))


def test_encode_accepts_1d_and_channel_layouts(tiny_vae: AudioVAE, vae_goldens) -> None:
    clips = vae_goldens["encode_input"]
    batched = tiny_vae.encode(clips)
    assert torch.equal(tiny_vae.encode(clips[:, None]), batched)
    one = tiny_vae.encode(clips[1])
    assert one.shape == (1, *batched.shape[1:])
    print(check_fp32(torch.cat([tiny_vae.encode(clips[0]), one]), vae_goldens, "encode_latents"))


def test_decode_matches_official(tiny_vae: AudioVAE, vae_goldens) -> None:
    print(check_fp32(tiny_vae.decode(vae_goldens["decode_input"]), vae_goldens, "decode_audio"))


def test_decode_of_encoded_latents_matches_official(tiny_vae: AudioVAE, vae_goldens) -> None:
    audio = tiny_vae.decode(vae_goldens["encode_latents"])
    print(check_fp32(audio, vae_goldens, "decode_of_encode"))


def test_streaming_matches_official_streaming(tiny_vae: AudioVAE, vae_goldens) -> None:
    """Same chunkings as the official StreamingVAEDecoder runs (patch_size frames, 1 frame)."""
    latents = vae_goldens["decode_input"]
    for key, chunk in vae_goldens.meta["stream_chunks"].items():
        state = tiny_vae.init_state(batch_size=latents.shape[0])
        parts = [
            tiny_vae.decode_step(latents[..., i : i + chunk], state)
            for i in range(0, latents.shape[-1], chunk)
        ]
        print(check_fp32(torch.cat(parts, dim=-1), vae_goldens, key))


def test_float64_matches_official_float64(tiny_folder, vae_goldens) -> None:
    """Our math in float64 equals the official modules in float64 to float64 rounding: the
    float32 agreement above is not luck of rounding."""
    vae = AudioVAE.from_folder(tiny_folder, dtype=torch.float64)
    ours = {
        "encode_latents": vae.encode(vae_goldens["encode_input"].double()),
        "decode_audio": vae.decode(vae_goldens["decode_input"].double()),
        "decode_of_encode": vae.decode(vae_goldens["encode_latents"].double()),
    }
    for key, value in ours.items():
        assert value.dtype == torch.float64
        error = float((value - vae_goldens[f"{key}_fp64"]).abs().max())
        bound = fp64_bound(vae_goldens, key)
        print(f"{key} fp64: {error:.3g} (bound {bound:.3g})")
        assert error <= bound, (key, error, bound)
