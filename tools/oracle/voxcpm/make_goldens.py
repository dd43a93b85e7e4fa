"""Goldens of the official AudioVAE V2 (voxcpm==2.0.3) on the tiny checkpoint (oracle venv).

    .oracle-voxcpm-venv/bin/python tools/oracle/voxcpm/make_goldens.py [--fixtures tests/fixtures]

Reads `<fixtures>/voxcpm2-tiny/` (build_tiny.py) and writes `<fixtures>/voxcpm2-tiny.golden/`
{goldens.safetensors, cases.json} in the schema tests/qwen3/conftest.py's `load_goldens` reads,
so the tests reuse its float error model (`check_fp32`, `fp64_bound`, ...):

| key | what |
|---|---|
| `encode_input` | (2, N) float32 16 kHz clips, N not a multiple of the hop (tests the right pad) |
| `encode_latents` | official `encode(x[:, None], 16000)`: (2, D, ceil(N / hop)) |
| `decode_input` | (2, D, T) float32 latents (standard normal, fixed seed) |
| `decode_audio` | official `decode(decode_input)`, squeezed: (2, T * prod(decoder_rates)) |
| `decode_of_encode` | official `decode(encode_latents)`, squeezed |
| `stream_patch` | official `StreamingVAEDecoder` (PR #212) on `decode_input`, `patch_size` frames a call |
| `stream_frame` | the same, one latent frame a call |
| `<key>_fp64` | the official modules in float64 on the same (float32) inputs: the exact value |

cases.json: `fp32_error[key]` = max |golden - exact| (exact = `decode_audio_fp64` for the
streams, which compute the same function), the chunkings, versions. The VAE is loaded as the
official `from_local` does (state dict from `audiovae.pth`, optionally under "state_dict"),
with strict=True here so an incomplete fixture fails loudly. Single-threaded, deterministic.
"""

from __future__ import annotations

import argparse
import json
import platform
from importlib import metadata
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save_file
from voxcpm.model.voxcpm2 import VoxCPMConfig
from voxcpm.modules.audiovae import AudioVAEV2

REPO = Path(__file__).resolve().parents[3]
NAME = "voxcpm2-tiny"
SEED = 4242
ENCODE_SAMPLES = 1237  # -> 124 latents with hop 10 (3 samples of right padding)
DECODE_FRAMES = 40


def load_official(folder: Path) -> tuple[AudioVAEV2, VoxCPMConfig]:
    config = VoxCPMConfig.model_validate_json((folder / "config.json").read_text(encoding="utf-8"))
    vae = AudioVAEV2(config=config.audio_vae_config)
    checkpoint = torch.load(folder / "audiovae.pth", map_location="cpu", weights_only=True)
    vae.load_state_dict(checkpoint.get("state_dict", checkpoint), strict=True)
    return vae.to(torch.float32).eval(), config


def inputs(latent_dim: int) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(SEED)
    t = torch.arange(ENCODE_SAMPLES, dtype=torch.float64) / 16000
    tone = torch.stack([torch.sin(2 * np.pi * 220 * t), torch.sin(2 * np.pi * 530 * t + 1.0)])
    noise = torch.randn(2, ENCODE_SAMPLES, generator=gen, dtype=torch.float64)
    clips = (0.4 * tone + 0.1 * noise).to(torch.float32)
    latents = torch.randn(2, latent_dim, DECODE_FRAMES, generator=gen)
    return {"encode_input": clips, "decode_input": latents}


def official_stream(vae: AudioVAEV2, latents: torch.Tensor, chunk: int) -> torch.Tensor:
    with vae.streaming_decode() as dec:
        parts = [
            dec.decode_chunk(latents[..., i : i + chunk])
            for i in range(0, latents.shape[-1], chunk)
        ]
    return torch.cat(parts, dim=-1).squeeze(1)


@torch.no_grad()
def run(vae: AudioVAEV2, data: dict[str, torch.Tensor], patch: int, rate: int) -> dict:
    dtype = vae.decoder.model[0].weight_v.dtype
    clips = data["encode_input"].to(dtype)[:, None]
    encode_latents = vae.encode(clips, rate)
    out = {"encode_latents": encode_latents}
    out["decode_audio"] = vae.decode(data["decode_input"].to(dtype)).squeeze(1)
    out["decode_of_encode"] = vae.decode(data["encode_latents"].to(dtype)).squeeze(1)
    if dtype == torch.float32:
        out["stream_patch"] = official_stream(vae, data["decode_input"], patch)
        out["stream_frame"] = official_stream(vae, data["decode_input"], 1)
    return out


def make(fixtures: Path) -> Path:
    torch.set_num_threads(1)
    folder = fixtures / NAME
    vae, config = load_official(folder)
    rate = config.audio_vae_config.sample_rate
    data = inputs(config.audio_vae_config.latent_dim)
    data["encode_latents"] = vae.encode(data["encode_input"][:, None], rate).detach()
    goldens = {**data, **run(vae, data, config.patch_size, rate)}
    exact = run(vae.double(), data, config.patch_size, rate)
    errors = {}
    for key, value in list(goldens.items()):
        if key in ("encode_input", "decode_input"):
            continue
        reference = exact[key if key in exact else "decode_audio"]
        errors[key] = float((value.double() - reference).abs().max())
    for key, value in exact.items():
        goldens[f"{key}_fp64"] = value
    out = fixtures / f"{NAME}.golden"
    out.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().contiguous() for k, v in goldens.items()}
    save_file(tensors, str(out / "goldens.safetensors"))
    meta = {
        "checkpoint": NAME,
        "official": f"voxcpm=={metadata.version('voxcpm')}",
        "torch": torch.__version__,
        "machine": platform.processor() or platform.machine(),
        "threads": 1,
        "patch_size": config.patch_size,
        "stream_chunks": {"stream_patch": config.patch_size, "stream_frame": 1},
        "sample_rate": rate,
        "out_sample_rate": config.audio_vae_config.out_sample_rate,
        "fp32_error": errors,
        "cases": [{"key": "vae", "encode_samples": ENCODE_SAMPLES, "decode_frames": DECODE_FRAMES}],
    }
    (out / "cases.json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--fixtures", type=Path, default=REPO / "tests/fixtures")
    out = make(parser.parse_args().fixtures)
    meta = json.loads((out / "cases.json").read_text(encoding="utf-8"))
    print(f"wrote {out}")
    for key, error in meta["fp32_error"].items():
        print(f"  fp32 error {key}: {error:.3g}")


if __name__ == "__main__":
    main()
