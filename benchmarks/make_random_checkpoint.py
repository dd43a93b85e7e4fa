"""A real-size Qwen3-TTS checkpoint with random weights, in the released folder layout.

Runs in the oracle venv (the official classes build the modules, so both engines read the
very same file):

    PYTHONPATH=tools/oracle/stubs:tools/oracle .oracle-venv/bin/python \
        benchmarks/make_random_checkpoint.py --model 0.6B --out /tmp/qwen3-0.6B-random

Speed does not depend on weight values, so this measures the real cost without a download.
The EOS row of `codec_head` is zeroed: its logit is then 0 while the best of the 2048 code
logits is far above it, so generation runs for exactly the number of frames asked for.
"""

from __future__ import annotations

import argparse
import shutil
import time
from pathlib import Path

import soundfile as sf
import torch
from build_codec import build_codec
from build_fixtures import save_state
from init_weights import randomize
from qwen_tts.core.models import Qwen3TTSConfig, Qwen3TTSForConditionalGeneration
from tiny_configs import COPIED_FILES, SPEECH_TOKENIZER_CONFIGURATION, _load, write_json

REPO = Path(__file__).resolve().parents[1]
RELEASED = REPO / "assets" / "checkpoints"  # the released JSON configs, no weights
EOS_ID = 2150


def build(model: str, out: Path, seed: int) -> None:
    src = RELEASED / f"Qwen3-TTS-12Hz-{model}-Base"
    (out / "speech_tokenizer").mkdir(parents=True, exist_ok=True)
    for name in (*COPIED_FILES, "config.json"):
        shutil.copyfile(src / name, out / name)
    for name in ("config.json", "preprocessor_config.json"):
        shutil.copyfile(src / "speech_tokenizer" / name, out / "speech_tokenizer" / name)
    write_json(out / "speech_tokenizer" / "configuration.json", SPEECH_TOKENIZER_CONFIGURATION)

    t0 = time.perf_counter()
    ref_audio, _ = sf.read(REPO / "tests" / "fixtures" / "ref_clip_24k.wav", dtype="float32")
    codec = build_codec(_load(src / "speech_tokenizer" / "config.json"), [ref_audio])
    save_state(codec, out / "speech_tokenizer" / "model.safetensors", torch.float32)
    del codec
    print(f"speech tokenizer: {time.perf_counter() - t0:.1f} s")

    t0 = time.perf_counter()
    tts = Qwen3TTSForConditionalGeneration(Qwen3TTSConfig(**_load(src / "config.json"))).eval()
    randomize(tts, seed)
    with torch.no_grad():
        tts.talker.codec_head.weight[EOS_ID].zero_()
    save_state(tts, out / "model.safetensors", torch.bfloat16)
    print(f"model: {time.perf_counter() - t0:.1f} s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", choices=["0.6B", "1.7B"], default="0.6B")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--seed", type=int, default=1234)
    args = ap.parse_args()
    torch.manual_seed(args.seed)
    build(args.model, args.out, args.seed)


if __name__ == "__main__":
    main()
