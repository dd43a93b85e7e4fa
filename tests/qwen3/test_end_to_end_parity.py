"""Acceptance test: our engine reproduces the official qwen-tts greedy output exactly.

For both tiny checkpoints and both clone modes, `tts_core.load_model` + `create_voice` +
`generate(greedy=True)` must give the official codes bit for bit and the official waveform and
speaker embedding within the float32 error model of tests/qwen3/conftest.py ((1 + 4) x the
golden's own float32 error E; audio E ~4e-5, embedding E ~1e-6), from the same reference clip.

Codes equality is portable: tools/oracle/make_goldens.py checks that the official run in pure
float64 picks every golden code too and that every decision's float64 gap is at least 8 x twice
the float32 error on its logit (or distance) row (cases.json "decision_margins": RVQ >= 14.7x,
code predictor >= 143x, talker >= 307x), so another CPU's float32 rounding, within 4x of the
golden machine's, cannot flip one. Goldens come from tools/oracle/make_goldens.py. Run with `-s`
to see the measured differences for every case.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from .conftest import check_fp32, shared_model

MODES = ("icl", "xvec")


def _report(label: str, message: str) -> None:
    print(f"\n[parity] {label}: {message}")


def describe_codes(ours: torch.Tensor, golden: torch.Tensor) -> str:
    """One line: shape check, first differing frame, how many codes differ."""
    if ours.shape != golden.shape:
        n = min(ours.shape[0], golden.shape[0])
        same = bool(torch.equal(ours[:n], golden[:n]))
        return f"frames {ours.shape[0]} vs official {golden.shape[0]} (common prefix equal: {same})"
    diff = (ours != golden).nonzero()
    if diff.numel() == 0:
        return f"codes equal {tuple(golden.shape)}"
    frame, group = diff[0].tolist()
    return (
        f"{diff.shape[0]} of {golden.numel()} codes differ; first at frame {frame} group "
        f"{group}: ours {int(ours[frame, group])} vs official {int(golden[frame, group])}"
    )


def max_abs(a: torch.Tensor, b: torch.Tensor) -> float:
    if a.shape != b.shape:
        return float("inf")
    return float((a.float() - b.float()).abs().max()) if a.numel() else 0.0


def test_voice_matches_official(tiny_checkpoint: Path, goldens) -> None:
    model = shared_model(tiny_checkpoint)
    ref_audio = goldens["ref_audio"].numpy()
    voice = model.create_voice(ref_audio, 24000, ref_text=goldens.cases["icl"]["ref_text"])
    ours_codes = torch.as_tensor(voice.ref_codes).long()
    _report(f"{goldens.name} voice", describe_codes(ours_codes, goldens["ref_codes"]))
    assert torch.equal(ours_codes, goldens["ref_codes"]), describe_codes(
        ours_codes, goldens["ref_codes"]
    )
    _report(goldens.name, check_fp32(voice.speaker_embedding, goldens, "speaker_embedding"))


def test_xvector_voice_has_no_reference_codes(tiny_checkpoint: Path, goldens) -> None:
    model = shared_model(tiny_checkpoint)
    voice = model.create_voice(goldens["ref_audio"].numpy(), 24000, ref_text=None)
    assert voice.ref_codes is None
    check_fp32(voice.speaker_embedding, goldens, "speaker_embedding")


@pytest.mark.parametrize("mode", MODES)
def test_generate_matches_official(tiny_checkpoint: Path, goldens, mode: str) -> None:
    case = goldens.cases[mode]
    model = shared_model(tiny_checkpoint)
    voice = model.create_voice(goldens["ref_audio"].numpy(), 24000, ref_text=case["ref_text"])
    result = model.generate(
        case["text"],
        voice,
        language=case["language"],
        greedy=True,
        max_new_tokens=case["max_new_tokens"],
    )
    codes = torch.as_tensor(result.codes).long()
    audio = torch.as_tensor(result.audio)
    golden_codes, golden_audio = goldens[f"{mode}_codes"], goldens[f"{mode}_audio"]
    audio_diff = max_abs(audio, golden_audio)
    _report(
        f"{goldens.name} {mode} ({case['language']}, official stop: {case['stop_reason']}, "
        f"greedy margins {case['greedy_margins']})",
        f"{describe_codes(codes, golden_codes)}; audio {tuple(audio.shape)} vs "
        f"{tuple(golden_audio.shape)}, max|diff| {audio_diff:.3g}",
    )
    assert torch.equal(codes, golden_codes), describe_codes(codes, golden_codes)
    _report(goldens.name, check_fp32(audio, goldens, f"{mode}_audio"))
    assert result.stop_reason == case["stop_reason"]


@pytest.mark.parametrize("mode", MODES)
def test_small_chunk_stream_matches_official(tiny_checkpoint: Path, goldens, mode: str) -> None:
    # Chunks of 2 then 5 frames: every chunk boundary crosses the decoder's carried state.
    case = goldens.cases[mode]
    model = shared_model(tiny_checkpoint)
    voice = model.create_voice(goldens["ref_audio"].numpy(), 24000, ref_text=case["ref_text"])
    chunks = list(
        model.stream(
            case["text"],
            voice,
            language=case["language"],
            greedy=True,
            max_new_tokens=case["max_new_tokens"],
            first_chunk_frames=2,
            chunk_frames=5,
        )
    )
    audio = torch.cat([torch.as_tensor(chunk.audio) for chunk in chunks])
    frames = sum(chunk.frames for chunk in chunks)
    audio_diff = max_abs(audio, goldens[f"{mode}_audio"])
    _report(
        f"{goldens.name} {mode} stream 2+5",
        f"{len(chunks)} chunks, {frames} frames "
        f"(official {case['frames']}), audio max|diff| {audio_diff:.3g}",
    )
    assert frames == case["frames"]
    assert [chunk.final for chunk in chunks] == [False] * (len(chunks) - 1) + [True]
    assert chunks[-1].stop_reason == case["stop_reason"]
    check_fp32(audio, goldens, f"{mode}_audio")


# --- the fixtures themselves (no engine code involved) --------------------------------------

RELEASED_FILES = (
    "config.json",
    "generation_config.json",
    "preprocessor_config.json",
    "tokenizer_config.json",
    "vocab.json",
    "merges.txt",
    "model.safetensors",
    "speech_tokenizer/config.json",
    "speech_tokenizer/configuration.json",
    "speech_tokenizer/preprocessor_config.json",
    "speech_tokenizer/model.safetensors",
)


def test_fixture_has_released_layout_and_dtypes(tiny_checkpoint: Path) -> None:
    from safetensors import safe_open

    assert all((tiny_checkpoint / name).is_file() for name in RELEASED_FILES)
    with safe_open(str(tiny_checkpoint / "model.safetensors"), "pt") as f:
        keys = list(f.keys())
        assert {f.get_slice(k).get_dtype() for k in keys} == {"BF16"}
    assert any(k.startswith("speaker_encoder.") for k in keys)
    has_projection = any("small_to_mtp_projection" in k for k in keys)
    assert has_projection == (tiny_checkpoint.name == "qwen3-tiny-b")
    with safe_open(str(tiny_checkpoint / "speech_tokenizer/model.safetensors"), "pt") as f:
        assert {f.get_slice(k).get_dtype() for k in f.keys()} == {"F32"}


def test_goldens_are_self_consistent(goldens) -> None:
    spf = goldens.meta["samples_per_frame"]
    ref_frames = -(-goldens["ref_audio"].numel() // spf)  # ceil
    assert goldens["ref_codes"].shape == (ref_frames, 16)
    assert goldens["decoder_wav"].numel() == goldens["decoder_codes"].shape[0] * spf
    for key, case in goldens.cases.items():
        codes = goldens[f"{key}_codes"]
        assert codes.shape == (case["frames"], 16)
        assert int(codes.min()) >= 0 and int(codes.max()) < 2048
        assert goldens[f"{key}_audio"].numel() == case["frames"] * spf
        assert case["self_consistency_max_abs"] == 0.0
    assert all(goldens.meta["fp64_codes_agree"].values())
    stops = {case["stop_reason"] for case in goldens.cases.values()}
    assert stops <= {"eos", "max_new_tokens"}
