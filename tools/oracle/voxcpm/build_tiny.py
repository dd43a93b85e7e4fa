"""Build the tiny VoxCPM2 checkpoint folders `voxcpm2-tiny` and `voxcpm2-tiny-b` in the
released layout.

    .oracle-voxcpm-venv/bin/python tools/oracle/voxcpm/build_tiny.py [--out tests/fixtures]

Writes `<out>/<name>/` for each variant:
* `config.json`: the released config (every key, same order, including the ignored
  `dit_config.mean_mode` and `"device": "cuda"`) with only size fields changed, chosen unlike
  the release (patch sizes 3 and 2, odd strides, GQA 2:1 / 6:3, use_mup and RoPE on the
  residual LM in variant b, long RoPE factors in b) so nothing hard-coded passes;
* `audiovae.pth`: the official `AudioVAEV2` state dict, a plain pickled dict (`torch.save`) like
  the release, with deterministic random weights (fixed torch.Generator seed);
* `model.safetensors`: the official `VoxCPM2Model` state dict without `audio_vae.*` (the
  released key layout, spec 2.1), deterministic random weights with O(1) activations;
* `tokenizer.json` + `tokenizer_config.json`: a small stand-in with the known pipeline
  (tiny_tokenizer.py; the release files could not be obtained);
* `special_tokens_map.json`: the release file, byte for byte.
Runs in the oracle venv: the weights are made by the official modules.
"""

from __future__ import annotations

import argparse
import copy
import json
import shutil
from pathlib import Path

import torch
from init_rules import model_value, vae_value
from safetensors.torch import save_file
from tiny_tokenizer import write as write_tokenizer
from transformers import LlamaTokenizerFast
from voxcpm.model.voxcpm2 import VoxCPM2Model, VoxCPMConfig
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
    "max_length": 4096,
}
# 16 kHz in, hop 10; 48 kHz out, 30 samples per latent (ratio 3 = 48000 / 16000 as released).
VAE_SIZES = {
    "encoder_dim": 4,
    "encoder_rates": [2, 5],
    "latent_dim": 8,
    "decoder_dim": 32,
    "decoder_rates": [5, 3, 2],
}


# Variant b: GQA 6:3 with head_dim 12 (6 RoPE factors), muP residual scaling and embedding
# scale on, RoPE in the residual LM, max_position_embeddings above the original (long factors,
# cos/sin scaled), patch_size 2, a 16 kHz -> 24 kHz VAE (hop 16, 32 samples out per latent).
VARIANT_B = {
    "lm": {
        "hidden_size": 24,
        "intermediate_size": 40,
        "num_attention_heads": 6,
        "num_hidden_layers": 2,
        "num_key_value_heads": 3,
        "kv_channels": 12,
        "vocab_size": 400,
        "max_position_embeddings": 8192,
        "use_mup": True,
    },
    "original_max_position_embeddings": 2048,
    "top": {
        "patch_size": 2,
        "feat_dim": 6,
        "scalar_quantization_latent_dim": 10,
        "residual_lm_num_layers": 1,
        "residual_lm_no_rope": False,
        "max_length": 384,
    },
    "encoder": {
        "hidden_dim": 20,
        "ffn_dim": 28,
        "num_heads": 3,
        "num_layers": 1,
        "kv_channels": 12,
    },
    "dit": {"hidden_dim": 18, "ffn_dim": 30, "num_heads": 3, "num_layers": 2, "kv_channels": 12},
    "vae": {
        "encoder_dim": 4,
        "encoder_rates": [4, 4],
        "latent_dim": 6,
        "decoder_dim": 16,
        "decoder_rates": [4, 2, 4],
        "out_sample_rate": 24000,
    },
}
VARIANT_A = {
    "lm": LM_SIZES,
    "original_max_position_embeddings": LM_SIZES["max_position_embeddings"],
    "top": TOP_SIZES,
    "encoder": LOCAL_SIZES,
    "dit": LOCAL_SIZES,
    "vae": VAE_SIZES,
}
VARIANTS = {NAME: (VARIANT_A, SEED), "voxcpm2-tiny-b": (VARIANT_B, SEED + 1)}


def tiny_config(release: dict, variant: dict = VARIANT_A) -> dict:
    cfg = copy.deepcopy(release)
    lm = cfg["lm_config"]
    lm.update({k: v for k, v in variant["lm"].items() if k in lm})
    half = variant["lm"]["kv_channels"] // 2  # LongRoPE lists: head_dim / 2 factors
    scaling = lm["rope_scaling"]
    for key in ("long_factor", "short_factor"):
        step = len(scaling[key]) // half
        scaling[key] = scaling[key][::step][:half]
    scaling["original_max_position_embeddings"] = variant["original_max_position_embeddings"]
    cfg.update({k: v for k, v in variant["top"].items() if k in cfg})
    cfg["encoder_config"].update(variant["encoder"])
    cfg["dit_config"].update(variant["dit"])
    cfg["audio_vae_config"].update(variant["vae"])
    return cfg


@torch.no_grad()
def fill_model_weights(state: dict[str, torch.Tensor], seed: int) -> dict[str, torch.Tensor]:
    """Deterministic weights with O(1) activations: linears ~ N(0, 1/fan_in), norms around 1,
    biases and the stop head spread so stop decisions vary between steps."""
    gen = torch.Generator().manual_seed(seed)
    out = {}
    for name in sorted(state):
        value = model_value(name, state[name].shape, gen)
        out[name] = value.contiguous()
    return out


@torch.no_grad()
def fill_weights(vae: AudioVAEV2, seed: int) -> None:
    """Deterministic weights with O(1) activations: weight-norm directions random, gains away
    from ||v||, Snake alphas spread, and each sample-rate bucket its own scale/bias row (so
    using the wrong bucket changes the audio)."""
    gen = torch.Generator().manual_seed(seed)
    for name, tensor in vae.state_dict().items():
        if not tensor.is_floating_point():
            continue  # decoder.sr_bin_boundaries stays as configured
        tensor.copy_(vae_value(name, tensor.shape, gen))


def build(out: Path, name: str = NAME, reference: Path = REFERENCE) -> Path:
    variant, seed = VARIANTS[name]
    release = json.loads((reference / "config.json").read_text(encoding="utf-8"))
    cfg = tiny_config(release, variant)
    config = VoxCPMConfig.model_validate(cfg)  # the official parser accepts the whole file
    folder = out / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(cfg, indent=2) + "\n", encoding="utf-8")
    shutil.copyfile(reference / "special_tokens_map.json", folder / "special_tokens_map.json")
    write_tokenizer(folder, cfg["lm_config"]["vocab_size"])
    vae = AudioVAEV2(AudioVAEConfigV2(**cfg["audio_vae_config"]))
    fill_weights(vae, seed)
    state = {k: v.detach().clone().contiguous() for k, v in vae.state_dict().items()}
    torch.save(state, folder / "audiovae.pth")
    config.dtype = "float32"
    model = VoxCPM2Model(config, LlamaTokenizerFast.from_pretrained(folder), vae, device="cpu")
    model_state = {k: v for k, v in model.state_dict().items() if not k.startswith("audio_vae.")}
    save_file(fill_model_weights(model_state, seed), str(folder / "model.safetensors"))
    return folder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=REPO / "tests/fixtures")
    parser.add_argument("--reference", type=Path, default=REFERENCE)
    args = parser.parse_args()
    for name in VARIANTS:
        print(f"wrote {build(args.out, name, args.reference)}")


if __name__ == "__main__":
    main()
