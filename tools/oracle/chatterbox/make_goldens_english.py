"""Goldens of the official chatterbox-tts 0.1.7 English model (`ChatterboxTTS`, tts.py) on the
tiny English checkpoints (build_tiny.py `build_english`).

    .chatterbox-venv/bin/python tools/oracle/chatterbox/make_goldens_english.py [--fixtures DIR]
        [--threads N] [--suffix S]

Writes `<fixtures>/<name>.golden.npz` for each `tiny_patch.ENGLISH_VARIANTS` folder. Every case
runs under its own `torch.manual_seed`, so each component golden stands alone:
* `text_ids_*`: EnTokenizer ids of punc_norm(text) (no start/stop ids: the caller adds them);
* conditioning (`t3_cond_*`): the built-in voice's T3 conditioning with exaggeration COND_EXAG:
  the perceiver output (`t3_perceiver`, (1, 32, H)) and the whole (1, 34, H) conditioning;
* T3 (`t3_*`): `T3.inference` as `generate` calls it (CFG 0.5, rows duplicated, start/stop text
  ids), seed T3_SEED: every drawn token (`t3_tokens`, EOS included: row 0 of the official's
  output) and the raw speech-head logits of both CFG rows for the first LOGIT_STEPS steps
  (`t3_logits` (steps, 2, V); step 0 = prefill), so a mismatch is told apart from a flip;
* flow (`flow_*`): `S3Token2Wav.flow_inference` (10 cosine Euler steps, CFG 0.7) of the
  built-in voice on fixed tokens, seed FLOW_SEED -> mel (1, 80, 2T) ... stored (80, 2T);
* HiFT (`hift_*`): `mel2wav.inference` of that mel, seed HIFT_SEED;
* whole generations, seeds GEN_SEED / KNOBS_SEED / CLONE_SEED: `gen_*` (built-in voice, defaults), `knobs_*` (built-in
  voice, KNOBS: other exaggeration, cfg_weight, temperature, min_p, top_p, penalty), `clone_*`
  (audio_prompt_path = the 7 s 44.1 kHz clip, which also records the voice it made): T3 tokens
  after drop_invalid_tokens and the < 6561 filter (`*_tokens`), every draw (`*_draws`), and the
  waveform before the Perth watermark (`*_wav_raw`) and after (`*_wav`);
* `fp32_error_<key>`: E = max |golden - official float64 rerun| on the same inputs with the
  same float32-drawn noise (T3 logits: fed the golden's tokens), as make_goldens.py does.
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path

import numpy as np
import soundfile as sf
import torch
import torch.nn.functional as F

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

import tiny_patch  # noqa: E402
from make_goldens import TOKENIZER_TEXTS, _float32_draws, _Recorder  # noqa: E402
from ref_clip import synth_voice  # noqa: E402

REPO = HERE.parents[2]
TEXTS = ["Hello there, this is a tiny test. Okay", "how are you today... fine; thanks - bye"]
T3_SEED, FLOW_SEED, HIFT_SEED, GEN_SEED = 11, 12, 13, 14
KNOBS_SEED, CLONE_SEED = 19, 16  # seeds whose tiny runs draw tens of tokens on a and b
LOGIT_STEPS = 16
COND_EXAG = 0.7
FLOW_TOKENS = [12, 4299, 600, 6560, 0, 3000, 3001, 77, 4299, 4299, 4299]
KNOBS = dict(
    exaggeration=0.9, cfg_weight=0.3, temperature=0.7, min_p=0.1, top_p=0.9, repetition_penalty=1.3
)
T3_DEFAULTS = dict(temperature=0.8, cfg_weight=0.5, repetition_penalty=1.2, min_p=0.05, top_p=1.0)


def _text_tokens(model, text: str, cfg_weight: float) -> torch.Tensor:
    """generate's T3 text input: punc_norm, EnTokenizer, rows duplicated for CFG, 255 / 0."""
    from chatterbox.tts import punc_norm

    tokens = model.tokenizer.text_to_tokens(punc_norm(text))
    if cfg_weight > 0.0:
        tokens = torch.cat([tokens, tokens], dim=0)
    return F.pad(F.pad(tokens, (1, 0), value=255), (0, 1), value=0)


