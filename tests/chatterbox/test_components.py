"""Each Chatterbox Turbo component against the official 0.1.7 on the tiny checkpoints: T3
(free-running tokens for a seed, teacher-forced logits), the S3Gen flow (tokens -> mel), HiFT
(mel -> wav), and the cloning front ends (24 kHz mel, sinc resampler, CAMPPlus, S3 tokenizer,
VoiceEncoder, text tokenizer). Bounds: conftest.py's error model unless stated."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from qwen3.conftest import U32

from tts_core.models.chatterbox.features import _sinc_kernel, prompt_mel, resample
from tts_core.models.chatterbox.sampling import TurboSampling
from tts_core.models.chatterbox.voice import ChatterboxVoice

from .conftest import check_fp32, shared_model

TEXTS_GOLDEN = [
    "Hello there, this is a tiny test. [chuckle] Okay",
    "how are you today?",
    "  the quick   brown fox\tjumps…  over: the dog — again – and again ,  ok",
    "“Quoted” and ‘single’ quotes[laugh][sigh] [clear throat]done",
    "Numbers 12, 345 and 6789! Really? Yes-",
    "Ünïcödé façade, naïve café; 日本語 and emoji 🙂",
    "",
    "[chuckle]",
]  # make_goldens.TEXTS + TOKENIZER_TEXTS, in order


def test_text_tokenizer(tiny_folder, goldens):
    tokenizer = shared_model(tiny_folder).tokenizer
    for i, text in enumerate(TEXTS_GOLDEN):
        assert tokenizer.encode(text) == goldens[f"text_ids_{i}"].tolist(), text


def test_t3_tokens_exact_and_logits(tiny_folder, goldens):
    model = shared_model(tiny_folder)
    voice = ChatterboxVoice.from_conds(tiny_folder / "conds.pt")
    ids = torch.from_numpy(goldens["t3_text_ids"])[None]
    generator = torch.Generator().manual_seed(int(goldens["meta_seeds"][0]))
    out = model.t3.generate(
        voice.speaker_emb, voice.t3_prompt_tokens, ids, TurboSampling(), generator
    )
    assert out.tokens.tolist() == goldens["t3_tokens"].tolist()
    # Teacher-forced (the golden's tokens and its final STOP fed in, no draws): every step's raw
    # logits, so a float mismatch shows even where it would not flip a draw.
    forced = torch.tensor([*goldens["t3_tokens"].tolist(), 6562])
    steps = len(goldens["t3_logits"])
    fed = model.t3.generate(
        voice.speaker_emb, voice.t3_prompt_tokens, ids, TurboSampling(), None, forced=forced[:steps]
    )
    check_fp32(torch.cat(fed.logits)[:steps], goldens, "t3_logits")


def test_flow_mel(tiny_folder, goldens):
    model = shared_model(tiny_folder)
    voice = ChatterboxVoice.from_conds(tiny_folder / "conds.pt")
    generator = torch.Generator().manual_seed(int(goldens["meta_seeds"][1]))
    tokens = torch.from_numpy(goldens["flow_tokens"])[None]
    mel = model.flow.inference(
        tokens, voice.prompt_token, voice.prompt_feat, voice.embedding, generator
    )
    check_fp32(mel[0], goldens, "flow_mel")


def test_hift_wav(tiny_folder, goldens):
    model = shared_model(tiny_folder)
    generator = torch.Generator().manual_seed(int(goldens["meta_seeds"][2]))
    wav = model.hift.inference(torch.from_numpy(goldens["flow_mel"])[None], generator)
    check_fp32(wav[0], goldens, "hift_wav")


def test_prompt_mel(goldens):
    ref24 = torch.from_numpy(goldens["ref_24k"][: 10 * 24000])[None]
    check_fp32(prompt_mel(ref24)[0], goldens, "ref_mel")


def test_sinc_resampler(goldens):
    """torchaudio's Resample(24000, 16000). Bound: each output is a dot product of K kernel taps
    with the input, |error| <= gamma_K sum |k_i x_i| <= K u32 max|x| sum|k| (Higham's dot-product
    bound, either summation order), for ours and for the golden: twice that."""
    ref24 = torch.from_numpy(goldens["ref_24k"][: 10 * 24000])
    ours = resample(ref24[None], 24000, 16000)[0].double().numpy()
    kernel, _ = _sinc_kernel(3, 2)
    taps = kernel.shape[-1]
    bound = 2 * taps * U32 * float(ref24.abs().max()) * float(kernel.abs().sum(-1).max())
    assert ours.shape == goldens["ref_16k_ta"].shape
    assert np.abs(ours - goldens["ref_16k_ta"]).max() <= bound


def test_campplus(tiny_folder, goldens):
    campplus = shared_model(tiny_folder)._front_end()[2]
    check_fp32(campplus(torch.from_numpy(goldens["ref_16k_ta"])), goldens, "xvector")


def test_s3_tokenizer_exact(tiny_folder, goldens):
    tokenizer = shared_model(tiny_folder)._front_end()[1]
    assert (
        tokenizer(torch.from_numpy(goldens["ref_16k_ta"]))[0].tolist()
        == goldens["s3_tokens"].tolist()
    )
    head = torch.from_numpy(goldens["ref_16k"][: 15 * 16000])
    assert tokenizer(head, max_tokens=375)[0].tolist() == goldens["s3_tokens_t3"].tolist()
    assert tokenizer(head, max_tokens=20).shape == (1, 20)


def test_voice_encoder(tiny_folder, goldens):
    ve = shared_model(tiny_folder)._front_end()[0]
    check_fp32(ve.embed(goldens["ref_16k"]), goldens, "ve_embed")


@pytest.mark.parametrize("key", ["flow_mel", "hift_wav", "gen_wav_raw", "t3_logits"])
def test_goldens_carry_their_error(goldens, key):
    """The oracle's float64 rerun happened (E recorded, nonzero: the float32 golden differs
    from the float64 one; a zero would mean the rerun was float32 and the bound meaningless)."""
    assert 0.0 < float(goldens[f"fp32_error_{key}"]) < 1e-3
