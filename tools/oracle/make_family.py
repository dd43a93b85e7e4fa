"""Tiny CustomVoice / VoiceDesign checkpoints and their official goldens (run in .oracle-venv).

    PYTHONPATH=tools/oracle/stubs:tools/oracle .oracle-venv/bin/python \
        tools/oracle/make_family.py [--fixtures tests/fixtures] [--only qwen3-tiny-cv] [--threads 1]

Needs tests/fixtures/qwen3-tiny-a (build_fixtures.py) for the codec and the copied files.
Writes tests/fixtures/<name>/ (released layout: no speaker encoder, as the official class builds
for these types) and tests/fixtures/<name>.golden/{goldens.safetensors, cases.json}: for every
case of family_cases.py, the official greedy `generate_custom_voice(text, speaker, language,
instruct, non_streaming_mode=...)` or `generate_voice_design(text, instruct, language,
non_streaming_mode=...)` under oracle_hooks.Capture, then the same call in pure float64
(pure_fp64.py) for the goldens' own float32 error, the float64 audio and every decision's
distance from a tie (the build fails when a golden code sits too close to one; see
make_goldens.py MIN_DECISION_MARGIN). Goldens per case (H = talker hidden):

  <key>_codes (N, 16) int64, <key>_audio (N*1920,), <key>_audio_fp64 float64,
  <key>_prefill_embeds (P, H), <key>_trailing_text (L, H), <key>_prefill_logits (3072,),
  <key>_past_hidden (H,); and tts_pad_embed (H,).

It also records tiny-a's two Base cases (icl, xvec) with non_streaming_mode=True (the official
`generate_voice_clone(..., non_streaming_mode=True)` with tiny-a's golden float32 voice) in
tests/fixtures/qwen3-tiny-a.nonstream.golden/ (same keys; ICL audio with the reference cut).
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import torch
from build_fixtures import save_state
from build_talker import build_model
from family_cases import CASES, DIALECT_LANGUAGES, KINDS, SPEAKER_DIALECTS, SPEAKERS, SPECS
from fp64_check import _argmax_margin, _decode64, _max_abs, _summary
from make_goldens import MIN_DECISION_MARGIN, audio_stats, stop_reason
from oracle_hooks import Capture, greedy_margins, talker_choice_logits, tts_pad
from pure_fp64 import pure_float64
from qwen_tts import Qwen3TTSModel
from qwen_tts.inference.qwen3_tts_model import VoiceClonePromptItem
from safetensors.torch import load_file, save_file
from tiny_configs import COPIED_FILES, model_config, write_json

REPO = Path(__file__).resolve().parents[2]
CODEC_SOURCE = "qwen3-tiny-a"  # its speech_tokenizer/ files are copied as they are
F64 = torch.float64


def family_config(name: str) -> dict:
    cfg = model_config(SPECS[name])
    cfg["tts_model_type"] = KINDS[name]
    if KINDS[name] == "custom_voice":
        talker = cfg["talker_config"]
        talker["codec_language_id"].update(DIALECT_LANGUAGES)
        talker["spk_id"] = dict(SPEAKERS)
        talker["spk_is_dialect"] = dict(SPEAKER_DIALECTS)
    return cfg


def build_folder(name: str, fixtures: Path) -> Path:
    source, folder = fixtures / CODEC_SOURCE, fixtures / name
    if folder.exists():
        shutil.rmtree(folder)
    shutil.copytree(source / "speech_tokenizer", folder / "speech_tokenizer")
    for fname in COPIED_FILES:
        shutil.copyfile(source / fname, folder / fname)
    config = family_config(name)
    write_json(folder / "config.json", config)
    model = build_model(config, SPECS[name].seed)
    assert model.speaker_encoder is None  # the official builds none for these types
    save_state(model, folder / "model.safetensors", torch.bfloat16)
    return folder


def greedy_kwargs(case) -> dict:
    return dict(
        do_sample=False,
        subtalker_dosample=False,
        repetition_penalty=1.0,
        max_new_tokens=case.max_new_tokens,
    )


def official_call(tts, case):
    """The official wrapper call of `case` -> (wav, Captured)."""
    common = dict(
        language=case.language, non_streaming_mode=case.non_streaming_mode, **greedy_kwargs(case)
    )
    with Capture(tts) as rec:
        if isinstance(case, BaseCase):
            wavs, _sr = tts.generate_voice_clone(
                text=case.text, voice_clone_prompt=[case.prompt(tts.model.dtype)], **common
            )
        elif case.speaker is not None:
            wavs, _sr = tts.generate_custom_voice(
                text=case.text, speaker=case.speaker, instruct=case.instruct, **common
            )
        else:
            wavs, _sr = tts.generate_voice_design(
                text=case.text, instruct=case.instruct or "", **common
            )
    return wavs[0], rec


def case_goldens(tts, case) -> tuple[dict, dict, object]:
    wav, rec = official_call(tts, case)
    audio = torch.from_numpy(wav.copy())
    codes = rec.codes[0].long()
    assert torch.equal(rec.decode_codes[0][-codes.shape[0] :], codes)  # after any reference
    tensors = {
        f"{case.key}_codes": codes,
        f"{case.key}_audio": audio,
        f"{case.key}_prefill_embeds": rec.prefill_embeds[0].float(),
        f"{case.key}_trailing_text": rec.trailing_text[0].float(),
        f"{case.key}_prefill_logits": rec.talker_logits[0],
        f"{case.key}_past_hidden": rec.talker_hidden[0],
    }
    info = {
        "key": case.key,
        "text": case.text,
        "speaker": getattr(case, "speaker", None),
        "ref_text": getattr(case, "ref_text", None),
        "instruct": getattr(case, "instruct", None),
        "language": case.language,
        "non_streaming_mode": case.non_streaming_mode,
        "max_new_tokens": case.max_new_tokens,
        "frames": int(codes.shape[0]),
        "stop_reason": stop_reason(rec),
        "prefill_len": int(rec.prefill_embeds[0].shape[0]),
        "trailing_len": int(rec.trailing_text[0].shape[0]),
        "greedy_margins": {k: round(v, 6) for k, v in greedy_margins(rec).items()},
        "audio": audio_stats(audio),
        "generate_kwargs": greedy_kwargs(case),
    }
    return tensors, info, rec


@torch.no_grad()
def float64_run(folder: Path, cases, tensors: dict, f32: dict) -> dict:
    """The official calls again in pure float64: codes agreement, float32 error of every
    float golden, the float64 audio and every greedy decision's gap over its float32 error."""
    values, agree, margins = {}, {}, {"talker": [], "code_predictor": []}
    with pure_float64():
        tts = Qwen3TTSModel.from_pretrained(str(folder), dtype=F64)
        values["tts_pad_embed"] = tts_pad(tts)
        for case in cases:
            _wav, rec = official_call(tts, case)
            key, rec32 = case.key, f32[case.key]
            agree[f"{key}_codes"] = torch.equal(rec.codes[0].long(), tensors[f"{key}_codes"])
            if not agree[f"{key}_codes"]:
                continue
            full = _decode64(tts, rec.decode_codes[0].long())  # ICL: reference frames first
            values[f"{key}_audio"] = full[full.shape[0] - tensors[f"{key}_audio"].shape[0] :]
            values[f"{key}_prefill_embeds"] = rec.prefill_embeds[0]
            values[f"{key}_trailing_text"] = rec.trailing_text[0]
            values[f"{key}_prefill_logits"] = rec.talker_logits[0]
            values[f"{key}_past_hidden"] = rec.talker_hidden[0]
            pairs = zip(rec32.talker_logits, rec.talker_logits, strict=True)
            for step, (a, b) in enumerate(pairs):
                margins["talker"].append(
                    _argmax_margin(talker_choice_logits(a, step), talker_choice_logits(b, step))
                )
            for a, b in zip(rec32.cp_logits, rec.cp_logits, strict=True):
                margins["code_predictor"].append(_argmax_margin(a, b))
    return {
        "codes_agree": agree,
        "fp32_error": {k: float(f"{_max_abs(tensors[k], v):.4g}") for k, v in values.items()},
        "decision_margins": {k: _summary(v) for k, v in margins.items()},
        "audio": {k: v.to(F64).contiguous() for k, v in values.items() if k.endswith("_audio")},
    }


