"""Build the tiny VoxCPM2 checkpoint folder `voxcpm2-tiny` in the released layout.

    .oracle-voxcpm-venv/bin/python tools/oracle/voxcpm/build_tiny.py [--out tests/fixtures]

Writes `<out>/voxcpm2-tiny/`:
* `config.json`: the released config (every key, same order, including the ignored
  `dit_config.mean_mode` and `"device": "cuda"`) with only size fields shrunk, chosen unlike
  the release (patch_size 3, feat_dim 8, odd decoder strides) so nothing hard-coded passes;
* `audiovae.pth`: the official `AudioVAEV2` state dict, a plain pickled dict (`torch.save`) like
  the release, with deterministic random weights (fixed torch.Generator seed);
* `special_tokens_map.json`: the release file, byte for byte.
`model.safetensors` and `tokenizer.json` belong to later phases (LM/DiT parity) and are not
written yet. Runs in the oracle venv: the weights are made by the official module.
"""

from __future__ import annotations

import argparse
import copy
import json
import shutil
from pathlib import Path

import torch
from voxcpm.model.voxcpm2 import VoxCPMConfig
from voxcpm.modules.audiovae import AudioVAEConfigV2, AudioVAEV2

REPO = Path(__file__).resolve().parents[3]
REFERENCE = REPO.parent / "shared/reference/voxcpm/checkpoints/VoxCPM2"
NAME = "voxcpm2-tiny"
SEED = 20260714

LM_SIZES = {
    "hidden_size": 32,
    "intermediate_size": 48,
    "num_attention_heads": 4,
    "num_hidden_layers": 2,
    "num_key_value_heads": 2,
    "kv_channels": 8,
    "vocab_size": 512,
    "max_position_embeddings": 4096,
}
LOCAL_SIZES = {"hidden_dim": 16, "ffn_dim": 40, "num_heads": 2, "num_layers": 2, "kv_channels": 8}
TOP_SIZES = {
    "patch_size": 3,
    "feat_dim": 8,
    "scalar_quantization_latent_dim": 16,
    "residual_lm_num_layers": 2,
    "max_length": 512,
}
# 16 kHz in, hop 10; 48 kHz out, 30 samples per latent (ratio 3 = 48000 / 16000 as released).
VAE_SIZES = {
    "encoder_dim": 4,
    "encoder_rates": [2, 5],
    "latent_dim": 8,
    "decoder_dim": 32,
    "decoder_rates": [5, 3, 2],
}


def tiny_config(release: dict) -> dict:
    cfg = copy.deepcopy(release)
    lm = cfg["lm_config"]
    lm.update({k: v for k, v in LM_SIZES.items() if k in lm})
    half = LM_SIZES["kv_channels"] // 2  # LongRoPE lists: head_dim / 2 factors
    scaling = lm["rope_scaling"]
    for key in ("long_factor", "short_factor"):
        step = len(scaling[key]) // half
        scaling[key] = scaling[key][::step][:half]
    scaling["original_max_position_embeddings"] = LM_SIZES["max_position_embeddings"]
    cfg.update({k: v for k, v in TOP_SIZES.items() if k in cfg})
    cfg["encoder_config"].update(LOCAL_SIZES)
    cfg["dit_config"].update(LOCAL_SIZES)
    cfg["audio_vae_config"].update(VAE_SIZES)
    return cfg


@torch.no_grad()
def fill_weights(vae: AudioVAEV2, seed: int) -> None:
    """Deterministic weights with O(1) activations: weight-norm directions random, gains away
    from ||v||, Snake alphas spread, and each sample-rate bucket its own scale/bias row (so
    using the wrong bucket changes the audio)."""
    gen = torch.Generator().manual_seed(seed)
    for name, tensor in vae.state_dict().items():
        if not tensor.is_floating_point():
            continue  # decoder.sr_bin_boundaries stays as configured
        shape = tensor.shape
        if name.endswith("weight_v"):
            value = torch.randn(shape, generator=gen)
        elif name.endswith("weight_g"):
            value = 0.45 + 0.4 * torch.rand(shape, generator=gen)
        elif name.endswith("alpha"):
            value = 0.5 + 1.5 * torch.rand(shape, generator=gen)
        elif name.endswith("scale_embed.weight"):
            value = 1.0 + 0.3 * torch.randn(shape, generator=gen)
        elif name.endswith("bias_embed.weight") or name.endswith("bias"):
            value = 0.1 * torch.randn(shape, generator=gen)
        else:
            raise KeyError(f"no init rule for {name}")
        tensor.copy_(value)


def build(out: Path, reference: Path = REFERENCE) -> Path:
    release = json.loads((reference / "config.json").read_text(encoding="utf-8"))
    cfg = tiny_config(release)
    VoxCPMConfig.model_validate(cfg)  # the official parser accepts the whole file
    folder = out / NAME
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(cfg, indent=2) + "\n", encoding="utf-8")
    shutil.copyfile(reference / "special_tokens_map.json", folder / "special_tokens_map.json")
    vae = AudioVAEV2(AudioVAEConfigV2(**cfg["audio_vae_config"]))
    fill_weights(vae, SEED)
    state = {k: v.detach().clone().contiguous() for k, v in vae.state_dict().items()}
    torch.save(state, folder / "audiovae.pth")
    return folder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=REPO / "tests/fixtures")
    parser.add_argument("--reference", type=Path, default=REFERENCE)
    args = parser.parse_args()
    folder = build(args.out, args.reference)
    print(f"wrote {folder}")


if __name__ == "__main__":
    main()
