"""Peak memory while loading: weights stream into the model, never a state dict beside it.

The issue: the 1.7B model in bfloat16 peaked at 7.6 GB while loading (the official 5.4 GB),
because the whole safetensors file was held next to the model. The requirement: peak resident
size while loading <= 1.2 x the loaded model's resident size.

How it is measured (in a fresh subprocess, so nothing pytest or other tests did counts):

* The checkpoint is random, in the released layout (key names, bf16 model.safetensors, fp32
  speech_tokenizer/model.safetensors), from the 0.6B-Base JSONs made smaller so that it is
  0.39 GB (0.26 GB model.safetensors + 0.13 GB codec): big enough that a whole-file copy shows
  above the 1.2 bound, small enough to build and load in seconds. Its largest tensor (the text embedding, 156 MB in bf16) is
  far larger than the loader's 16 MiB mapping window, so the sliced path is exercised too.
* The process first loads the tiny fixture in the same dtype and drops it: imports, the text
  tokenizer library and the allocator's first arenas are paid before the baseline.
* The baseline is VmRSS just before `tts_core.load_model`; the kernel's high-water mark
  (VmHWM) is reset to it right then (`5 > /proc/self/clear_refs`), so VmHWM afterwards is the
  peak of the load itself (if that reset is refused, ru_maxrss is used: it can only overstate
  the peak, so the test stays sound).
* peak growth = VmHWM after - VmRSS before; resident growth = VmRSS after - VmRSS before. Both
  count memory-mapped file pages that are mapped (they are resident while a map is open, which
  is exactly what a loader that keeps the file mapped costs) and neither counts the page cache.
  Resident growth is the loaded model as it stays in memory: its parameters and buffers, the
  derived buffers (effective codebooks, rotary tables) and the text tokenizer.
* Sanity: resident growth is at least 90% of the parameter/buffer bytes of the loaded model, so
  the ratio is about a model that really is in memory.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from tts_core.models.qwen3_tts.checkpoint import STREAM_WINDOW_BYTES

from .conftest import fixture_path

REPO = Path(__file__).resolve().parents[2]
RELEASED = REPO / "assets" / "checkpoints" / "Qwen3-TTS-12Hz-0.6B-Base"
PEAK_OVER_RESIDENT = 1.2

# The 0.6B-Base config, narrower and shallower (same layout, same key names).
TALKER = {
    "hidden_size": 512,
    "intermediate_size": 1536,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_hidden_layers": 2,
    "text_hidden_size": 512,
}
CODE_PREDICTOR = {
    "hidden_size": 512,
    "intermediate_size": 1536,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_hidden_layers": 1,
    "layer_types": ["full_attention"],
}
CODEC_DECODER = {
    "decoder_dim": 256,
    "latent_dim": 512,
    "codebook_dim": 256,
    "vector_quantization_hidden_dimension": 256,
    "num_hidden_layers": 1,
}
CODEC_ENCODER = {
    "num_hidden_layers": 1,
    "num_filters": 32,
    "codebook_dim": 128,
    "vector_quantization_hidden_dimension": 128,
}

MEASURE = r"""
import gc, json, resource, sys
import torch
torch.set_num_threads(1)
import tts_core

def status():
    values = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
                values[key] = int(rest.split()[0]) * 1024
    return values

folder, warmup, dtype = sys.argv[1], sys.argv[2], getattr(torch, sys.argv[3])
tts_core.load_model(warmup, dtype=dtype)
gc.collect()
try:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    reset = True
except OSError:
    reset = False
