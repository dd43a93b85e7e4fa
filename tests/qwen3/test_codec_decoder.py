"""Codec decoder parity with the official qwen-tts, config reading, and loading errors.

The random tiny decoders are badly conditioned (the 24 kHz stage reaches |x| ~ 500 inside sin()):
they amplify rounding ~700x, so any float32 full pass (official or ours, any CPU, any thread
count) is 3e-5..7e-5 off the exact waveform, and two of them differ by up to ~1e-4. Parity is
therefore checked twice (error model: tests/qwen3/conftest.py):

* exactly, in float64: our decoder in float64 against the official one run in pure float64
  (`<key>_fp64`), within 8 E x 2^-29 (~7e-13; measured ~8e-14), E the golden's float32 error;
* in float32 against the float32 golden within (1 + 4) E and against the exact value within 4 E
  (E ~ 4e-5 here: bounds ~2e-4 and ~1.6e-4; measured on an AMD EPYC <= 6.4e-5).
"""

from __future__ import annotations

import json
import re
import shutil
from functools import cache
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from tts_core.models.qwen3_tts.codec import (
    CodecCheckpointError,
    CodecConfigError,
    CodecDecoder,
    SpeechTokenizer,
    load_speech_tokenizer_config,
)

from .conftest import check_fp32, fp64_bound


@cache
def _tokenizer(folder: Path, dtype: torch.dtype = torch.float32) -> SpeechTokenizer:
    return SpeechTokenizer.from_folder(folder / "speech_tokenizer", dtype=dtype)


def _clone_codes(goldens, key: str) -> tuple[torch.Tensor, int]:
    """The codes the official pipeline decoded for `key` and how many leading samples it cut."""
    if key == "icl_audio":
        ref = goldens["ref_codes"]
        return torch.cat([ref, goldens["icl_codes"]]), ref.shape[0] * 1920
    return goldens["xvec_codes"], 0


def _check_fp64(folder: Path, goldens, key: str, codes: torch.Tensor, cut: int = 0) -> str:
    decoder = _tokenizer(folder, torch.float64).decoder
    with torch.inference_mode():
        wav = decoder(codes.T[None])[0, 0, cut:]  # the decoder keeps float64 (decode() casts)
    assert wav.dtype == torch.float64
    error, bound = float((wav - goldens[f"{key}_fp64"]).abs().max()), fp64_bound(goldens, key)
    report = f"{key} float64: max|ours - official| {error:.3g} (bound {bound:.3g})"
    assert error <= bound, report
    return report


def test_decode_matches_official_full_pass(tiny_checkpoint: Path, goldens) -> None:
    tok = _tokenizer(tiny_checkpoint)
    codes = goldens["decoder_codes"]
    wav = tok.decode(codes)
    assert wav.shape == (codes.shape[0] * tok.samples_per_frame,)
    assert wav.dtype == torch.float32
    assert float(wav.abs().max()) <= 1.0
    print(f"\n[parity] {goldens.name} {check_fp32(wav, goldens, 'decoder_wav')}")
    print(f"[parity] {goldens.name} {_check_fp64(tiny_checkpoint, goldens, 'decoder_wav', codes)}")


@pytest.mark.parametrize("key", ["icl_audio", "xvec_audio"])
def test_decode_reproduces_official_clone_audio(tiny_checkpoint: Path, goldens, key) -> None:
    tok = _tokenizer(tiny_checkpoint)
    codes, cut = _clone_codes(goldens, key)
    wav = tok.decode(codes)[cut:]
    print(f"\n[parity] {goldens.name} {check_fp32(wav, goldens, key)}")
    print(f"[parity] {goldens.name} {_check_fp64(tiny_checkpoint, goldens, key, codes, cut)}")


def test_config_values_come_from_json(tiny_checkpoint: Path) -> None:
    folder = tiny_checkpoint / "speech_tokenizer"
    raw = json.loads((folder / "config.json").read_text())
    cfg = load_speech_tokenizer_config(folder)
    assert cfg.decoder.hidden_size == raw["decoder_config"]["hidden_size"]
    assert cfg.decoder.intermediate_size == raw["decoder_config"]["intermediate_size"]
    assert cfg.decoder.sliding_window == raw["decoder_config"]["sliding_window"]
    assert cfg.decoder.upsample_rates == tuple(raw["decoder_config"]["upsample_rates"])
    assert cfg.encoder.frame_rate == raw["encoder_config"]["_frame_rate"]
    assert cfg.decoder.samples_per_frame == raw["decode_upsample_rate"] == 1920
    tok = _tokenizer(tiny_checkpoint)
    assert tok.samples_per_frame == 1920 and tok.sample_rate == 24000


def _copy_folder(tiny_checkpoint: Path, tmp_path: Path) -> Path:
    target = tmp_path / "speech_tokenizer"
    shutil.copytree(tiny_checkpoint / "speech_tokenizer", target)
    return target


