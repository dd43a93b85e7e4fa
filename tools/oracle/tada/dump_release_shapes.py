"""Key -> shape of the official modules at the released sizes, built by hume-tada 0.1.9's own
constructors on the meta device (no weights): the LM of HumeAI/tada-1b (Llama 3.2 1B's config,
which tada-1b is built on, plus TadaConfig's defaults), the codec's encoder and decoder at
EncoderConfig / DecoderConfig's class defaults. The aligner is left out (its wav2vec2-large
config comes from the Hub).

    .tada-venv/bin/python tools/oracle/tada/dump_release_shapes.py --out FILE

Derived buffers (`rope_freqs`, `_precomputed_mask`) are listed too: the release files hold them
if they were saved with save_pretrained.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE)]

import tada_oracle_patch  # noqa: E402, F401
from tada.modules.decoder import Decoder, DecoderConfig  # noqa: E402
from tada.modules.encoder import Encoder, EncoderConfig  # noqa: E402
from tada.modules.tada import TadaConfig, TadaForCausalLM  # noqa: E402

REPO = HERE.parents[2]
# Llama 3.2 1B (meta-llama/Llama-3.2-1B config.json)
LLAMA_32_1B = dict(
    vocab_size=128256,
    hidden_size=2048,
    intermediate_size=8192,
    num_hidden_layers=16,
    num_attention_heads=32,
    num_key_value_heads=8,
    head_dim=64,
    rms_norm_eps=1e-5,
    rope_theta=500000.0,
    max_position_embeddings=131072,
    tie_word_embeddings=True,
    rope_scaling={
        "rope_type": "llama3",
        "factor": 32.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    },
    bos_token_id=128000,
    eos_token_id=128001,
)


def shapes(module: torch.nn.Module) -> dict[str, list[int]]:
    return {k: list(v.shape) for k, v in module.state_dict().items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out", type=Path, default=REPO / "tests/fixtures/tada-release-shapes.json"
    )
    args = parser.parse_args()
    with torch.device("meta"):
        lm = TadaForCausalLM(TadaConfig(**LLAMA_32_1B))
        lm_shapes = shapes(lm)
        if lm.config.tie_word_embeddings:  # save_pretrained leaves the tied head out
            lm_shapes.pop("lm_head.weight")
        out = {
            "llama_config": LLAMA_32_1B,
            "model": lm_shapes,
            "decoder": shapes(Decoder(DecoderConfig())),
            "encoder": shapes(Encoder(EncoderConfig())),
        }
    args.out.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    print(f"{args.out}: {sum(len(v) for k, v in out.items() if k != 'llama_config')} keys")


if __name__ == "__main__":
    main()
