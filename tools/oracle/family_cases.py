"""The tiny CustomVoice and VoiceDesign checkpoints and the official calls recorded on them.

Both imitate the 1.7B releases (talker hidden 24 != code-predictor hidden 16, so
`small_to_mtp_projection` is in the file; VoiceDesign exists only at 1.7B and only the 1.7B
CustomVoice honours `instruct`). Their config.json is the released 0.6B-Base file shrunk as
tiny_configs.py does, with `tts_model_type` set and, for CustomVoice, a few preset speakers in
`talker_config.spk_id` (released ids), their `spk_is_dialect` entries, and the two dialect
language ids the released CustomVoice config adds. The codec is tiny-a's (same files).

Cases cover, per type, both prompt modes (`non_streaming_mode` True = the official default of
these types, False = text fed one token per frame) with and without `instruct`; the CustomVoice
ones also cover the dialect switch (a dialect speaker with language "auto" or "chinese" takes
the dialect's language id; with "english" it does not).
"""

from __future__ import annotations

from dataclasses import dataclass

from tiny_configs import TinySpec

TINY_CV = TinySpec(
    name="qwen3-tiny-cv",
    model_size="1b7",
    hidden=24,
    layers=2,
    heads=2,
    kv_heads=1,
    head_dim=8,
    intermediate=40,
    text_hidden=4,
    cp_hidden=16,
    cp_layers=1,
    cp_heads=4,
    cp_kv_heads=4,
    cp_head_dim=8,
    cp_intermediate=32,
    spk_channels=16,  # written to speaker_encoder_config only; no encoder is built
    decoder_sliding_window=72,  # tiny-a's (released) codec windows: the codec files are tiny-a's
    encoder_sliding_window=250,
    seed=2468,
)
TINY_VD = TinySpec(**{**TINY_CV.__dict__, "name": "qwen3-tiny-vd", "layers": 3, "seed": 1357})

KINDS = {TINY_CV.name: "custom_voice", TINY_VD.name: "voice_design"}
SPECS = {TINY_CV.name: TINY_CV, TINY_VD.name: TINY_VD}

# Released ids (spec section 1.2); a few speakers keep the fixture's config small.
SPEAKERS = {"serena": 3066, "dylan": 2878, "eric": 2875}
SPEAKER_DIALECTS = {"serena": False, "dylan": "beijing_dialect", "eric": "sichuan_dialect"}
DIALECT_LANGUAGES = {"beijing_dialect": 2074, "sichuan_dialect": 2062}


@dataclass(frozen=True)
class FamilyCase:
    key: str  # golden tensors are <key>_codes / <key>_audio / ...
    text: str
    language: str
    instruct: str | None  # None: no instruction (the official treats "" the same)
    non_streaming_mode: bool
    max_new_tokens: int
    speaker: str | None = None  # CustomVoice only


CASES = {
    TINY_CV.name: (
        FamilyCase(
            "plain_nonstream",
            "Preset voices need no reference.",
            "auto",
            None,
            True,
            16,
            speaker="serena",
        ),
        FamilyCase(
            "plain_stream",
            "Preset voices need no reference.",
            "english",
            None,
            False,
            16,
            speaker="dylan",
        ),
        FamilyCase(
            "instruct_nonstream",
            "Speak to me, old friend.",
            "auto",
            "Speak slowly, in a warm and calm voice.",
            True,
            16,
            speaker="dylan",
        ),
        FamilyCase(
            "instruct_stream",
            "今天天气很好，我们去公园散步吧。",
            "chinese",
            "用特别愤怒的语气说",
            False,
            16,
            speaker="eric",
        ),
    ),
    TINY_VD.name: (
        FamilyCase("plain_nonstream", "A voice designed from nothing.", "auto", None, True, 16),
        FamilyCase("plain_stream", "你好，这是一个测试。", "chinese", None, False, 16),
        FamilyCase(
            "instruct_nonstream",
            "Designed from a description.",
            "english",
            "A deep, gravelly male voice, slow and theatrical.",
            True,
            16,
        ),
        FamilyCase(
            "instruct_stream",
            "Designed from a description, fed as it comes.",
            "auto",
            "Young female voice, bright and fast, slightly breathy.",
            False,
            16,
        ),
    ),
}
