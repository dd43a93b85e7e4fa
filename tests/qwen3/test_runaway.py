"""A talker that never emits EOS is stopped by the text-length frame cap."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from safetensors.torch import load_file, save_file

import tts_core
from tts_core.models.qwen3_tts.decode_settings import DecodeSettings, length_cap_frames
from tts_core.models.qwen3_tts.sampling import SamplingParams

from .conftest import fixture_path, shared_model

EOS = 2150


@pytest.fixture(scope="module")
def no_eos_model(tmp_path_factory: pytest.TempPathFactory):
    """tiny-a with the EOS row of codec_head zeroed: its logit is 0 while the best of the 2048
    audio logits is positive, so greedy decoding never picks EOS."""
    source = fixture_path("qwen3-tiny-a")
    folder = tmp_path_factory.mktemp("no-eos")
    for item in source.iterdir():
        if item.name != "model.safetensors":
            (folder / item.name).symlink_to(item)
    state = load_file(str(source / "model.safetensors"))
    state["talker.codec_head.weight"][EOS] = 0.0
    save_file(state, str(folder / "model.safetensors"))
    assert not (folder / "model.safetensors").is_symlink()
    return tts_core.load_model(folder)


def _voice(model):
    return tts_core.Voice(speaker_embedding=torch.ones(model.config.talker.stack.hidden_size))


def test_length_cap_stops_a_runaway_talker(no_eos_model) -> None:
    text = "Hi."
    tokens = len(no_eos_model.text_tokenizer.encode(text))
    cap = length_cap_frames(tokens)
    chunks = list(
        no_eos_model.stream(
            text, _voice(no_eos_model), greedy=True, max_new_tokens=10_000, chunk_frames=25
        )
    )
    assert sum(chunk.frames for chunk in chunks) == cap
    assert [chunk.final for chunk in chunks][-2:] == [False, True]
    assert chunks[-1].stop_reason == "length_cap"
    codes = torch.cat([chunk.codes for chunk in chunks])
    assert int(codes[:, 0].max()) < 2048


def test_max_new_tokens_wins_when_smaller(no_eos_model) -> None:
    short = no_eos_model.generate("Hi.", _voice(no_eos_model), greedy=True, max_new_tokens=6)
    assert short.stop_reason == "max_new_tokens" and short.codes.shape[0] == 5


def test_frame_limit_and_its_reason() -> None:
    params = SamplingParams(do_sample=False, temperature=1.0, top_k=0, top_p=1.0)
    settings = DecodeSettings(params, params, max_new_tokens=100, length_cap=40)
    assert settings.frame_limit() == (40, "length_cap")
    assert replace(settings, length_cap=None).frame_limit() == (99, "max_new_tokens")
    assert replace(settings, max_new_tokens=30).frame_limit() == (29, "max_new_tokens")


# A slow speaker: half the mean syllable rate of read speech measured by Pellegrino, Coupe and
# Marsico, "A cross-language perspective on speech information rate", Language 87(3), 2011
# (syllables per second). Languages without a figure take the slowest one, Mandarin's.
MEAN_SYLLABLES_PER_S = {
    "english": 6.19,
    "french": 7.18,
    "german": 5.97,
    "italian": 6.99,
    "japanese": 7.84,
    "chinese": 5.18,
    "spanish": 7.82,
}
# (language, text, syllables counted by hand; morae for Japanese): ordinary sentences and the
# hard cases of a per-token cap: long words (3 syllables a token), numbers, Chinese words that
# are one token each
SPOKEN = [
    ("english", "The quick brown fox jumps over the lazy dog near the river bank.", 16),
    ("english", "Internationalization and telecommunications infrastructure modernization.", 25),
    (
        "english",
        "Unfortunately, the organization's administrative responsibilities were "
        "considerably underestimated.",
        34,
    ),
    ("english", "In 2026, 3.14 times 12 is 37.68.", 20),
    ("chinese", "我们今天一起去北京大学图书馆看书，然后在附近的餐厅吃晚饭。", 27),
    ("chinese", "中华人民共和国是一个历史悠久的国家，经济发展非常迅速。", 25),
    ("japanese", "今日はとても良い天気ですね。一緒に散歩しましょう。", 25),
    ("korean", "오늘은 날씨가 정말 좋네요. 같이 산책하러 갈까요?", 20),
    ("german", "Der schnelle braune Fuchs springt über den faulen Hund am Flussufer.", 17),
    ("french", "Le renard brun rapide saute par-dessus le chien paresseux.", 15),
    ("russian", "Быстрая коричневая лиса прыгает через ленивую собаку.", 22),
    ("spanish", "El rápido zorro marrón salta sobre el perro perezoso.", 19),
    ("italian", "La volpe marrone veloce salta sopra il cane pigro.", 18),
    ("portuguese", "A rápida raposa marrom pula sobre o cão preguiçoso.", 19),
]


def test_the_length_cap_leaves_room_for_slow_speech() -> None:
    """The cap is for a talker that never stops, never for real speech: each text, spoken at
    half its language's mean rate, ends inside the cap of the request `plan` makes for it (the
    real tokenizer and prompt); and only the target text counts, not an ICL transcript."""
    from .conftest import golden_voice, load_goldens

    model = shared_model(fixture_path("qwen3-tiny-a"))
    codec = model.speech_tokenizer
    frames_per_s = codec.sample_rate / codec.samples_per_frame  # 12.5
    xvec, icl = (golden_voice(load_goldens("qwen3-tiny-a"), mode) for mode in ("xvec", "icl"))
    for language, text, syllables in SPOKEN:
        cap = model.plan(text, xvec, language)[1].length_cap
        slow_s = syllables / (MEAN_SYLLABLES_PER_S.get(language, 5.18) / 2)
        assert cap / frames_per_s >= slow_s, (text, cap, slow_s)
        assert model.plan(text, icl, language)[1].length_cap == cap, text
