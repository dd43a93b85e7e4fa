"""Turbo T3's voice prefix (t3.py `voice_prefix`): the keys and values of a voice's prompt
positions are computed once and reused by every request of that voice. The prefill is then
[voice prefix | text + start from position 1 + P]; against the one whole pass of the official
it is held by the golden tests (tests/chatterbox/test_generate.py: tokens exact, logits within
the float bound). Here: a request after the prefix was kept gives the bits of the first one,
another voice does not hit it, the store stays bounded, and new weights drop it."""

from __future__ import annotations

import copy

import torch

from tts_core.models.chatterbox import quant
from tts_core.models.chatterbox.sampling import TurboSampling
from tts_core.models.chatterbox.t3 import VOICE_PREFIXES

from .conftest import shared_model


def _fresh_t3(folder):  # noqa: ANN001, ANN202
    """A copy of the shared model's T3 without the prefixes other tests left in it."""
    t3 = copy.deepcopy(shared_model(folder).t3)
    t3.forget_prefixes()
    return t3


def _logits(t3, voice, text: torch.Tensor) -> torch.Tensor:
    forced = torch.randint(0, 6561, (6,), generator=torch.Generator().manual_seed(2))
    seen: list[torch.Tensor] = []
    for _ in t3.draws(
        voice.speaker_emb,
        voice.t3_prompt_tokens,
        text,
        TurboSampling(),
        None,
        forced=forced,
        logits_seen=seen,
    ):
        pass
    return torch.cat(seen)


def _other_voice(voice):  # noqa: ANN001, ANN202
    other = copy.copy(voice)
    other.t3_prompt_tokens = voice.t3_prompt_tokens.flip(1)
    return other


def test_a_kept_prefix_gives_the_bits_of_its_first_computation(tiny_folder) -> None:
    t3 = _fresh_t3(tiny_folder)
    voice = shared_model(tiny_folder).builtin_voice
    text = torch.tensor([[5, 17, 42, 9]])
    computed = []
    original = t3.voice_embeds

    def counting(*args):  # noqa: ANN002, ANN202
        computed.append(1)
        return original(*args)

    t3.voice_embeds = counting
    first = _logits(t3, voice, text)
    again = _logits(t3, voice, torch.tensor([[5, 17, 42, 9]]))
    assert len(computed) == 1 and torch.equal(first, again)
    other = _logits(t3, _other_voice(voice), text)  # another prompt: computed, not reused
    assert len(computed) == 2 and not torch.equal(other, first)
    t3.forget_prefixes()
    assert torch.equal(_logits(t3, voice, text), first) and len(computed) == 3


def test_the_store_keeps_the_last_voices_only(tiny_folder) -> None:
    t3 = _fresh_t3(tiny_folder)
    voice = shared_model(tiny_folder).builtin_voice
    for shift in range(VOICE_PREFIXES + 3):
        tokens = torch.roll(voice.t3_prompt_tokens, shift, dims=1)
        t3.voice_prefix(voice.speaker_emb, tokens)
    assert len(t3._prefixes) == VOICE_PREFIXES


def test_new_weights_drop_the_kept_prefixes(tiny_folder) -> None:
    """quantize_t3 (int8 in place) forgets what the float weights computed: the int8 model's
    logits after a float request are those of a fresh int8 model."""
    model = shared_model(tiny_folder)
    voice, text = model.builtin_voice, torch.tensor([[5, 17, 42, 9]])
    t3 = _fresh_t3(tiny_folder)
    _logits(t3, voice, text)  # the float prefix kept
    quant.quantize_t3(t3, voice.speaker_emb, voice.t3_prompt_tokens, text)
    fresh = _fresh_t3(tiny_folder)
    quant.quantize_t3(fresh, voice.speaker_emb, voice.t3_prompt_tokens, text)
    assert quant.t3_weight_format(model) == "float32"
    assert torch.equal(_logits(t3, voice, text), _logits(fresh, voice, text))