class BaseCase:
    """One of tiny-a's Base cases (tests/fixtures/qwen3-tiny-a.golden), with its golden
    float32 voice, in non_streaming_mode."""

    non_streaming_mode = True

    def __init__(self, info: dict, goldens: dict) -> None:
        self.key, self.text, self.language = info["key"], info["text"], info["language"]
        self.ref_text, self.max_new_tokens = info["ref_text"], info["max_new_tokens"]
        self._goldens = goldens

    def prompt(self, dtype: torch.dtype) -> VoiceClonePromptItem:
        icl = self.ref_text is not None
        return VoiceClonePromptItem(
            ref_code=self._goldens["ref_codes"] if icl else None,
            ref_spk_embedding=self._goldens["speaker_embedding"].to(dtype),
            x_vector_only_mode=not icl,
            icl_mode=icl,
            ref_text=self.ref_text,
        )


BASE_SOURCE = "qwen3-tiny-a"
BASE_GOLDENS = f"{BASE_SOURCE}.nonstream"  # tests/fixtures/<this>.golden


def base_cases(fixtures: Path) -> list[BaseCase]:
    source = fixtures / f"{BASE_SOURCE}.golden"
    goldens = load_file(str(source / "goldens.safetensors"))
    meta = json.loads((source / "cases.json").read_text(encoding="utf-8"))
    return [BaseCase(info, goldens) for info in meta["cases"]]


