"""A real-size VoxCPM2 checkpoint with random weights, in the released folder layout.

    nice -n 10 .venv/bin/python benchmarks/make_random_voxcpm.py --out /tmp/voxcpm2-random

Reads the released config.json (/work/shared/reference/voxcpm/checkpoints/VoxCPM2) and writes:
* `config.json` (the release file, byte for byte: `"dtype": "bfloat16"`) and, in
  `<out>-fp32/`, the same with `"dtype": "float32"` and links to the weight files (the
  official loader takes its dtype from config.json);
* `model.safetensors`: every key of the released layout (our `VoxCPM2Network`, built on the
  meta device, has exactly the official names and shapes: the strict loader checks it), in
  bfloat16 like the release, ~2.3 G parameters / 4.6 GB. Each tensor is drawn, cast and
  written on its own (a streaming safetensors writer), so at most one tensor is in memory;
* `audiovae.pth`: the AudioVAE V2 state dict (`torch.save` of a plain dict, like the release);
* `tokenizer.json` / `tokenizer_config.json`: the stand-in of tools/oracle/voxcpm/
  tiny_tokenizer.py with the release vocabulary size 73448 (the released tokenizer could not be
  obtained: its ids are not the release's, the token count of a text may differ a little);
* `special_tokens_map.json`: the release file.

Scale: linears ~ N(0, 1/fan_in), norms ~ 1, embeddings ~ N(0, 1), biases ~ 0.1 N(0, 1), as the
tiny test checkpoints (tools/oracle/voxcpm/build_tiny.py); `--check` runs a short prompt
through the 28 + 8 layers and the VAE and prints the activation scales (all finite).
The stop head never fires: row 1 ("stop") of `stop_head.weight` is zero and row 0 is 1/H, so
the "go on" logit is the mean of silu(.) over 2048 features (> 0) against 0. A run then lasts
exactly `max_len` patches. Speed does not depend on weight values; audio quality is noise.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import struct
import sys
import time
from pathlib import Path

import torch

from tts_core.models.voxcpm.audiovae import AudioVAE
from tts_core.models.voxcpm.config import VoxCPM2Config
from tts_core.models.voxcpm.network import VoxCPM2Network

REPO = Path(__file__).resolve().parents[1]
REFERENCE = REPO.parent / "shared/reference/voxcpm/checkpoints/VoxCPM2"
VOCAB_SIZE = 73448
sys.path.insert(0, str(REPO / "tools" / "oracle" / "voxcpm"))


def model_value(name: str, shape: torch.Size, gen: torch.Generator) -> torch.Tensor:
    """The tiny fixtures' rule (tools/oracle/voxcpm/init_rules.py), with the stop head set so
    that the benchmark's generation goes on to its patch count."""
    from init_rules import model_value as shared_rule

    if name == "stop_head.weight":
        value = torch.zeros(shape)
        value[0] = 1.0 / shape[1]  # "go on" logit = mean(silu(.)) > 0; "stop" logit = 0
        return value
    return shared_rule(name, shape, gen)


def write_safetensors(path: Path, shapes: dict[str, torch.Size], make, dtype) -> int:
    """A safetensors file written tensor by tensor (header first: every size is known)."""
    code = {torch.bfloat16: "BF16", torch.float32: "F32"}[dtype]
    width = torch.tensor([], dtype=dtype).element_size()
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name in sorted(shapes):
        size = width * int(torch.Size(shapes[name]).numel())
        header[name] = {
            "dtype": code,
            "shape": list(shapes[name]),
            "data_offsets": [offset, offset + size],
        }
        offset += size
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for name in sorted(shapes):
            tensor = make(name, shapes[name]).to(dtype).contiguous()
            view = tensor.view(torch.int16 if width == 2 else torch.int32)
            f.write(view.numpy().tobytes())
            del tensor, view
    return offset


def vae_state(cfg: VoxCPM2Config, gen: torch.Generator) -> dict[str, torch.Tensor]:
    from init_rules import vae_value  # tools/oracle/voxcpm, as the tiny fixtures' builder

    vae = AudioVAE(cfg.audio_vae)  # ~ a few hundred MB in float32, fine to hold
    out = {}
    for name, tensor in vae.state_dict().items():
        shape = tensor.shape
        if not tensor.is_floating_point():
            out[name] = tensor.clone()  # decoder.sr_bin_boundaries as configured
            continue
        out[name] = vae_value(name, shape, gen).contiguous()
    return out


