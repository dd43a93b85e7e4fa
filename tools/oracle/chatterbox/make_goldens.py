"""Goldens of the official chatterbox-tts 0.1.7 on the tiny Turbo checkpoints.

    .chatterbox-venv/bin/python tools/oracle/chatterbox/make_goldens.py [--fixtures DIR] [--threads N]

Writes `<fixtures>/<name>.golden.npz` next to each `<fixtures>/<name>/` (build_tiny.py). Every
case runs under its own `torch.manual_seed`, so each component golden stands alone:
* `text_ids_*`: the tokenizer's ids for TEXTS (punc_norm applied first);
* T3 (`t3_*`): the built-in voice's prompt, free-running tokens for seed T3_SEED (EOS included)
  and the raw speech-head logits of the first LOGIT_STEPS steps of that very run (prefill's last
  position, then one per step), so a mismatch can be told apart from a flipped draw;
* flow (`flow_*`): `S3Token2Wav.flow_inference` (meanflow, 2 steps) of the built-in voice on
  fixed tokens for seed FLOW_SEED -> mel (1, 80, 2T);
* HiFT (`hift_*`): `mel2wav.inference` of that mel for seed HIFT_SEED -> wav before trim_fade;
* front ends on a 7.0 s 44.1 kHz clip loaded as the official loads it (librosa, 24 kHz): mel
  (`ref_mel`), VoiceEncoder (`ve_embed`), S3 tokenizer (`s3_tokens`, `s3_tokens_t3`),
  CAMPPlus (`xvector`), with their inputs (`ref_24k`, `ref_16k`, `ref_16k_ta`);
* whole generations (`gen_*`, `clone_*`): `generate(text)` with the built-in voice and with the
  clip, seed GEN_SEED: T3 tokens, the waveform before the Perth watermark (`*_wav_raw`) and
  after (`*_wav`).
`meta_*` records the torch version and thread count (reductions differ by ~2e-7 between thread
counts; see oracle-notes.md).
"""

from __future__ import annotations

import argparse
import copy
import sys
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import soundfile as sf
import torch

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

import tiny_patch  # noqa: E402
from chatterbox.tts_turbo import Conditionals  # noqa: E402
from ref_clip import synth_voice  # noqa: E402

REPO = HERE.parents[2]
TEXTS = ["Hello there, this is a tiny test. [chuckle] Okay", "how are you today?"]
# Tokenizer-only cases: punc_norm's replacements, tags, digits, non-ASCII, spacing, empty.
TOKENIZER_TEXTS = [
    "  the quick   brown fox\tjumps…  over: the dog — again – and again ,  ok",
    "“Quoted” and ‘single’ quotes[laugh][sigh] [clear throat]done",
    "Numbers 12, 345 and 6789! Really? Yes-",
    "Ünïcödé façade, naïve café; 日本語 and emoji 🙂",
    "",
    "[chuckle]",
]
T3_SEED, FLOW_SEED, HIFT_SEED, GEN_SEED = 11, 12, 13, 14
LOGIT_STEPS = 64
FLOW_TOKENS = [12, 4299, 600, 6560, 0, 3000, 3001, 77, 4299, 4299, 4299]


class _Recorder:
    """Stand-in watermarker: records the pre-watermark wav, then applies the real one."""

    def __init__(self, real) -> None:
        self.real, self.raw = real, None

    def apply_watermark(self, wav, sample_rate):
        self.raw = np.array(wav, dtype=np.float32)
        return self.real.apply_watermark(wav, sample_rate=sample_rate)


def _t3_case(model, text: str) -> dict[str, np.ndarray]:
    from chatterbox.tts_turbo import punc_norm

    ids = model.tokenizer(punc_norm(text), return_tensors="pt").input_ids
    logits: list[torch.Tensor] = []
    head = model.t3.speech_head
    hook = head.register_forward_hook(lambda m, i, o: logits.append(o[:, -1].clone()))
    torch.manual_seed(T3_SEED)
    try:
        tokens = model.t3.inference_turbo(model.conds.t3, ids)
    finally:
        hook.remove()
    return {
        "t3_text_ids": ids[0].numpy(),
        "t3_tokens": tokens[0].numpy(),  # EOS dropped by inference_turbo
        # (steps, 6563), step 0 = prefill; the first LOGIT_STEPS only (file size)
        "t3_logits": torch.cat(logits)[:LOGIT_STEPS].numpy(),
    }