def make_goldens(name: str, fixtures: Path) -> None:
    cases_of = base_cases(fixtures) if name == BASE_GOLDENS else CASES[name]
    folder = fixtures / (BASE_SOURCE if name == BASE_GOLDENS else name)
    tts = Qwen3TTSModel.from_pretrained(str(folder), dtype=torch.float32)
    tensors, cases, f32 = {}, [], {}
    for case in cases_of:
        case_tensors, info, f32[case.key] = case_goldens(tts, case)
        tensors.update(case_tensors)
        cases.append(info)
        print(name, json.dumps(info, ensure_ascii=False))
    tensors["tts_pad_embed"] = tts_pad(tts)
    fp64 = float64_run(folder, cases_of, tensors, f32)
    print(name, "float64 codes agree:", fp64["codes_agree"])
    print(name, "decision margins:", json.dumps(fp64["decision_margins"]))
    if not all(fp64["codes_agree"].values()):
        raise RuntimeError(f"{name}: goldens sit within float32 rounding of a tie")
    thin = {
        k: m["min_gap_over_2x_fp32_error"]
        for k, m in fp64["decision_margins"].items()
        if m["min_gap_over_2x_fp32_error"] < MIN_DECISION_MARGIN
    }
    if thin:
        raise RuntimeError(f"{name}: a golden code is too close to a tie for other CPUs: {thin}")
    tensors.update({f"{key}_fp64": wav for key, wav in fp64["audio"].items()})
    out = fixtures / f"{name}.golden"
    out.mkdir(exist_ok=True)
    path = out / "goldens.safetensors"
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(path), metadata={"format": "pt"})
    path.chmod(0o644)
    meta = {
        "checkpoint": name,
        "tts_model_type": KINDS.get(name, "base"),
        "sample_rate": 24000,
        "samples_per_frame": 1920,
        "fp64_codes_agree": fp64["codes_agree"],
        "fp32_error": fp64["fp32_error"],
        "decision_margins": fp64["decision_margins"],
        "cases": cases,
    }
    text = json.dumps(meta, indent=2, ensure_ascii=False) + "\n"
    (out / "cases.json").write_text(text, encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--fixtures", type=Path, default=REPO / "tests" / "fixtures")
    parser.add_argument("--only", choices=sorted(SPECS), default=None)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    for name in [args.only] if args.only else sorted(SPECS):
        print("built", build_folder(name, args.fixtures))
        make_goldens(name, args.fixtures)
    if args.only is None:
        make_goldens(BASE_GOLDENS, args.fixtures)


if __name__ == "__main__":
    main()
