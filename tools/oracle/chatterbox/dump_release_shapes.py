"""Key -> shape of the released Turbo files, from the official classes at their hard-coded sizes
(no size patch, no weights: built on the meta device where the constructor allows).

    .chatterbox-venv/bin/python tools/oracle/chatterbox/dump_release_shapes.py [--out FILE]

Writes tests/fixtures/chatterbox-turbo-release-shapes.json: {"ve.safetensors": {key: shape},
"t3_turbo_v1.safetensors": ..., "t3_nano_v1.safetensors": ..., "s3gen_meanflow.safetensors":
...}, the state dicts the official `from_local` loads strictly. Our modules built at the
released sizes (no chatterbox_sizes.json) must have exactly these keys and shapes
(tests/chatterbox/test_loading.py).

Nano is in chatterbox's HEAD only (5de7a54: `from_local(dir, device, nano=True)`, T3 config
"GPT2_small", file t3_nano_v1.safetensors; everything else Turbo's). 0.1.7 lacks that config, so
HEAD's GPT2_SMALL_CONFIG (models/t3/llama_configs.py, the keys that size the model) is added to
0.1.7's LLAMA_CONFIGS here before T3 is built.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[3]
# chatterbox HEAD 5de7a54, models/t3/llama_configs.py GPT2_SMALL_CONFIG (dropout and summary
# fields omitted: they size nothing and inference runs in eval mode)
GPT2_SMALL_CONFIG = {
    "activation_function": "gelu_new",
    "layer_norm_epsilon": 1e-05,
    "model_type": "gpt2",
    "n_ctx": 8196,
    "n_embd": 768,
    "hidden_size": 768,
    "n_head": 12,
    "n_layer": 12,
    "n_positions": 8196,
    "vocab_size": 50276,
}


def shapes(module: torch.nn.Module) -> dict[str, list[int]]:
    return {key: list(value.shape) for key, value in module.state_dict().items()}


def turbo_config(llama_config_name: str):  # noqa: ANN201 - the official T3Config
    """The T3Config of ChatterboxTurboTTS.from_local (HEAD: GPT2_small when nano)."""
    from chatterbox.models.t3.modules.t3_config import T3Config

    hp = T3Config(text_tokens_dict_size=50276)
    hp.llama_config_name, hp.speech_tokens_dict_size = llama_config_name, 6563
    hp.input_pos_emb, hp.speech_cond_prompt_len = None, 375
    hp.use_perceiver_resampler, hp.emotion_adv = False, False
    return hp


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--out", type=Path, default=REPO / "tests/fixtures/chatterbox-turbo-release-shapes.json"
    )
    args = parser.parse_args()
    from chatterbox.models.s3gen import S3Gen
    from chatterbox.models.t3 import T3
    from chatterbox.models.t3.llama_configs import LLAMA_CONFIGS
    from chatterbox.models.voice_encoder import VoiceEncoder

    LLAMA_CONFIGS.setdefault("GPT2_small", GPT2_SMALL_CONFIG)
    with torch.device("meta"):
        turbo = T3(turbo_config("GPT2_medium"))
        nano = T3(turbo_config("GPT2_small"))
        ve = VoiceEncoder()
    s3gen = S3Gen(meanflow=True)  # its constructor fills buffers from numpy: a real build
    out = {
        "ve.safetensors": shapes(ve),
        "t3_turbo_v1.safetensors": shapes(turbo),
        "t3_nano_v1.safetensors": shapes(nano),
        "s3gen_meanflow.safetensors": shapes(s3gen),
    }
    args.out.write_text(json.dumps(out, separators=(",", ":")) + "\n")
    print(f"{args.out}: " + ", ".join(f"{k} {len(v)} tensors" for k, v in out.items()))


if __name__ == "__main__":
    main()