def _front_ends(model, clip: Path) -> dict[str, np.ndarray]:
    import librosa
    from chatterbox.models.s3gen.s3gen import get_resampler

    s3gen = model.s3gen
    ref24, _ = librosa.load(str(clip), sr=24000)  # as prepare_conditionals loads it
    ref16 = librosa.resample(ref24, orig_sr=24000, target_sr=16000)
    ref24_t = torch.from_numpy(ref24[: 10 * 24000])[None]
    ref16_ta = get_resampler(24000, 16000, "cpu")(ref24_t)
    with torch.inference_mode():
        mel = s3gen.mel_extractor(ref24_t).transpose(1, 2)
        xvec = s3gen.speaker_encoder.inference(ref16_ta)
        tokens, _ = s3gen.tokenizer(ref16_ta.float())
        tokens_t3, _ = s3gen.tokenizer.forward([ref16[: 15 * 16000]], max_len=375)
    ve = model.ve.embeds_from_wavs([ref16], sample_rate=16000)
    return {
        "ref_24k": ref24,
        "ref_16k": ref16,
        "ref_16k_ta": ref16_ta[0].numpy(),
        "ref_mel": mel[0].numpy(),  # (T, 80)
        "xvector": xvec.detach().numpy(),
        "s3_tokens": tokens[0].numpy(),
        "s3_tokens_t3": tokens_t3[0].numpy(),
        "ve_embed": ve,  # (partials-mean) (1, 256)
    }


def _generate(model, text: str, prefix: str, clip: Path | None) -> dict[str, np.ndarray]:
    recorder = _Recorder(model.watermarker)
    model.watermarker = recorder
    captured: dict[str, torch.Tensor] = {}
    t3_inference = model.t3.inference_turbo
    s3gen_inference = model.s3gen.inference

    def record_state(*args, **kwargs):
        captured["s3gen_rng"] = torch.get_rng_state()
        return s3gen_inference(*args, **kwargs)

    model.s3gen.inference = record_state

    def record_tokens(*args, **kwargs):
        captured["tokens"] = t3_inference(*args, **kwargs)
        return captured["tokens"]

    model.t3.inference_turbo = record_tokens
    torch.manual_seed(GEN_SEED)
    try:
        wav = model.generate(text, audio_prompt_path=None if clip is None else str(clip))
    finally:
        model.watermarker = recorder.real
        del model.t3.inference_turbo, model.s3gen.inference
    out = {
        f"{prefix}_tokens": captured["tokens"][0].numpy(),
        f"{prefix}_wav_raw": recorder.raw,
        f"{prefix}_wav": wav[0].numpy(),
        f"_{prefix}_s3gen_rng": captured["s3gen_rng"],
    }
    if clip is not None:  # the voice the clip made (model.conds was replaced by it)
        c = model.conds
        out[f"{prefix}_speaker_emb"] = c.t3.speaker_emb.numpy()
        out[f"{prefix}_prompt_tokens_t3"] = c.t3.cond_prompt_speech_tokens[0].numpy()
        out[f"{prefix}_prompt_token"] = c.gen["prompt_token"][0].numpy()
        out[f"{prefix}_prompt_feat"] = c.gen["prompt_feat"][0].numpy()
        out[f"{prefix}_embedding"] = c.gen["embedding"].detach().numpy()
    return out


@contextmanager
def _float32_draws():
    """torch.randn / randn_like / rand draw float32 (the values a float32 run gets) and cast to
    the requested dtype, so a float64 run sees the very same noise."""
    randn, randn_like, rand = torch.randn, torch.randn_like, torch.rand

    def draw(fn, *shape, dtype=None, **kwargs):
        return fn(*shape, dtype=torch.float32, **kwargs).to(dtype or torch.float32)

    torch.randn = lambda *a, dtype=None, **k: draw(randn, *a, dtype=dtype, **k)
    torch.rand = lambda *a, dtype=None, **k: draw(rand, *a, dtype=dtype, **k)
    torch.randn_like = lambda x, **k: randn(x.shape, dtype=torch.float32).to(x)
    try:
        yield
    finally:
        torch.randn, torch.randn_like, torch.rand = randn, randn_like, rand


