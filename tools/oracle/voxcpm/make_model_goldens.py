"""Goldens of the official VoxCPM2 (voxcpm==2.0.3) LM / LocEnc / LocDiT / CFM / FSQ / stop head
and of whole generations in all three modes, on the tiny checkpoints (oracle venv).

    .oracle-voxcpm-venv/bin/python tools/oracle/voxcpm/make_model_goldens.py [--fixtures DIR]

For each `<fixtures>/<name>/` (build_tiny.py) writes `<fixtures>/<name>-model.golden/`
{goldens.safetensors, cases.json} in the schema of tests/qwen3/conftest.py's `load_goldens`.
The official pipeline is `VoxCPM(path, enable_denoiser=False, optimize=False, device="cpu")`
on a copy of the folder whose config says `"dtype": "float32"`, called after
`torch.manual_seed(seed)` with min_len=2, normalize=False, denoise=False, retry_badcase=False;
the reference clip is a float WAV at 24 kHz (librosa resamples it to the VAE rate).

Exact values (`<key>_fp64`): the same official modules cast to float64 on the same inputs and
the same noise (each float32 `randn` of the CFM, cast to float64). `fp32_error[key]` = max
|golden - exact|, the E of the float error model (tests/qwen3/conftest.py).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import tempfile
from importlib import metadata
from pathlib import Path

import numpy as np
import soundfile as sf
import torch
import voxcpm.model.voxcpm2 as official_model
import voxcpm.modules.minicpm4.model as official_minicpm
from safetensors.torch import save_file
from voxcpm.core import VoxCPM

REPO = Path(__file__).resolve().parents[3]
NAMES = ("voxcpm2-tiny", "voxcpm2-tiny-b")
CLIP_RATE = 24000
TOKENIZER_TEXTS = ["Hello world.", "Hello  你好世界\n test 中文!", "The quick brown fox.", "  x"]
MODES = [  # key, text, voice ("none" | "ref" | "ref_text"), seed, max_len, timesteps
    ("zero_shot", "Hello\nworld,  this is   a test.", "none", 11, 4096, 10),
    ("reference", "The quick brown fox 你好世界.", "ref", 12, 4096, 10),
    ("ref_text", "Speech synthesis test.", "ref_text", 13, 4096, 10),
    ("ref_text_cap", "Hello world.", "ref_text", 14, 7, 6),
]
REF_TEXT = "Numbers like 12 and 345."


def clip() -> np.ndarray:
    gen = torch.Generator().manual_seed(99)
    t = torch.arange(1500, dtype=torch.float64) / CLIP_RATE
    tone = 0.4 * torch.sin(2 * np.pi * 310 * t) + 0.05 * torch.randn(
        1500, generator=gen, dtype=torch.float64
    )
    return tone.to(torch.float32).numpy()


@contextlib.contextmanager
def float32_noise():
    """Every randn drawn in float32 then cast, so the float64 run sees the float32 noise."""
    original = torch.randn

    def randn(*args, dtype=None, **kwargs):
        if dtype == torch.float64:
            return original(*args, dtype=torch.float32, **kwargs).double()
        return original(*args, dtype=dtype, **kwargs)

    torch.randn = randn
    try:
        yield
    finally:
        torch.randn = original


def _rms_layernorm(hidden: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    variance = hidden.pow(2).mean(dim=-1, keepdim=True)  # float64 here, not float32
    return hidden * torch.rsqrt(variance + eps) * weight


def _rope(q, k, cos, sin):  # in the input dtype (float64), not float32
    rot = official_minicpm.rotate_half
    return q * cos + rot(q) * sin, k * cos + rot(k) * sin


class _KeepFloat64(torch.Tensor):
    """Generated latents whose `.to(torch.float32)` (the official cast before decoding) keeps
    them float64, so the float64 run decodes unrounded latents."""

    def to(self, *args, **kwargs):
        return self.as_subclass(torch.Tensor)


def to_float64(core: VoxCPM) -> None:
    """The official model in float64. Its RMSNorm variance and RoPE are computed in float32
    whatever the dtype; for the float64 run they are patched to stay in float64 (same math),
    else the "exact" value would carry float32 rounding. The RoPE tables stay the float32
    tables cast (as ours: both sides use the same table values)."""
    official_minicpm.rms_layernorm = _rms_layernorm
    official_minicpm.apply_rotary_pos_emb = _rope
    model = core.tts_model
    model.double()
    model.config.dtype = "float64"
    original = official_model.get_dtype
    official_model.get_dtype = lambda d: torch.float64 if d == "float64" else original(d)
    cfg = model.config
    model.base_lm.setup_cache(1, cfg.max_length, "cpu", torch.float64)
    model.residual_lm.setup_cache(1, cfg.max_length, "cpu", torch.float64)
    vae = model.audio_vae
    encode, decode = vae.encode, vae.decode
    vae.encode = lambda x, sr: encode(x.double(), sr)
    vae.decode = lambda z: decode(z.double())
    inference = model._inference

    def _inference(*args, **kwargs):
        for latents, feats, context in inference(*args, **kwargs):
            yield latents.as_subclass(_KeepFloat64), feats, context

    model._inference = _inference


def component_inputs(model, gen: torch.Generator) -> dict[str, torch.Tensor]:
    cfg = model.config
    h, d, p = cfg.lm_config.hidden_size, cfg.feat_dim, cfg.patch_size
    hd = cfg.dit_config.hidden_dim
    r = lambda *s: torch.randn(*s, generator=gen)  # noqa: E731
    return {
        "in_patches": r(1, 5, p, d),
        "in_dit_x": r(2, d, p),
        "in_dit_mu": r(2, 2 * hd),
        "in_dit_t": torch.tensor([0.83, 0.21]),
        "in_dit_cond": r(2, d, p),
        "in_cfm_mu": r(1, 2 * hd),
        "in_cfm_cond": r(1, d, p),
        "in_lm_embeds": r(1, 7, h),
        "in_hidden": r(1, 7, h),
    }


@torch.inference_mode()
def components(model, data: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    dtype = next(model.parameters()).dtype
    x = {k: v.to(dtype) for k, v in data.items()}
    dit = model.feat_decoder.estimator
    zeros = torch.zeros(2, dtype=dtype)
    out = {
        "locenc": model.feat_encoder(x["in_patches"]),
        "locdit": dit(x["in_dit_x"], x["in_dit_mu"], x["in_dit_t"], x["in_dit_cond"], zeros),
        "base_lm": model.base_lm(x["in_lm_embeds"], is_causal=True)[0],
        "residual_lm": model.residual_lm(x["in_lm_embeds"], is_causal=True)[0],
        "fsq": model.fsq_layer(x["in_hidden"]),
        "stop_logits": model.stop_head(model.stop_actn(model.stop_proj(x["in_hidden"]))),
    }
    torch.manual_seed(7)
    out["cfm"] = model.feat_decoder(
        mu=x["in_cfm_mu"],
        n_timesteps=6,
        patch_size=model.patch_size,
        cond=x["in_cfm_cond"],
        cfg_value=2.0,
    )
    return out


def generations(core: VoxCPM, wav: Path) -> dict[str, torch.Tensor]:
    out = {}
    for key, text, voice, seed, max_len, steps in MODES:
        kwargs = {}
        if voice in ("ref", "ref_text"):
            kwargs["reference_wav_path"] = str(wav)
        if voice == "ref_text":
            kwargs.update(prompt_wav_path=str(wav), prompt_text=REF_TEXT)
        torch.manual_seed(seed)
        audio = core.generate(
            text=text,
            cfg_value=2.0,
            inference_timesteps=steps,
            min_len=2,
            max_len=max_len,
            normalize=False,
            denoise=False,
            retry_badcase=False,
            **kwargs,
        )
        out[f"mode_{key}"] = torch.from_numpy(np.asarray(audio))
    return out


def make(fixtures: Path, name: str) -> Path:
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / name
        shutil.copytree(fixtures / name, folder)
        cfg = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        cfg["dtype"] = "float32"
        (folder / "config.json").write_text(json.dumps(cfg, indent=2), encoding="utf-8")
        wav = Path(tmp) / "ref.wav"
        sf.write(wav, clip(), CLIP_RATE, subtype="FLOAT")
        core = VoxCPM(
            voxcpm_model_path=str(folder), enable_denoiser=False, optimize=False, device="cpu"
        )
        model = core.tts_model
        data = component_inputs(model, torch.Generator().manual_seed(5))
        tokenizer = {t: model.text_tokenizer(t) for t in TOKENIZER_TEXTS}
        goldens = {**data, **components(model, data), **generations(core, wav)}
        goldens["ref_clip"] = torch.from_numpy(clip())
        to_float64(core)
        with float32_noise():
            exact = {**components(model, data), **generations(core, wav)}
    errors = {}
    for key, value in exact.items():
        assert goldens[key].shape == value.shape, (key, goldens[key].shape, value.shape)
        errors[key] = float((goldens[key].double() - value.double()).abs().max())
        goldens[f"{key}_fp64"] = value.double()
    out = fixtures / f"{name}-model.golden"
    out.mkdir(parents=True, exist_ok=True)
    save_file(
        {k: v.detach().contiguous() for k, v in goldens.items()}, str(out / "goldens.safetensors")
    )
    meta = {
        "checkpoint": name,
        "official": f"voxcpm=={metadata.version('voxcpm')}",
        "torch": torch.__version__,
        "threads": 1,
        "clip_rate": CLIP_RATE,
        "ref_text": REF_TEXT,
        "fp32_error": errors,
        "tokenizer": [{"text": t, "ids": ids} for t, ids in tokenizer.items()],
        "cases": [
            {
                "key": k,
                "text": t,
                "voice": v,
                "seed": s,
                "max_len": m,
                "inference_timesteps": n,
                "cfg_value": 2.0,
            }
            for k, t, v, s, m, n in MODES
        ],
    }
    (out / "cases.json").write_text(
        json.dumps(meta, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--fixtures", type=Path, default=REPO / "tests/fixtures")
    args = parser.parse_args()
    for name in NAMES:
        out = make(args.fixtures, name)
        meta = json.loads((out / "cases.json").read_text(encoding="utf-8"))
        print(f"wrote {out}")
        for key, error in meta["fp32_error"].items():
            print(f"  fp32 error {key}: {error:.3g}")


if __name__ == "__main__":
    main()
