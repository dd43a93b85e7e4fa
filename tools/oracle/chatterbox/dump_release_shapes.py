"""Key -> shape of the released Turbo files, from the official classes at their hard-coded sizes
(no size patch, no weights: built on the meta device where the constructor allows).

    .chatterbox-venv/bin/python tools/oracle/chatterbox/dump_release_shapes.py [--out FILE]

Writes tests/fixtures/chatterbox-turbo-release-shapes.json: {"ve.safetensors": {key: shape},
"t3_turbo_v1.safetensors": ..., "s3gen_meanflow.safetensors": ...}, the state dicts the official
`from_local` loads strictly. Our modules built at the released sizes (no chatterbox_sizes.json)
must have exactly these keys and shapes (tests/chatterbox/test_loading.py).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[3]


def shapes(module: torch.nn.Module) -> dict[str, list[int]]:
    return {key: list(value.shape) for key, value in module.state_dict().items()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path,
                        default=REPO / "tests/fixtures/chatterbox-turbo-release-shapes.json")  # fmt: skip
    args = parser.parse_args()
    from chatterbox.models.s3gen import S3Gen
    from chatterbox.models.t3 import T3
    from chatterbox.models.t3.modules.t3_config import T3Config
    from chatterbox.models.voice_encoder import VoiceEncoder

    hp = T3Config(text_tokens_dict_size=50276)  # as ChatterboxTurboTTS.from_local
    hp.llama_config_name, hp.speech_tokens_dict_size = "GPT2_medium", 6563
    hp.input_pos_emb, hp.speech_cond_prompt_len = None, 375
    hp.use_perceiver_resampler, hp.emotion_adv = False, False
    with torch.device("meta"):
        t3 = T3(hp)
        ve = VoiceEncoder()
    s3gen = S3Gen(meanflow=True)  # its constructor fills buffers from numpy: a real build
    out = {
        "ve.safetensors": shapes(ve),
        "t3_turbo_v1.safetensors": shapes(t3),
        "s3gen_meanflow.safetensors": shapes(s3gen),
    }
    args.out.write_text(json.dumps(out, separators=(",", ":")) + "\n")
    print(f"{args.out}: " + ", ".join(f"{k} {len(v)} tensors" for k, v in out.items()))


if __name__ == "__main__":
    main()