def _t3_logits_fp64(model, out: dict[str, np.ndarray]) -> torch.Tensor:
    """The official T3 in float64 fed the golden's tokens (its draws replaced by them): the
    speech-head logits of the first LOGIT_STEPS steps."""
    t3 = copy.deepcopy(model.t3).double()
    cond = copy.deepcopy(Conditionals.load(out["_folder"] / "conds.pt").t3)
    cond.speaker_emb = cond.speaker_emb.double()
    forced = iter([*out["t3_tokens"].tolist(), 6562])
    logits: list[torch.Tensor] = []
    hook = t3.speech_head.register_forward_hook(lambda m, i, o: logits.append(o[:, -1].clone()))
    multinomial = torch.multinomial
    torch.multinomial = lambda probs, num_samples: torch.tensor([[next(forced)]])
    try:
        t3.inference_turbo(cond, torch.from_numpy(out["t3_text_ids"])[None])
    finally:
        torch.multinomial = multinomial
        hook.remove()
    return torch.cat(logits)[:LOGIT_STEPS]


def _errors(
    model, out: dict[str, np.ndarray], states: dict[str, torch.Tensor], clone_gen: dict
) -> dict[str, float]:
    """E = max |golden_fp32 - official_fp64| per float golden: the official modules in float64
    on the same inputs and the same (float32-drawn) noise. The tests' error model scales it."""
    import chatterbox.models.s3gen.decoder as decoder
    import chatterbox.models.s3gen.utils.mel as melmod
    from chatterbox.models.s3gen.const import S3GEN_SIL

    # decoder.mask_to_bias asserts a float32/16 dtype; the same formula in float64:
    decoder.mask_to_bias = lambda mask, dtype: (1.0 - mask.to(dtype)) * -1.0e10

    s3gen = copy.deepcopy(model.s3gen).double()
    s3gen.mel2wav.stft_window = s3gen.mel2wav.stft_window.double()
    gen64 = {
        k: v.double() if torch.is_tensor(v) else v
        for k, v in Conditionals.load(out["_folder"] / "conds.pt").gen.items()
    }
    fp64: dict[str, np.ndarray] = {}
    # Default dtype float64: tensors the official creates without a dtype (HiFT's SineGen
    # harmonics, Uniform's bounds, mel tables) are float64 too, so no float32 step remains.
    torch.set_default_dtype(torch.float64)
    with _float32_draws(), torch.inference_mode():
        torch.manual_seed(FLOW_SEED)
        tokens = torch.from_numpy(out["flow_tokens"])
        fp64["flow_mel"] = s3gen.flow_inference(
            tokens, ref_dict=dict(gen64), n_cfm_timesteps=2, finalize=True
        )[0]
        torch.manual_seed(HIFT_SEED)
        fp64["hift_wav"] = s3gen.hift_inference(torch.from_numpy(out["flow_mel"]).double()[None])[
            0
        ][0]
        clone64 = {k: v.double() if torch.is_tensor(v) else v for k, v in clone_gen.items()}
        for prefix, ref in (("gen", gen64), ("clone", clone64)):
            torch.set_rng_state(states[prefix])  # the generator as the float32 S3Gen found it
            speech = torch.from_numpy(out[f"{prefix}_tokens"])
            speech = torch.cat([speech[speech < 6561], torch.tensor([S3GEN_SIL] * 3)])
            wav = s3gen.inference(speech, ref_dict=dict(ref), n_cfm_timesteps=2)[0][0]
            fp64[f"{prefix}_wav_raw"] = wav
        key = "8000_cpu"
        basis, window = melmod.mel_basis[key], melmod.hann_window["cpu"]
        melmod.mel_basis[key], melmod.hann_window["cpu"] = basis.double(), window.double()
        ref24 = torch.from_numpy(out["ref_24k"][: 10 * 24000]).double()[None]
        fp64["ref_mel"] = melmod.mel_spectrogram(ref24).transpose(1, 2)[0]
        melmod.mel_basis[key], melmod.hann_window["cpu"] = basis, window
        xvec = s3gen.speaker_encoder  # its features are float32 by construction: cast them
        xvec.forward = lambda x, _f=xvec.forward: _f(x.double())
        fp64["xvector"] = xvec.inference(torch.from_numpy(out["ref_16k_ta"])[None])
        fp64["t3_logits"] = _t3_logits_fp64(model, out)
        ve = copy.deepcopy(model.ve).double()
        ve.forward = lambda x, _f=ve.forward: _f(x.double())
        fp64["ve_embed"] = ve.embeds_from_wavs([out["ref_16k"]], sample_rate=16000)
    torch.set_default_dtype(torch.float32)
    errors = {}
    for key, value in fp64.items():
        exact = value.detach().numpy() if torch.is_tensor(value) else np.asarray(value)
        golden = out[key].astype(np.float64)
        assert exact.shape == golden.shape, (key, exact.shape, golden.shape)
        errors[key] = float(np.abs(golden - exact).max())
    return errors


