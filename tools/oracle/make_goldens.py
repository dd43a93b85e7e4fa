"""Golden outputs of the official qwen-tts for each tiny checkpoint (run in .oracle-venv).

    PYTHONPATH=tools/oracle/stubs:tools/oracle .oracle-venv/bin/python \
        tools/oracle/make_goldens.py [--fixtures tests/fixtures] [--only qwen3-tiny-a]

Writes tests/fixtures/<name>.golden/{goldens.safetensors, cases.json}; the schema is in
tests/fixtures/README.md. Everything runs on CPU in float32 through the official
`Qwen3TTSModel.from_pretrained(folder, dtype=torch.float32)`.
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
from fp64_check import fp64_agreement
from oracle_hooks import EOS, greedy_margins, talker_choice_logits, top2_gap
from qwen_tts import Qwen3TTSModel
from qwen_tts.core.models.modeling_qwen3_tts import mel_spectrogram
from safetensors.torch import save_file

REPO = Path(__file__).resolve().parents[2]
SAMPLES_PER_FRAME = 1920
DECODER_FRAMES = {"qwen3-tiny-a": 80, "qwen3-tiny-b": 40}  # > each decoder sliding window
GOLDEN_SEED = 31337


def official_mel(audio: np.ndarray) -> torch.Tensor:
    """(F, 128) log-mel exactly as extract_speaker_embedding computes it."""
    mel = mel_spectrogram(
        torch.from_numpy(audio).unsqueeze(0),
        n_fft=1024,
        num_mels=128,
        sampling_rate=24000,
        hop_size=256,
        win_size=1024,
        fmin=0,
        fmax=12000,
    )
    return mel[0].T.contiguous()


def reference_goldens(tts, ref_audio: np.ndarray, clip16_path: Path) -> dict:
    item = tts.create_voice_clone_prompt(ref_audio=(ref_audio, 24000), ref_text="x")[0]
    # A stereo (audio, sr) tuple crashes the official wrapper (it assigns into the tuple), so
    # the 16 kHz stereo clip goes in as a path: librosa.load(mono=True), then librosa.resample.
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
def code_predictor_goldens(tts, gen: torch.Generator) -> tuple[dict, float]:
    talker = tts.model.talker
    hidden = torch.randn(talker.config.hidden_size, generator=gen)
    c0 = torch.randint(0, 2048, (1,), generator=gen)
    logits = []
    hooks = [
        h.register_forward_hook(lambda _m, _i, out: logits.append(out[0, -1].clone()))
        for h in talker.code_predictor.lm_head
    ]
    embeds = torch.cat([hidden[None, None], talker.get_input_embeddings()(c0[None])], dim=1)
    result = talker.code_predictor.generate(
        inputs_embeds=embeds, max_new_tokens=15, do_sample=False, return_dict_in_generate=True
    )
    for h in hooks:
        h.remove()
    margin = min(top2_gap(lg) for lg in logits)
    return {"cp_past_hidden": hidden, "cp_c0": c0, "cp_codes": result.sequences[0].long()}, margin


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


def case_goldens(tts, case, ref_audio, ref_codes) -> tuple[dict, dict]:
    audio, rec = run_case(tts, case, ref_audio)
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
    tensors = reference_goldens(tts, ref_audio, fixtures / "ref_clip_16k_stereo.wav")
    tensors.update(decoder_goldens(tts, DECODER_FRAMES[name], gen))
    cp, cp_margin = code_predictor_goldens(tts, gen)
    tensors.update(cp)
    cases = []
    for case in CASES[name]:
        case_tensors, info = case_goldens(tts, case, ref_audio, tensors["ref_codes"])
        tensors.update(case_tensors)
        cases.append(info)
        print(name, json.dumps(info, ensure_ascii=False))
    tensors["tts_pad_embed"] = _tts_pad(tts)
    clip16 = fixtures / "ref_clip_16k_stereo.wav"
    agreement = fp64_agreement(folder, CASES[name], ref_audio, clip16, tensors)
    print(name, "float64 official run gives the same codes:", agreement)
    if not all(agreement.values()):
        raise RuntimeError(f"{name}: goldens sit within float32 rounding of a tie: {agreement}")
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
        "cases": cases,
    }
    (out / "cases.json").write_text(
        json.dumps(meta, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
    )


@torch.no_grad()
def _tts_pad(tts) -> torch.Tensor:
    talker, cfg = tts.model.talker, tts.model.config
    ids = torch.tensor([[cfg.tts_pad_token_id]])
    return talker.text_projection(talker.get_text_embeddings()(ids))[0, 0].float()


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