def build(out: Path, seed: int) -> None:
    from tiny_tokenizer import write as write_tokenizer

    out.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(REFERENCE / "config.json", out / "config.json")
    shutil.copyfile(REFERENCE / "special_tokens_map.json", out / "special_tokens_map.json")
    cfg = VoxCPM2Config.from_folder(out)
    assert cfg.lm.vocab_size == VOCAB_SIZE, cfg.lm.vocab_size

    t0 = time.perf_counter()
    write_tokenizer(out, VOCAB_SIZE)
    print(f"tokenizer (stand-in, {VOCAB_SIZE} ids): {time.perf_counter() - t0:.1f} s", flush=True)

    t0 = time.perf_counter()
    gen = torch.Generator().manual_seed(seed)
    torch.save(vae_state(cfg, gen), out / "audiovae.pth")
    print(f"audiovae.pth: {time.perf_counter() - t0:.1f} s", flush=True)

    t0 = time.perf_counter()
    with torch.device("meta"):
        net = VoxCPM2Network(cfg)
    shapes = {k: v.shape for k, v in net.state_dict().items()}
    params = sum(int(torch.Size(s).numel()) for s in shapes.values())
    gen = torch.Generator().manual_seed(seed + 1)
    size = write_safetensors(
        out / "model.safetensors", shapes, lambda n, s: model_value(n, s, gen), torch.bfloat16
    )
    print(
        f"model.safetensors: {len(shapes)} tensors, {params / 1e9:.3f} G parameters, "
        f"{size / 1e9:.2f} GB bfloat16, {time.perf_counter() - t0:.1f} s",
        flush=True,
    )

    fp32 = out.parent / f"{out.name}-fp32"  # the official loader reads its dtype from config.json
    fp32.mkdir(exist_ok=True)
    config = json.loads((out / "config.json").read_text(encoding="utf-8"))
    config["dtype"] = "float32"
    (fp32 / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    for name in os.listdir(out):
        if name != "config.json" and not (fp32 / name).exists():
            (fp32 / name).symlink_to(out / name)
    print(f"wrote {out} and {fp32}", flush=True)


@torch.inference_mode()
def check(out: Path) -> None:
    """Activation scales of a short prompt through our engine in float32 (all must be finite)."""
    from tts_core.models.voxcpm import VoxCPMModel

    torch.set_num_threads(2)
    model = VoxCPMModel.from_folder(out, dtype=torch.float32)
    net = model.net
    tokens = torch.tensor([model.tokenizer.encode("Hello world, a short check.") + [101]])
    n = tokens.shape[1]
    zeros = torch.zeros(1, n, model.patch_size, model.config.feat_dim)
    ones, nil = torch.ones(1, n), torch.zeros(1, n)
    seen = {}
    hooks = [
        mod.register_forward_hook(lambda m, a, o, key=key: seen.__setitem__(key, o))
        for key, mod in (("base_lm", net.base_lm), ("residual_lm", net.residual_lm))
    ]
    state = net.prefill(tokens, zeros, ones, nil)
    for hook in hooks:
        hook.remove()
    stats = {k: (float(v.float().abs().max()), float(v.float().std())) for k, v in seen.items()}
    mu = net.dit_condition(state)
    z = torch.randn(1, model.config.feat_dim, model.patch_size)
    patch = net.feat_decoder(z, mu, torch.zeros_like(z), 10, 2.0)
    stop = net.stop_logits(state)
    audio = model.vae.decode(
        patch.transpose(1, 2).reshape(1, -1, model.config.feat_dim).transpose(1, 2)
    )
    stats["dit_patch"] = (float(patch.abs().max()), float(patch.std()))
    stats["vae_audio"] = (float(audio.abs().max()), float(audio.std()))
    for key, (peak, std) in stats.items():
        print(f"{key:12s} max|x| {peak:10.4g}  std {std:10.4g}")
    print(f"stop logits {stop.tolist()} (go on > stop)")
    finite = all(torch.isfinite(torch.tensor(v)).all() for v in stats.values())
    print("all finite" if finite else "NOT FINITE")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("/tmp/voxcpm2-random"))
    ap.add_argument("--seed", type=int, default=20261123)
    ap.add_argument("--check", action="store_true", help="only check an existing folder")
    args = ap.parse_args()
    if not args.check:
        build(args.out, args.seed)
    check(args.out)


if __name__ == "__main__":
    main()