def _cond(model, exaggeration: float):
    from chatterbox.models.t3.modules.cond_enc import T3Cond

    base = model.conds.t3
    return T3Cond(
        speaker_emb=base.speaker_emb.clone(),
        cond_prompt_speech_tokens=base.cond_prompt_speech_tokens.clone(),
        emotion_adv=exaggeration * torch.ones(1, 1, 1),
    )


def _t3_case(model) -> dict[str, np.ndarray]:
    logits: list[torch.Tensor] = []
    hook = model.t3.speech_head.register_forward_hook(
        lambda m, i, o: logits.append(o[:, -1].clone())
    )
    text = _text_tokens(model, TEXTS[0], 0.5)
    torch.manual_seed(T3_SEED)
    try:
        tokens = model.t3.inference(
            t3_cond=_cond(model, 0.5), text_tokens=text, max_new_tokens=1000, **T3_DEFAULTS
        )
    finally:
        hook.remove()
    return {
        "t3_text_tokens": text[0].numpy().astype(np.int64),  # with 255 ... 0
        "t3_tokens": tokens[0].numpy(),
        "t3_logits": torch.stack(logits)[:LOGIT_STEPS].numpy(),  # (steps, 2, V)
    }


def _cond_case(model) -> dict[str, np.ndarray]:
    t3 = model.t3
    cond = _cond(model, COND_EXAG)
    with torch.inference_mode():
        emb = t3.speech_emb(cond.cond_prompt_speech_tokens)
        emb = emb + t3.speech_pos_emb(cond.cond_prompt_speech_tokens)
        perceiver = t3.cond_enc.perceiver(emb)
        whole = t3.prepare_conditioning(cond)
    return {"t3_perceiver": perceiver[0].numpy(), "t3_cond": whole[0].numpy()}


def _generate(model, text: str, prefix: str, clip: Path | None, knobs: dict, seed: int) -> dict:
    recorder = _Recorder(model.watermarker)
    model.watermarker = recorder
    captured: dict = {}
    t3_inference, s3gen_inference = model.t3.inference, model.s3gen.inference

    def record_tokens(*args, **kwargs):
        captured["draws"] = t3_inference(*args, **kwargs)
        return captured["draws"]

    def record_s3gen(*args, **kwargs):
        captured["s3gen_rng"] = torch.get_rng_state()
        captured["tokens"] = kwargs["speech_tokens"].clone()
        return s3gen_inference(*args, **kwargs)

    model.t3.inference, model.s3gen.inference = record_tokens, record_s3gen
    torch.manual_seed(seed)
    try:
        wav = model.generate(text, audio_prompt_path=None if clip is None else str(clip), **knobs)
    finally:
        model.watermarker = recorder.real
        del model.t3.inference, model.s3gen.inference
    out = {
        f"{prefix}_draws": captured["draws"][0].numpy(),
        f"{prefix}_tokens": captured["tokens"].numpy(),
        f"{prefix}_wav_raw": recorder.raw,
        f"{prefix}_wav": wav[0].numpy(),
        f"_{prefix}_s3gen_rng": captured["s3gen_rng"],
    }
    if clip is not None:
        c = model.conds
        out[f"{prefix}_speaker_emb"] = c.t3.speaker_emb.numpy()
        out[f"{prefix}_prompt_tokens_t3"] = c.t3.cond_prompt_speech_tokens[0].numpy()
        out[f"{prefix}_prompt_token"] = c.gen["prompt_token"][0].numpy()
        out[f"{prefix}_prompt_feat"] = c.gen["prompt_feat"][0].numpy()
        out[f"{prefix}_embedding"] = c.gen["embedding"].detach().numpy()
    return out


def _double_cond(cond):
    cond = copy.deepcopy(cond)
    cond.speaker_emb = cond.speaker_emb.double()
    cond.emotion_adv = cond.emotion_adv.double()
    return cond


