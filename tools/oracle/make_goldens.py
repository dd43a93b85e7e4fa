"""Golden outputs of the official qwen-tts for each tiny checkpoint (run in .oracle-venv).

    PYTHONPATH=tools/oracle/stubs:tools/oracle .oracle-venv/bin/python \
        tools/oracle/make_goldens.py [--fixtures tests/fixtures] [--only qwen3-tiny-a]

Writes tests/fixtures/<name>.golden/{goldens.safetensors, cases.json}; the schema is in
tests/fixtures/README.md. The goldens run on CPU in float32 through the official
`Qwen3TTSModel.from_pretrained(folder, dtype=torch.float32)`; then fp64_check.float64_run
repeats everything in pure float64 for the `<key>_fp64` goldens, the goldens' own float32 error
(`fp32_error`) and the distance of every code decision from a tie (`decision_margins`).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import soundfile as sf
import torch
from build_talker import greedy_kwargs, run_case
from cases import CASES
from fp64_check import code_predictor_logits, float64_run
from oracle_hooks import (
    EOS,
    RvqDistances,
    greedy_margins,
    official_mel,
    talker_choice_logits,
    top2_gap,
    tts_pad,
)
from qwen_tts import Qwen3TTSModel
from safetensors.torch import save_file

REPO = Path(__file__).resolve().parents[2]
SAMPLES_PER_FRAME = 1920
DECODER_FRAMES = {"qwen3-tiny-a": 80, "qwen3-tiny-b": 40}  # > each decoder sliding window
GOLDEN_SEED = 31337
# Every golden code must stay the same under a float32 error up to this many times the one the
# golden machine made (float64 gap > 2 x MIN x error): twice the FP32_SPREAD = 4 that
# tests/qwen3/conftest.py allows between two CPUs' float32 errors on a whole tensor, since one
# decision's error fluctuates more than a maximum over many values.
MIN_DECISION_MARGIN = 8


def reference_goldens(tts, ref_audio: np.ndarray, clip16_path: Path, f32: dict) -> dict:
    with RvqDistances() as f32["rvq"]:
        item = tts.create_voice_clone_prompt(ref_audio=(ref_audio, 24000), ref_text="x")[0]
    # A stereo (audio, sr) tuple crashes the official wrapper (it assigns into the tuple), so
    # the 16 kHz stereo clip goes in as a path: librosa.load(mono=True), then librosa.resample.
    with RvqDistances() as f32["rvq16"]:
        item16 = tts.create_voice_clone_prompt(ref_audio=str(clip16_path), ref_text="x")[0]
    return {
        "ref_audio": torch.from_numpy(ref_audio),
        "ref_mel": official_mel(ref_audio),
        "speaker_embedding": item.ref_spk_embedding.float(),
        "ref_codes": item.ref_code.long(),
        "ref16_codes": item16.ref_code.long(),
        "ref16_speaker_embedding": item16.ref_spk_embedding.float(),
    }


def decoder_goldens(tts, frames: int, gen: torch.Generator) -> dict:
    codes = torch.randint(0, 2048, (frames, 16), generator=gen)
    wavs, _sr = tts.model.speech_tokenizer.decode([{"audio_codes": codes}])
    return {"decoder_codes": codes, "decoder_wav": torch.from_numpy(wavs[0].copy())}


@torch.no_grad()
def code_predictor_goldens(tts, gen: torch.Generator, f32: dict) -> tuple[dict, float]:
    talker = tts.model.talker
    hidden = torch.randn(talker.config.hidden_size, generator=gen)
    c0 = torch.randint(0, 2048, (1,), generator=gen)
    codes, f32["cp_logits"] = code_predictor_logits(talker, hidden, c0)
    margin = min(top2_gap(lg) for lg in f32["cp_logits"])
    return {"cp_past_hidden": hidden, "cp_c0": c0, "cp_codes": codes}, margin


def stop_reason(rec) -> str:
    last = rec.talker_logits[-1]
    choice = talker_choice_logits(last, len(rec.talker_logits) - 1)
    return "eos" if int(choice.argmax()) == EOS else "max_new_tokens"


def audio_stats(wav: torch.Tensor) -> dict:
    return {
        "rms": round(float(wav.pow(2).mean().sqrt()), 6),
        "clipped_fraction": round(float((wav.abs() >= 0.999).float().mean()), 6),
    }


def check_self_consistent(tts, ref_codes, codes, audio, is_icl: bool) -> float:
    """Max |decode(ref ++ codes)[R*1920:] - audio| (ICL) or |decode(codes) - audio|."""
    full = torch.cat([ref_codes, codes]) if is_icl else codes
    wavs, _ = tts.model.speech_tokenizer.decode([{"audio_codes": full}])
    wav = torch.from_numpy(wavs[0].copy())
    if is_icl:
        wav = wav[ref_codes.shape[0] * SAMPLES_PER_FRAME :]
    assert wav.shape == audio.shape, (wav.shape, audio.shape)
    return float((wav - audio).abs().max())


def case_goldens(tts, case, ref_audio, ref_codes, f32: dict) -> tuple[dict, dict]:
    audio, rec = run_case(tts, case, ref_audio)
    f32[case.key] = rec
    audio = torch.from_numpy(audio.copy())
    codes = rec.codes[0].long()
    tensors = {
        f"{case.key}_codes": codes,
        f"{case.key}_audio": audio,
        f"{case.key}_prefill_embeds": rec.prefill_embeds[0].float(),
        f"{case.key}_trailing_text": rec.trailing_text[0].float(),
        f"{case.key}_prefill_logits": rec.talker_logits[0],
        f"{case.key}_past_hidden": rec.talker_hidden[0],
    }
    is_icl = case.ref_text is not None
    assert torch.equal(rec.decode_codes[0][-codes.shape[0] :], codes)
    info = {
        "key": case.key,
        "mode": "icl" if is_icl else "xvec",
        "text": case.text,
        "ref_text": case.ref_text,
        "language": case.language,
        "max_new_tokens": case.max_new_tokens,
        "frames": int(codes.shape[0]),
        "stop_reason": stop_reason(rec),
        "prefill_len": int(rec.prefill_embeds[0].shape[0]),
        "trailing_len": int(rec.trailing_text[0].shape[0]),
        "greedy_margins": {k: round(v, 6) for k, v in greedy_margins(rec).items()},
        "audio": audio_stats(audio),
        "self_consistency_max_abs": check_self_consistent(tts, ref_codes, codes, audio, is_icl),
        "generate_kwargs": greedy_kwargs(case),
    }
    return tensors, info


def make(name: str, fixtures: Path) -> None:
    folder = fixtures / name
    tts = Qwen3TTSModel.from_pretrained(str(folder), dtype=torch.float32)
    ref_audio, _ = sf.read(fixtures / "ref_clip_24k.wav", dtype="float32")
    gen = torch.Generator().manual_seed(GOLDEN_SEED)
    f32: dict = {}  # float32-run records the float64 run is paired with, decision by decision
    clip16 = fixtures / "ref_clip_16k_stereo.wav"
    tensors = reference_goldens(tts, ref_audio, clip16, f32)
    tensors.update(decoder_goldens(tts, DECODER_FRAMES[name], gen))
    cp, cp_margin = code_predictor_goldens(tts, gen, f32)
    tensors.update(cp)
    cases = []
    for case in CASES[name]:
        case_tensors, info = case_goldens(tts, case, ref_audio, tensors["ref_codes"], f32)
        tensors.update(case_tensors)
        cases.append(info)
        print(name, json.dumps(info, ensure_ascii=False))
    tensors["tts_pad_embed"] = tts_pad(tts)
    fp64 = float64_run(folder, CASES[name], ref_audio, clip16, tensors, f32)
    agreement = fp64["codes_agree"]
    print(name, "float64 official run gives the same codes:", agreement)
    print(name, "float32 error of the goldens:", fp64["fp32_error"])
    print(name, "decision margins:", json.dumps(fp64["decision_margins"]))
    if not all(agreement.values()):
        raise RuntimeError(f"{name}: goldens sit within float32 rounding of a tie: {agreement}")
    thin = {
        kind: m["min_gap_over_2x_fp32_error"]
        for kind, m in fp64["decision_margins"].items()
        if m["min_gap_over_2x_fp32_error"] < MIN_DECISION_MARGIN
    }
    if thin:
        raise RuntimeError(f"{name}: a golden code is too close to a tie for other CPUs: {thin}")
    tensors.update({f"{key}_fp64": wav for key, wav in fp64["audio"].items()})
    out = fixtures / f"{name}.golden"
    out.mkdir(exist_ok=True)
    save_file(
        {k: v.contiguous() for k, v in tensors.items()},
        str(out / "goldens.safetensors"),
        metadata={"format": "pt"},
    )
    (out / "goldens.safetensors").chmod(0o644)
    meta = {
        "checkpoint": name,
        "sample_rate": 24000,
        "samples_per_frame": SAMPLES_PER_FRAME,
        "ref_frames": int(tensors["ref_codes"].shape[0]),
        "ref16_frames": int(tensors["ref16_codes"].shape[0]),
        "decoder_frames": DECODER_FRAMES[name],
        "decoder_wav": audio_stats(tensors["decoder_wav"]),
        "code_predictor_min_gap": round(cp_margin, 6),
        "fp64_codes_agree": agreement,
        "fp32_error": fp64["fp32_error"],
        "decision_margins": fp64["decision_margins"],
        "cases": cases,
    }
    (out / "cases.json").write_text(
        json.dumps(meta, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--fixtures", type=Path, default=REPO / "tests" / "fixtures")
    parser.add_argument("--only", choices=sorted(CASES), default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)  # fixed reduction order: rebuilds are byte-identical
    torch.manual_seed(0)
    for name in [args.only] if args.only else sorted(CASES):
        make(name, args.fixtures)


if __name__ == "__main__":
    main()