before = status()
model = tts_core.load_model(folder, device="cpu", dtype=dtype)
after = status()
maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
parts = (model.talker, model.speaker_encoder, model.speech_tokenizer)
weights = sum(t.numel() * t.element_size() for p in parts for t in p.state_dict().values())
peak = (after["VmHWM"] if reset else maxrss) - before["VmRSS"]
print(json.dumps({
    "peak": peak, "resident": after["VmRSS"] - before["VmRSS"], "weights": weights,
    "hwm_reset": reset, "before": before, "after": after,
}))
"""


def _meta_state(module_factory) -> dict[str, torch.Tensor]:
    with torch.device("meta"):
        return module_factory().state_dict()


def _random_file(meta: dict[str, torch.Tensor], dtype: torch.dtype, path: Path, seed: int) -> int:
    """Random values (a tiled block of N(0, 0.02) floats: memory does not depend on values;
    non-float tensors 0) in `dtype`, saved as safetensors; returns the bytes of weights."""
    block = torch.randn(2**20, generator=torch.Generator().manual_seed(seed)).mul_(0.02)
    block = block.to(dtype)
    state = {}
    for key, value in meta.items():
        if value.is_floating_point():
            repeats = -(-value.numel() // block.numel())
            state[key] = block.repeat(repeats)[: value.numel()].view(value.shape).clone()
        else:
            state[key] = torch.zeros(value.shape, dtype=value.dtype)
    save_file(state, str(path), metadata={"format": "pt"})
    return sum(t.numel() * t.element_size() for t in state.values())


def build_random_checkpoint(out: Path) -> int:
    """A 0.39 GB random checkpoint in the released layout; returns the bytes of weights."""
    from tts_core.models.qwen3_tts.codec.config import load_speech_tokenizer_config
    from tts_core.models.qwen3_tts.codec.speech_tokenizer import SpeechTokenizer
    from tts_core.models.qwen3_tts.config import load_config
    from tts_core.models.qwen3_tts.speaker_encoder import SpeakerEncoder, SpeakerEncoderConfig
    from tts_core.models.qwen3_tts.talker import Talker

    (out / "speech_tokenizer").mkdir(parents=True)
    for name in RELEASED.rglob("*"):
        if name.is_file():
            shutil.copyfile(name, out / name.relative_to(RELEASED))
    config = json.loads((RELEASED / "config.json").read_text())
    config["talker_config"].update(TALKER)
    config["talker_config"]["code_predictor_config"].update(CODE_PREDICTOR)
    config["speaker_encoder_config"]["enc_dim"] = TALKER["hidden_size"]
    (out / "config.json").write_text(json.dumps(config))
    codec = json.loads((RELEASED / "speech_tokenizer" / "config.json").read_text())
    codec["decoder_config"].update(CODEC_DECODER)
    codec["encoder_config"].update(CODEC_ENCODER)
    (out / "speech_tokenizer" / "config.json").write_text(json.dumps(codec))

    parsed = load_config(out)
    meta = {f"talker.{k}": v for k, v in _meta_state(lambda: Talker(parsed.talker)).items()}
    encoder_config = SpeakerEncoderConfig.from_dict(parsed.speaker_encoder)
    encoder = _meta_state(lambda: SpeakerEncoder(encoder_config))
    meta.update({f"speaker_encoder.{k}": v for k, v in encoder.items()})
    total = _random_file(meta, torch.bfloat16, out / "model.safetensors", seed=1)
    codec_config = load_speech_tokenizer_config(out / "speech_tokenizer")
    codec_meta = _meta_state(lambda: SpeechTokenizer(codec_config))
    path = out / "speech_tokenizer" / "model.safetensors"
    return total + _random_file(codec_meta, torch.float32, path, seed=2)


@pytest.fixture(scope="module")
def random_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("load-memory") / "ckpt"
    size = build_random_checkpoint(folder)
    assert 200e6 < size < 450e6, size  # big enough for the bound to mean something
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def measure_load(folder: Path, dtype: str) -> dict:
    """Peak and resident growth (bytes) of `tts_core.load_model(folder)` in a fresh process."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    warmup = fixture_path("qwen3-tiny-a")
    done = subprocess.run(
        [sys.executable, "-c", MEASURE, str(folder), str(warmup), dtype],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/status").is_file(), reason="needs Linux /proc")
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_peak_memory_while_loading_is_close_to_the_model(random_checkpoint: Path, dtype) -> None:
    numbers = measure_load(random_checkpoint, dtype)
    peak, resident, weights = numbers["peak"], numbers["resident"], numbers["weights"]
    print(
        f"{dtype}: peak growth {peak / 2**20:.0f} MiB, resident growth "
        f"{resident / 2**20:.0f} MiB (weights {weights / 2**20:.0f} MiB), "
        f"ratio {peak / resident:.3f}; RssFile before/after "
        f"{numbers['before']['RssFile'] / 2**20:.0f}/{numbers['after']['RssFile'] / 2**20:.0f} MiB"
    )
    assert resident >= 0.9 * weights, numbers
    assert peak <= PEAK_OVER_RESIDENT * resident, numbers
    # Streaming proper: beyond the loaded model, only about one mapping window of the file is
    # ever resident (measured: 8-12 MiB). The whole-file loader went 155 MiB (float32) and
    # 185 MiB (bfloat16) over the resident size here, 0.9-1.2 GiB on the 0.6B model.
    assert peak - resident <= 4 * STREAM_WINDOW_BYTES, numbers