def goldens(folder: Path, clip: Path) -> dict[str, np.ndarray]:
    from chatterbox.tts_turbo import ChatterboxTurboTTS, punc_norm

    tiny_patch.apply(tiny_patch.VARIANTS[folder.name])
    model = ChatterboxTurboTTS.from_local(folder, "cpu")
    out: dict[str, np.ndarray] = {}
    for i, text in enumerate(TEXTS + TOKENIZER_TEXTS):
        out[f"text_ids_{i}"] = (
            model.tokenizer(punc_norm(text), return_tensors="pt").input_ids[0].numpy()
        )
    out.update(_t3_case(model, TEXTS[0]))
    tokens = torch.tensor(FLOW_TOKENS)
    torch.manual_seed(FLOW_SEED)
    mel = model.s3gen.flow_inference(
        tokens, ref_dict=model.conds.gen, n_cfm_timesteps=2, finalize=True
    )
    torch.manual_seed(HIFT_SEED)
    hift_wav, _ = model.s3gen.hift_inference(mel)
    out.update(flow_tokens=tokens.numpy(), flow_mel=mel[0].numpy(), hift_wav=hift_wav[0].numpy())
    out.update(_front_ends(model, clip))
    out.update(_generate(model, TEXTS[0], "gen", None))
    out.update(_generate(model, TEXTS[1], "clone", clip))
    clone_gen = {k: v.clone() if torch.is_tensor(v) else v for k, v in model.conds.gen.items()}
    model.conds = Conditionals.load(folder / "conds.pt")
    out["_folder"] = folder
    states = {"gen": out.pop("_gen_s3gen_rng"), "clone": out.pop("_clone_s3gen_rng")}
    errors = _errors(model, out, states, clone_gen)
    del out["_folder"]
    for key, value in errors.items():
        out[f"fp32_error_{key}"] = np.array(value)
    out["meta_torch"] = np.array(torch.__version__)
    out["meta_threads"] = np.array(torch.get_num_threads())
    out["meta_seeds"] = np.array([T3_SEED, FLOW_SEED, HIFT_SEED, GEN_SEED])
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--fixtures", type=Path, default=REPO / "tests/fixtures")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--suffix", default="")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    clip = args.fixtures / "chatterbox-ref-44k.wav"  # 7 s at 44.1 kHz: resampled on load
    if not clip.exists():
        sf.write(clip, synth_voice(44100, duration_s=7.0, seed=5), 44100, subtype="PCM_16")
    for name in sorted(tiny_patch.VARIANTS):
        out = goldens(args.fixtures / name, clip)
        print({k: float(v) for k, v in out.items() if k.startswith("fp32_error")})
        path = args.fixtures / f"{name}.golden{args.suffix}.npz"
        np.savez_compressed(path, **out)
        print(
            f"{path}: t3 {len(out['t3_tokens'])} tokens, gen {len(out['gen_tokens'])} tokens "
            f"{len(out['gen_wav_raw']) / 24000:.2f} s, clone {len(out['clone_tokens'])} tokens"
        )


if __name__ == "__main__":
    main()