@pytest.mark.parametrize(
    ("section", "key", "value", "message"),
    [
        ("decoder_config", "hidden_size", None, "missing required field 'hidden_size'"),
        ("decoder_config", "upsample_rates", "8,5,4,3", "must be a non-empty list of integers"),
        ("encoder_config", "_frame_rate", None, "missing required field '_frame_rate'"),
        ("decoder_config", "hidden_act", "gelu", "only 'silu'"),
    ],
)
def test_bad_config_is_a_clear_error(
    tiny_checkpoint: Path, tmp_path: Path, section: str, key: str, value, message: str
) -> None:
    folder = _copy_folder(tiny_checkpoint, tmp_path)
    raw = json.loads((folder / "config.json").read_text())
    if value is None:
        del raw[section][key]
    else:
        raw[section][key] = value
    (folder / "config.json").write_text(json.dumps(raw))
    with pytest.raises(CodecConfigError, match=message):
        SpeechTokenizer.from_folder(folder)


def test_unparsable_config(tiny_checkpoint: Path, tmp_path: Path) -> None:
    folder = _copy_folder(tiny_checkpoint, tmp_path)
    (folder / "config.json").write_text("{not json")
    with pytest.raises(CodecConfigError, match="cannot parse"):
        SpeechTokenizer.from_folder(folder)


def test_missing_folder_and_weights(tiny_checkpoint: Path, tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="folder not found"):
        SpeechTokenizer.from_folder(tmp_path / "nowhere")
    folder = _copy_folder(tiny_checkpoint, tmp_path)
    (folder / "model.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match="model.safetensors"):
        SpeechTokenizer.from_folder(folder)


def test_corrupt_weights(tiny_checkpoint: Path, tmp_path: Path) -> None:
    folder = _copy_folder(tiny_checkpoint, tmp_path)
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])  # truncated download
    with pytest.raises(CodecCheckpointError, match="corrupt"):
        SpeechTokenizer.from_folder(folder)


@pytest.mark.parametrize("change", ["drop", "extra", "reshape"])
def test_key_mismatch_lists_the_keys(tiny_checkpoint: Path, tmp_path: Path, change: str) -> None:
    folder = _copy_folder(tiny_checkpoint, tmp_path)
    weights = load_file(str(folder / "model.safetensors"))
    assert len(weights) == len(SpeechTokenizer.from_folder(folder).state_dict())
    key = "decoder.pre_transformer.layers.0.self_attn.q_proj.weight"
    if change == "drop":
        del weights[key]
        expected = f"1 missing key(s): {key}"
    elif change == "extra":
        weights["decoder.bogus.weight"] = torch.zeros(1)
        expected = "1 unexpected key(s): decoder.bogus.weight"
    else:
        weights[key] = weights[key][:, :-1].contiguous()
        expected = f"1 shape mismatch(es): {key}"
    save_file(weights, str(folder / "model.safetensors"))
    with pytest.raises(CodecCheckpointError, match=re.escape(expected)):
        SpeechTokenizer.from_folder(folder)


def test_bad_codes_are_rejected(tiny_checkpoint: Path) -> None:
    tok = _tokenizer(tiny_checkpoint)
    size = tok.config.decoder.codebook_size
    with pytest.raises(ValueError, match="must lie in"):
        tok.decode(torch.full((3, 16), size))
    with pytest.raises(ValueError, match="must lie in"):
        tok.decode(torch.full((3, 16), -1))
    with pytest.raises(ValueError, match=r"expected codes \(T, 16\)"):
        tok.decode(torch.zeros(3, 8, dtype=torch.long))


def test_random_init_from_config_has_the_geometry(tiny_checkpoint: Path) -> None:
    cfg = load_speech_tokenizer_config(tiny_checkpoint / "speech_tokenizer").decoder
    decoder = CodecDecoder.from_config(cfg, seed=3)
    codes = torch.randint(0, cfg.codebook_size, (2, cfg.num_quantizers, 4))
    wav = decoder(codes)
    assert wav.shape == (2, 1, 4 * cfg.samples_per_frame)
    assert torch.isfinite(wav).all() and float(wav.std()) > 0


RELEASED = Path(__file__).resolve().parents[2] / "assets/checkpoints/Qwen3-TTS-12Hz-0.6B-Base"


def test_released_geometry_has_the_published_layout() -> None:
    """The released speech_tokenizer/config.json gives the 496 tensors of spec section 5.2."""
    cfg = load_speech_tokenizer_config(RELEASED / "speech_tokenizer")
    assert (cfg.decoder.hidden_size, cfg.decoder.intermediate_size) == (512, 1024)
    with torch.device("meta"):
        shapes = {k: tuple(v.shape) for k, v in SpeechTokenizer(cfg).state_dict().items()}
    assert len(shapes) == 496
    assert sum(k.startswith("decoder.") for k in shapes) == 271
    assert shapes["decoder.quantizer.rvq_first.output_proj.weight"] == (512, 256, 1)
    assert shapes["decoder.pre_transformer.layers.7.self_attn.q_proj.weight"] == (1024, 512)
    assert shapes["decoder.decoder.1.block.1.conv.weight"] == (1536, 768, 16)
    assert shapes["decoder.decoder.4.block.1.conv.weight"] == (192, 96, 6)
    assert shapes["decoder.decoder.6.conv.weight"] == (1, 96, 7)
    assert shapes["encoder.encoder.layers.14.conv.weight"] == (512, 1024, 3)
    assert shapes["encoder.downsample.conv.weight"] == (512, 512, 4)
    assert (
        "encoder.quantizer.acoustic_residual_vector_quantizer.layers.30.codebook.embed_sum"
        in shapes
    )