def _clone_voice_fp64(model, s3gen, clip: Path) -> dict[str, torch.Tensor]:
    """The cloned voice's float parts in float64 (prepare_conditionals' steps on the same
    samples: librosa load and resample stay float32, as the official's inputs): VoiceEncoder
    embedding, 24 kHz prompt mel, CAMPPlus x-vector."""
    import chatterbox.models.s3gen.utils.mel as melmod
    import librosa
    from chatterbox.models.s3gen.s3gen import get_resampler

    ref24, _ = librosa.load(str(clip), sr=24000)
    ref16 = librosa.resample(ref24, orig_sr=24000, target_sr=16000)
    head = torch.from_numpy(ref24[: 10 * 24000])[None]
    ref16_ta = get_resampler(24000, 16000, "cpu")(head.float())  # float32 as the official's
    ve = copy.deepcopy(model.ve).double()
    ve.forward = lambda x, _f=ve.forward: _f(x.double())
    out = {
        "clone_speaker_emb": torch.from_numpy(ve.embeds_from_wavs([ref16], sample_rate=16000)).mean(
            0, keepdim=True
        )
    }
    key = "8000_cpu"
    melmod.mel_spectrogram(head)  # fills the caches for the key
    basis, window = melmod.mel_basis[key], melmod.hann_window["cpu"]
    melmod.mel_basis[key], melmod.hann_window["cpu"] = basis.double(), window.double()
    out["clone_prompt_feat"] = melmod.mel_spectrogram(head.double()).transpose(1, 2)[0]
    melmod.mel_basis[key], melmod.hann_window["cpu"] = basis, window
    xvec = s3gen.speaker_encoder
    xvec.forward = lambda x, _f=xvec.forward: _f(x.double())
    out["clone_embedding"] = xvec.inference(ref16_ta)
    return out


def _errors(
    model, out: dict, states: dict, clone_gen: dict, folder: Path, clip: Path
) -> dict[str, float]:
    """E per float golden: the official modules in float64 on the same inputs and noise."""
    import chatterbox.models.s3gen.decoder as decoder
    from chatterbox.tts import Conditionals

    decoder.mask_to_bias = lambda mask, dtype: (1.0 - mask.to(dtype)) * -1.0e10
    s3gen = copy.deepcopy(model.s3gen).double()
    s3gen.mel2wav.stft_window = s3gen.mel2wav.stft_window.double()
    conds = Conditionals.load(folder / "conds.pt")
    gen64 = {
        k: v.double() if torch.is_tensor(v) and v.is_floating_point() else v
        for k, v in conds.gen.items()
    }
    clone64 = {
        k: v.double() if torch.is_tensor(v) and v.is_floating_point() else v
        for k, v in clone_gen.items()
    }
    t3 = copy.deepcopy(model.t3).double()
    fp64: dict[str, torch.Tensor] = {}
    torch.set_default_dtype(torch.float64)
    with _float32_draws(), torch.inference_mode():
        torch.manual_seed(FLOW_SEED)
        tokens = torch.from_numpy(out["flow_tokens"])
        fp64["flow_mel"] = s3gen.flow_inference(tokens, ref_dict=dict(gen64), finalize=True)[0]
        torch.manual_seed(HIFT_SEED)
        mel = torch.from_numpy(out["flow_mel"]).double()[None]
        fp64["hift_wav"] = s3gen.hift_inference(mel)[0][0]
        for prefix, ref in (("gen", gen64), ("knobs", gen64), ("clone", clone64)):
            torch.set_rng_state(states[prefix])
            speech = torch.from_numpy(out[f"{prefix}_tokens"])
            fp64[f"{prefix}_wav_raw"] = s3gen.inference(speech_tokens=speech, ref_dict=dict(ref))[
                0
            ][0]
        # conditioning and teacher-forced T3 logits
        cond = _double_cond(model.conds.t3)
        cond.emotion_adv = COND_EXAG * torch.ones(1, 1, 1, dtype=torch.float64)
        emb = t3.speech_emb(cond.cond_prompt_speech_tokens)
        emb = emb + t3.speech_pos_emb(cond.cond_prompt_speech_tokens)
        fp64["t3_perceiver"] = t3.cond_enc.perceiver(emb)[0]
        fp64["t3_cond"] = t3.prepare_conditioning(copy.deepcopy(cond))[0]
        cond = _double_cond(model.conds.t3)
        cond.emotion_adv = 0.5 * torch.ones(1, 1, 1, dtype=torch.float64)
        forced = iter(out["t3_tokens"].tolist())
        logits: list[torch.Tensor] = []
        hook = t3.speech_head.register_forward_hook(lambda m, i, o: logits.append(o[:, -1]))
        multinomial = torch.multinomial
        torch.multinomial = lambda probs, num_samples: torch.tensor([[next(forced)]])
        try:
            t3.inference(
                t3_cond=cond,
                text_tokens=torch.from_numpy(out["t3_text_tokens"])[None].repeat(2, 1),
                max_new_tokens=LOGIT_STEPS,
                **T3_DEFAULTS,
            )
        finally:
            torch.multinomial = multinomial
            hook.remove()
        fp64["t3_logits"] = torch.stack(logits)[:LOGIT_STEPS]
        fp64.update(_clone_voice_fp64(model, s3gen, clip))
    torch.set_default_dtype(torch.float32)
    errors = {}
    for key, value in fp64.items():
        exact = value.detach().numpy()
        golden = out[key].astype(np.float64)
        assert exact.shape == golden.shape, (key, exact.shape, golden.shape)
        errors[key] = float(np.abs(golden - exact).max())
    return errors


