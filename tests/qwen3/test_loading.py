"""Checkpoint loading: local folders, dtypes, random-weight builds and clear errors."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

import tts_core
from tts_core.models.qwen3_tts.checkpoint import CheckpointError
from tts_core.models.qwen3_tts.config import ConfigError, parse_config
from tts_core.models.qwen3_tts.model import Qwen3TTSModel

from .conftest import (
    bf16_bound,
    check_audio,
    fixture_path,
    golden_voice,
    load_goldens,
    run_error,
    shared_model,
)

TINY = fixture_path("qwen3-tiny-a")


def _copy_checkpoint(tmp_path: Path, skip: tuple[str, ...] = ()) -> Path:
    """Copy of tiny-a (small files copied, the rest symlinked) that a test may edit."""
    folder = tmp_path / "ckpt"
    for source in TINY.rglob("*"):
        relative = source.relative_to(TINY)
        if source.is_dir() or str(relative) in skip:
            continue
        target = folder / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.suffix == ".json" or source.name == "model.safetensors":
            shutil.copy(source, target)
        else:
            target.symlink_to(source)
    return folder


def _edit_config(folder: Path, edit) -> None:
    path = folder / "config.json"
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))


def test_load_local_folder_reads_values_from_json() -> None:
    model = tts_core.load_model(TINY)
    raw = json.loads((TINY / "config.json").read_text())["talker_config"]
    assert isinstance(model, Qwen3TTSModel)
    assert model.config.talker.stack.hidden_size == raw["hidden_size"]
    assert model.config.talker.codec_eos_token_id == 2150
    assert model.generation_defaults.max_new_tokens == 8192  # generation_config.json, not 2048
    assert model.generation_defaults.repetition_penalty == 1.05
    assert model.languages[0] == "auto" and len(model.languages) == 11


def _prefill(model, goldens, mode: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The talker's prefill logits and last hidden state (float64) for a golden case."""
    case = goldens.cases[mode]
    with torch.inference_mode():
        prompt = model._prompt(case["text"], golden_voice(goldens, mode), case["language"])
        caches = model.talker.new_caches(1, prompt.prefill.shape[1])
        logits, hidden = model.talker(prompt.prefill, caches, start=0)
    return logits.double(), hidden.double()


@pytest.mark.parametrize("mode", ["icl", "xvec"])
def test_bfloat16_load_matches_float32_within_bf16_rounding(mode: str) -> None:
    """The bf16 talker's prefill logits and hidden state are the float32 talker's up to bf16
    rounding: within bf16_bound of float64 (conftest error model, E = the float32 run's error;
    measured 0.2-0.55 A u_bf16, logits off by ~0.1 of a peak ~15). Greedy codes may then part
    (an argmax on a near tie), so the bf16 generation is checked for its audio level only."""
    goldens = load_goldens("qwen3-tiny-a")
    bf16 = tts_core.load_model(TINY, dtype=torch.bfloat16, warm_chunks=())
    assert bf16.dtype == bf16.talker.codec_head.weight.dtype == torch.bfloat16
    fp64 = tts_core.load_model(TINY, dtype=torch.float64, warm_chunks=())
    runs = [_prefill(model, goldens, mode) for model in (shared_model(TINY), bf16, fp64)]
    for ours32, ours16, exact in zip(*runs, strict=True):
        bound = bf16_bound(run_error(ours32, exact))
        assert bound < 0.2 * float(exact.abs().max())  # a bound a real error would break
        error = float((ours16 - exact).abs().max())
        assert error <= bound, f"bf16 vs float64: {error:.3g} > {bound:.3g}"
    result = bf16.generate("Hello.", golden_voice(goldens, mode), greedy=True, max_new_tokens=4)
    assert result.codes.shape == (3, 16) and result.audio.dtype.name == "float32"
    check_audio(result.audio)


def test_from_config_builds_random_weights_deterministically() -> None:
    first = Qwen3TTSModel.from_config(TINY, seed=1, with_codec=False)
    second = Qwen3TTSModel.from_config(TINY, seed=1, with_codec=False)
    a = first.talker.model.layers[0].mlp.up_proj.weight
    assert torch.equal(a, second.talker.model.layers[0].mlp.up_proj.weight)
    assert 0.01 < float(a.std()) < 0.03
    assert torch.equal(
        first.talker.model.norm.weight, torch.ones_like(first.talker.model.norm.weight)
    )


