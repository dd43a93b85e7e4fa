"""Strict AudioVAE loading (the official loader's strict=False is not copied) and the config."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from qwen3.conftest import U_BF16, bf16_bound, fp32_error
from safetensors.torch import save_file

from tts_core.models.voxcpm import AudioVAE, CheckpointError, ConfigError, VoxCPM2Config


def _folder_with(
    tmp_path: Path, tiny_folder: Path, state: dict | None, name="audiovae.pth"
) -> Path:
    folder = tmp_path / "ckpt"
    folder.mkdir(parents=True)
    shutil.copyfile(tiny_folder / "config.json", folder / "config.json")
    if state is not None:
        if name.endswith(".safetensors"):
            save_file(state, str(folder / name))
        else:
            torch.save(state, folder / name)
    return folder


def _state(tiny_folder: Path) -> dict[str, torch.Tensor]:
    return torch.load(tiny_folder / "audiovae.pth", map_location="cpu", weights_only=True)


def test_file_holds_exactly_our_keys(tiny_folder: Path, tiny_vae: AudioVAE) -> None:
    state = _state(tiny_folder)
    assert set(state) == set(tiny_vae.state_dict())
    assert state["decoder.sr_bin_boundaries"].dtype == torch.int32


def test_missing_key_is_an_error(tmp_path: Path, tiny_folder: Path) -> None:
    state = _state(tiny_folder)
    del state["decoder.model.2.block.1.weight_g"]
    folder = _folder_with(tmp_path, tiny_folder, state)
    with pytest.raises(
        CheckpointError, match=r"1 missing key.*decoder\.model\.2\.block\.1\.weight_g"
    ):
        AudioVAE.from_folder(folder)


def test_unexpected_key_is_an_error(tmp_path: Path, tiny_folder: Path) -> None:
    state = _state(tiny_folder)
    state["decoder.model.2.block.1.weight"] = torch.zeros(1)  # a fused weight: not the layout
    folder = _folder_with(tmp_path, tiny_folder, state)
    with pytest.raises(CheckpointError, match=r"1 unexpected key.*block\.1\.weight\b"):
        AudioVAE.from_folder(folder)


def test_shape_mismatch_is_an_error(tmp_path: Path, tiny_folder: Path) -> None:
    state = _state(tiny_folder)
    state["encoder.fc_mu.bias"] = torch.zeros(3)
    folder = _folder_with(tmp_path, tiny_folder, state)
    with pytest.raises(CheckpointError, match=r"shape mismatch.*encoder\.fc_mu\.bias \(3,\)"):
        AudioVAE.from_folder(folder)


def test_prefixed_keys_are_rejected(tmp_path: Path, tiny_folder: Path) -> None:
    """model.safetensors-style `audio_vae.` keys are not the audiovae.pth layout."""
    state = {f"audio_vae.{k}": v for k, v in _state(tiny_folder).items()}
    folder = _folder_with(tmp_path, tiny_folder, state)
    with pytest.raises(CheckpointError, match="missing key.*unexpected key"):
        AudioVAE.from_folder(folder)


def test_no_weights_file_is_an_error(tmp_path: Path, tiny_folder: Path) -> None:
    with pytest.raises(CheckpointError, match="audiovae.safetensors or audiovae.pth"):
        AudioVAE.from_folder(_folder_with(tmp_path, tiny_folder, None))


def test_not_a_state_dict_is_an_error(tmp_path: Path, tiny_folder: Path) -> None:
    folder = _folder_with(tmp_path, tiny_folder, None)
    torch.save([torch.zeros(1)], folder / "audiovae.pth")
    with pytest.raises(CheckpointError, match="not a state dict"):
        AudioVAE.from_folder(folder)


def test_wrapped_and_safetensors_and_bf16_files_load(
    tmp_path: Path, tiny_folder: Path, tiny_vae, vae_goldens
) -> None:
    latents = vae_goldens["decode_input"]
    expected = tiny_vae.decode(latents)
    wrapped = AudioVAE.from_folder(
        _folder_with(tmp_path / "w", tiny_folder, {"state_dict": _state(tiny_folder)})
    )
    assert torch.equal(wrapped.decode(latents), expected)
    # safetensors is preferred when both exist (official order): make it differ to tell.
    state = _state(tiny_folder)
    state["decoder.model.2.block.0.alpha"] = state["decoder.model.2.block.0.alpha"] * 1.5
    folder = _folder_with(tmp_path / "s", tiny_folder, state, "audiovae.safetensors")
    shutil.copyfile(tiny_folder / "audiovae.pth", folder / "audiovae.pth")
    safetensors_vae = AudioVAE.from_folder(folder)
    assert torch.equal(
        safetensors_vae.decoder.model[2].block[0].alpha, state["decoder.model.2.block.0.alpha"]
    )
    # bf16 files are cast to float32 like the official `.to(torch.float32)`: each weight is the
    # float32 one rounded to nearest bf16 (relative error <= u_bf16), and the decode errs as the
    # bf16 error model of tests/qwen3/conftest.py says (E: the golden's float32 error; measured
    # 0.36 A u_bf16): within bf16_bound of the float64 golden.
    full = _state(tiny_folder)
    bf16 = {k: v.to(torch.bfloat16) if v.is_floating_point() else v for k, v in full.items()}
    vae = AudioVAE.from_folder(_folder_with(tmp_path / "b", tiny_folder, bf16))
    assert vae.dtype == torch.float32 and vae.decoder.model[0].weight.dtype == torch.float32
    for key, value in vae.state_dict().items():
        if value.is_floating_point():
            assert torch.equal(value, bf16[key].float()), key
            assert bool(((value - full[key]).abs() <= U_BF16 * full[key].abs()).all()), key
    bound = bf16_bound(fp32_error(vae_goldens, "decode_audio"))
    assert bound < 0.5 * float(vae_goldens["decode_audio_fp64"].abs().max())
    error = (vae.decode(latents).double() - vae_goldens["decode_audio_fp64"]).abs().max()
    assert float(error) <= bound


def test_condition_bucket_comes_from_the_file(
    tmp_path: Path, tiny_folder: Path, tiny_vae, vae_goldens
) -> None:
    """The official decoder bucketizes out_sample_rate with the *loaded* boundaries buffer."""
    assert tiny_vae.decoder.sr_bucket == 3  # 48000 > 40000
    state = _state(tiny_folder)
    state["decoder.sr_bin_boundaries"] = torch.tensor([20000, 30000, 50000], dtype=torch.int32)
    vae = AudioVAE.from_folder(_folder_with(tmp_path, tiny_folder, state))
    assert vae.decoder.sr_bucket == 2
    latents = vae_goldens["decode_input"]
    assert float((vae.decode(latents) - tiny_vae.decode(latents)).abs().max()) > 1e-3


def test_release_config_parses(release_config_folder: Path) -> None:
    cfg = VoxCPM2Config.from_folder(release_config_folder)
    vae = cfg.audio_vae
    assert (vae.hop_length, vae.decode_hop_length) == (640, 1920)
    assert (vae.sample_rate, vae.out_sample_rate, vae.latent_dim) == (16000, 48000, 64)
    assert vae.out_sample_rate * vae.hop_length == vae.sample_rate * vae.decode_hop_length
    assert cfg.patch_size == 4 and cfg.feat_dim == 64 and cfg.residual_lm_no_rope
    assert cfg.dit.mean_mode is False  # the release's "mean_mode" key is ignored, as pydantic does
    assert cfg.lm.head_dim == 128 and len(cfg.lm.rope_scaling.short_factor) == 64


def test_bad_configs_are_refused(tmp_path: Path, tiny_folder: Path) -> None:
    base = json.loads((tiny_folder / "config.json").read_text())
    bad = [
        ({"architecture": "voxcpm"}, "architecture"),
        ({"feat_dim": 7}, "feat_dim 7"),
        ({"audio_vae_config": {**base["audio_vae_config"], "use_noise_block": True}}, "noise"),
        ({"audio_vae_config": {**base["audio_vae_config"], "decoder_rates": [5, 0]}}, "positive"),
    ]
    for change, message in bad:
        with pytest.raises(ConfigError, match=message):
            VoxCPM2Config.from_dict({**base, **change})