def goldens(folder: Path, clip: Path) -> dict[str, np.ndarray]:
    from chatterbox.tts import ChatterboxTTS, Conditionals, punc_norm

    tiny_patch.apply(tiny_patch.ENGLISH_VARIANTS[folder.name])
    model = ChatterboxTTS.from_local(folder, "cpu")
    out: dict = {}
    for i, text in enumerate(TEXTS + TOKENIZER_TEXTS):
        out[f"text_ids_{i}"] = np.array(model.tokenizer.encode(punc_norm(text)), dtype=np.int64)
    out.update(_cond_case(model))
    out.update(_t3_case(model))
    tokens = torch.tensor(FLOW_TOKENS)
    torch.manual_seed(FLOW_SEED)
    mel = model.s3gen.flow_inference(tokens, ref_dict=model.conds.gen, finalize=True)
    torch.manual_seed(HIFT_SEED)
    hift_wav, _ = model.s3gen.hift_inference(mel)
    out.update(flow_tokens=tokens.numpy(), flow_mel=mel[0].numpy(), hift_wav=hift_wav[0].numpy())
    out.update(_generate(model, TEXTS[0], "gen", None, {}, GEN_SEED))
    out.update(_generate(model, TEXTS[1], "knobs", None, KNOBS, KNOBS_SEED))
    out.update(_generate(model, TEXTS[1], "clone", clip, {}, CLONE_SEED))
    clone_gen = {k: v.clone() if torch.is_tensor(v) else v for k, v in model.conds.gen.items()}
    model.conds = Conditionals.load(folder / "conds.pt")
    states = {p: out.pop(f"_{p}_s3gen_rng") for p in ("gen", "knobs", "clone")}
    for key, value in _errors(model, out, states, clone_gen, folder, clip).items():
        out[f"fp32_error_{key}"] = np.array(value)
    out["meta_torch"] = np.array(torch.__version__)
    out["meta_threads"] = np.array(torch.get_num_threads())
    out["meta_seeds"] = np.array([T3_SEED, FLOW_SEED, HIFT_SEED, GEN_SEED, KNOBS_SEED, CLONE_SEED])
    out["meta_knobs"] = np.array([KNOBS[k] for k in sorted(KNOBS)])
    out["meta_knob_names"] = np.array(sorted(KNOBS))
    out["meta_cond_exaggeration"] = np.array(COND_EXAG)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--fixtures", type=Path, default=REPO / "tests/fixtures")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--suffix", default="")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    clip = args.fixtures / "chatterbox-ref-44k.wav"  # shared with the Turbo goldens
    if not clip.exists():
        sf.write(clip, synth_voice(44100, duration_s=7.0, seed=5), 44100, subtype="PCM_16")
    for name in sorted(tiny_patch.ENGLISH_VARIANTS):
        out = goldens(args.fixtures / name, clip)
        print({k: float(v) for k, v in out.items() if k.startswith("fp32_error")})
        path = args.fixtures / f"{name}.golden{args.suffix}.npz"
        np.savez_compressed(path, **out)
        print(
            f"{path}: t3 {len(out['t3_tokens'])} draws, gen {len(out['gen_tokens'])} tokens "
            f"{len(out['gen_wav_raw']) / 24000:.2f} s, knobs {len(out['knobs_tokens'])}, "
            f"clone {len(out['clone_tokens'])} tokens"
        )


if __name__ == "__main__":
    main()