def test_missing_folder_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="not found"):
        tts_core.load_model(tmp_path / "nope")


def test_missing_file_is_named(tmp_path: Path) -> None:
    folder = _copy_checkpoint(tmp_path, skip=("merges.txt",))
    with pytest.raises(FileNotFoundError, match="merges.txt"):
        tts_core.load_model(folder)


def test_corrupt_safetensors_is_a_clear_error(tmp_path: Path) -> None:
    folder = _copy_checkpoint(tmp_path)
    path = folder / "model.safetensors"
    path.write_bytes(path.read_bytes()[:1000])
    with pytest.raises(CheckpointError, match="corrupt"):
        tts_core.load_model(folder)


def test_missing_tensor_fails_the_strict_key_check(tmp_path: Path) -> None:
    folder = _copy_checkpoint(tmp_path)
    path = folder / "model.safetensors"
    state = load_file(str(path))
    del state["talker.codec_head.weight"]
    save_file(state, str(path))
    with pytest.raises(CheckpointError, match="codec_head"):
        tts_core.load_model(folder)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d.update(tokenizer_type="qwen3_tts_tokenizer_25hz"), "tokenizer_type"),
        (lambda d: d.update(model_type="qwen2"), "model_type"),
        (lambda d: d["talker_config"].update(num_code_groups=8), "num_code_groups"),
        (lambda d: d["talker_config"].update(rope_scaling={"rope_type": "yarn"}), "rope"),
        (lambda d: d["talker_config"].pop("hidden_size"), "hidden_size"),
        (lambda d: d.update(tts_model_type="voice_clone_xl"), "tts_model_type"),
    ],
)
def test_invalid_config_values_are_rejected(edit, message: str) -> None:
    data = json.loads((TINY / "config.json").read_text())
    edit(data)
    with pytest.raises(ConfigError, match=message):
        parse_config(data)


def test_invalid_config_is_reported_by_load_model(tmp_path: Path) -> None:
    folder = _copy_checkpoint(tmp_path)
    _edit_config(folder, lambda d: d.update(tokenizer_type="unknown"))
    with pytest.raises(ConfigError, match="tokenizer_type"):
        tts_core.load_model(folder)


def test_wrong_width_in_config_fails_on_shapes(tmp_path: Path) -> None:
    folder = _copy_checkpoint(tmp_path)
    _edit_config(folder, lambda d: d["talker_config"].update(intermediate_size=64))
    with pytest.raises(CheckpointError, match="shape"):
        tts_core.load_model(folder)


def test_public_api_is_lazy_and_small() -> None:
    assert set(tts_core.__all__) == {
        "AudioChunk",
        "GenerationResult",
        "Qwen3TTSModel",
        "Voice",
        "load_model",
    }
    with pytest.raises(AttributeError):
        tts_core.no_such_name  # noqa: B018


# ------------------------------------------------- streamed loading (no state dict held)
def _tensors(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Parameters, buffers (derived ones too) and tensors kept as plain attributes."""
    found = dict(module.named_parameters())
    found.update(module.named_buffers())
    for prefix, sub in module.named_modules():
        for attr, value in vars(sub).items():
            if isinstance(value, torch.Tensor):
                found[f"{prefix}.@{attr}"] = value
    return found


def _assert_same_bits(ours: torch.nn.Module, reference: torch.nn.Module) -> None:
    a, b = _tensors(ours), _tensors(reference)
    assert a.keys() == b.keys()
    for key in a:
        x, y = a[key].detach(), b[key].detach()
        assert (x.dtype, x.shape, x.device) == (y.dtype, y.shape, y.device), key
        if x.dtype != torch.bool and x.numel():
            x, y = x.reshape(-1).view(torch.uint8), y.reshape(-1).view(torch.uint8)
        assert torch.equal(x, y), key


@pytest.mark.parametrize("name", ["qwen3-tiny-a", "qwen3-tiny-b"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_streamed_load_is_bit_identical_to_whole_file_loading(name: str, dtype) -> None:
    """load_model streams; the reference holds whole state dicts, as the loader used to:
    every parameter, buffer and derived tensor must come out bit for bit the same."""
    from tts_core.models.qwen3_tts.checkpoint import load_talker
    from tts_core.models.qwen3_tts.codec.speech_tokenizer import SpeechTokenizer
    from tts_core.models.qwen3_tts.speaker_encoder import SpeakerEncoder, SpeakerEncoderConfig

    folder = fixture_path(name)
    model = tts_core.load_model(folder, dtype=dtype)
    state = load_file(str(folder / "model.safetensors"))
    _assert_same_bits(model.talker, load_talker(model.config, state, "cpu", dtype))
    encoder_config = SpeakerEncoderConfig.from_dict(model.config.speaker_encoder)
    encoder_state = {k: v for k, v in state.items() if k.startswith("speaker_encoder.")}
    encoder = SpeakerEncoder.from_state_dict(encoder_config, encoder_state, dtype=dtype)
    _assert_same_bits(model.speaker_encoder, encoder)
    codec = SpeechTokenizer.from_folder(folder / "speech_tokenizer", dtype=dtype)
    _assert_same_bits(model.speech_tokenizer, codec)


@pytest.mark.parametrize("window", [4096, 65536])
def test_tensors_larger_than_the_window_are_copied_in_slices(window: int) -> None:
    from tts_core.models.qwen3_tts.checkpoint import SafetensorsFile, load_talker

    path = TINY / "model.safetensors"
    config = parse_config(json.loads((TINY / "config.json").read_text()))
    with SafetensorsFile(path, corrupt=CheckpointError, window=window) as weights:
        streamed = load_talker(config, weights, "cpu", torch.float32)
    whole = load_talker(config, load_file(str(path)), "cpu", torch.float32)
    _assert_same_bits(streamed, whole)


def test_no_map_of_the_checkpoint_is_left_after_loading(tmp_path: Path) -> None:
    folder = _copy_checkpoint(tmp_path)
    model = tts_core.load_model(folder, dtype=torch.bfloat16)
    maps = Path("/proc/self/maps")
    if maps.is_file():
        assert str(folder.resolve()) not in maps.read_text()
    assert model.talker.codec_head.weight.dtype == torch.bfloat16


def test_storage_free_build_affects_only_its_thread_and_block() -> None:
    import threading

    from tts_core.models.qwen3_tts.checkpoint import _storage_free_build

    other: list[torch.nn.Linear] = []
    with _storage_free_build():
        inside = torch.nn.Linear(3, 4)
        thread = threading.Thread(target=lambda: other.append(torch.nn.Linear(3, 4)))
        thread.start()
        thread.join()
    assert inside.weight.is_meta and inside.bias.is_meta
    assert not other[0].weight.is_meta
    assert not torch.nn.Linear(3, 4).weight.is_meta


def _edit_weights(path: Path, edit) -> None:
    state = load_file(str(path))
    edit(state)
    save_file(state, str(path))


def test_stray_key_in_model_file_is_named(tmp_path: Path) -> None:
    folder = _copy_checkpoint(tmp_path)
    _edit_weights(folder / "model.safetensors", lambda s: s.update(bogus=torch.zeros(2)))
    with pytest.raises(CheckpointError, match="unexpected keys bogus"):
        tts_core.load_model(folder)


def test_missing_speaker_encoder_is_a_clear_error(tmp_path: Path) -> None:
    folder = _copy_checkpoint(tmp_path)

    def drop_encoder(state: dict) -> None:
        for key in [k for k in state if k.startswith("speaker_encoder.")]:
            del state[key]

    _edit_weights(folder / "model.safetensors", drop_encoder)
    with pytest.raises(CheckpointError, match="no speaker_encoder"):
        tts_core.load_model(folder)


@pytest.mark.parametrize("change", ["drop", "reshape"])
def test_speaker_encoder_mismatch_reads_as_before(tmp_path: Path, change: str) -> None:
    """Same message as SpeakerEncoder.from_state_dict (the whole-dict path) gives."""
    from tts_core.models.qwen3_tts.speaker_encoder import SpeakerEncoder, SpeakerEncoderConfig

    folder = _copy_checkpoint(tmp_path)
    key = "speaker_encoder.fc.weight"

    def edit(state: dict) -> None:
        if change == "drop":
            del state[key]
        else:
            state[key] = state[key][:-1].contiguous()

    _edit_weights(folder / "model.safetensors", edit)
    with pytest.raises(CheckpointError, match="fc.weight") as streamed:
        tts_core.load_model(folder)
    state = load_file(str(folder / "model.safetensors"))
    encoder_state = {k: v for k, v in state.items() if k.startswith("speaker_encoder.")}
    config = parse_config(json.loads((folder / "config.json").read_text()))
    with pytest.raises(ValueError) as whole:
        SpeakerEncoder.from_state_dict(
            SpeakerEncoderConfig.from_dict(config.speaker_encoder), encoder_state
        )
    assert str(streamed.value) == f"model.safetensors (speaker encoder): {whole.value}"


@pytest.mark.parametrize("change", ["truncate", "drop", "extra", "reshape", "no-file"])
def test_codec_errors_read_as_before(tmp_path: Path, change: str) -> None:
    """The streamed codec loader raises what SpeechTokenizer.from_folder raises."""
    from tts_core.models.qwen3_tts.checkpoint import load_speech_tokenizer
    from tts_core.models.qwen3_tts.codec.speech_tokenizer import (
        CodecCheckpointError,
        SpeechTokenizer,
    )

    folder = _copy_checkpoint(tmp_path) / "speech_tokenizer"
    path = folder / "model.safetensors"
    key = "decoder.pre_transformer.layers.0.self_attn.q_proj.weight"
    path.unlink()
    shutil.copy(TINY / "speech_tokenizer" / "model.safetensors", path)
    if change == "truncate":
        path.write_bytes(path.read_bytes()[:-10])
    elif change == "drop":
        _edit_weights(path, lambda s: s.pop(key))
    elif change == "extra":
        _edit_weights(path, lambda s: s.update({"decoder.bogus.weight": torch.zeros(1)}))
    elif change == "reshape":
        _edit_weights(path, lambda s: s.update({key: s[key][:, :-1].contiguous()}))
    else:
        path.unlink()
    error = FileNotFoundError if change == "no-file" else CodecCheckpointError
    with pytest.raises(error) as streamed:
        load_speech_tokenizer(folder, "cpu", torch.float32)
    with pytest.raises(error) as whole:
        SpeechTokenizer.from_folder(folder)
    assert str(streamed.value) == str(whole.value)
    if change != "no-file":
        with pytest.raises(CodecCheckpointError):
            tts_core.load_model(folder.parent)


def test_model_file_errors_still_come_before_codec_errors(tmp_path: Path) -> None:
    """The codec now loads before the talker's data, but after every check on
    model.safetensors: with both files broken, the model file's error is the one raised."""
    folder = _copy_checkpoint(tmp_path)
    _edit_weights(folder / "model.safetensors", lambda s: s.pop("talker.codec_head.weight"))
    codec = folder / "speech_tokenizer" / "model.safetensors"
    codec.unlink()
    codec.write_bytes(b"not a safetensors file")
    with pytest.raises(CheckpointError, match="codec_head"):
        tts_core.load_model(folder)
    shutil.copy(TINY / "model.safetensors", folder / "model.safetensors")
    _edit_config(folder, lambda d: d["talker_config"].update(intermediate_size=64))
    with pytest.raises(CheckpointError, match="shape"):
        tts_core.load_model(folder)


def test_config_json_is_read_once_per_load(monkeypatch) -> None:
    """tts_core.load_model reads the checkpoint's config.json once: the registry's dispatch and
    the model's own config share that read (config_json.one_read); outside a load nothing is
    cached, so an edited file is read again by the next load."""
    from tts_core.models import config_json

    reads: list[Path] = []
    read = config_json._read
    monkeypatch.setattr(
        config_json, "_read", lambda path, error: reads.append(path) or read(path, error)
    )
    tts_core.load_model(TINY, warm_chunks=())
    assert [p for p in reads if p.resolve() == (TINY / "config.json").resolve()] == [
        TINY / "config.json"
    ]
    tts_core.load_model(TINY, warm_chunks=())
    assert sum(p.resolve() == (TINY / "config.json").resolve() for p in reads) == 2
