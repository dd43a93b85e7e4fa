"""Voice-clone prompt layout (official `generate` with non_streaming_mode=False).

prefill = [T(role 3 ids)] ++ [text column + codec control column] ++ mode part, where
  codec control = [nothink, think_bos, think_eos] (auto) or [think, think_bos, lang, think_eos],
  then the x-vector X, then [codec_pad, codec_bos]; the text column is tts_pad for every control
  entry except the last one summed, which gets tts_bos (codec_bos goes to the mode part).
x-vector mode: one more position T(text_0) + C(codec_bos); trailing = T(text_1..) ++ tts_eos.
ICL mode: S = T(ref_text ++ text) ++ tts_eos, K = C(codec_bos) ++ F(ref frames);
  |S| > |K|: part = S[:|K|] + K, trailing = S[|K|:]; else S is tts_pad-padded, trailing = [tts_pad].
After the trailing vectors run out every step adds tts_pad.

The same builder serves the other checkpoint types (official `generate`, one code path):
* the speaker entry X of the codec column is the x-vector (Base), the preset's row of the
  talker's codec input embedding C(spk_id[name]) (CustomVoice), or absent (VoiceDesign: the
  control column is then one entry shorter, and so is its tts_pad run);
* a CustomVoice speaker with a dialect (spk_is_dialect) takes the dialect's language id in
  place of the language's when the language is "chinese" or "auto";
* an instruction is prepended as text: T(`<|im_start|>user\n{instruct}<|im_end|>\n` ids)
  before the role positions;
* non_streaming_mode (x-vector / preset / designed voices): the prefill ends with
  T(text_i) + C(codec_pad) for every target token, tts_eos + C(codec_pad), then
  tts_pad + C(codec_bos) (no first-token position); trailing = [tts_pad]. ICL: the part is
  [S + C(codec_pad)] ++ [K + tts_pad], trailing = [tts_pad].
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .config import Qwen3TTSConfig
from .talker import Talker
from .text_tokenizer import TextTokenizer

ROLE_TOKENS = 3  # <|im_start|> assistant \n
TEXT_TAIL_TOKENS = 5  # <|im_end|> \n <|im_start|> assistant \n
REF_TAIL_TOKENS = 2  # <|im_end|> \n


@dataclass
class SpecialTextVectors:
    """tts_bos / tts_eos / tts_pad projected once per model, each (H,)."""

    bos: torch.Tensor
    eos: torch.Tensor
    pad: torch.Tensor

    @classmethod
    def compute(cls, talker: Talker, cfg: Qwen3TTSConfig) -> SpecialTextVectors:
        device = talker.device
        ids = torch.tensor(
            [[cfg.tts_bos_token_id, cfg.tts_eos_token_id, cfg.tts_pad_token_id]], device=device
        )
        bos, eos, pad = talker.text_embed(ids)[0]
        return cls(bos=bos, eos=eos, pad=pad)


@dataclass
class Prompt:
    prefill: torch.Tensor  # (1, P, H)
    trailing: torch.Tensor  # (L, H) text vectors fed one per frame, then tts_pad
    text_tokens: int  # number of target-text tokens


def target_text_ids(tokenizer: TextTokenizer, text: str) -> list[int]:
    """Full official assistant template ids: role (3) + text + tail (5)."""
    ids = tokenizer.encode(f"<|im_start|>assistant\n{text}<|im_end|>\n<|im_start|>assistant\n")
    if len(ids) <= ROLE_TOKENS + TEXT_TAIL_TOKENS:
        raise ValueError("text is empty after tokenization")
    return ids


def ref_text_ids(tokenizer: TextTokenizer, ref_text: str) -> list[int]:
    """Reference transcript ids (template stripped)."""
    ids = tokenizer.encode(f"<|im_start|>assistant\n{ref_text}<|im_end|>\n")
    return ids[ROLE_TOKENS:-REF_TAIL_TOKENS]


def instruct_text_ids(tokenizer: TextTokenizer, instruct: str) -> list[int]:
    """The official instruction template's ids, all of them embedded (no slicing)."""
    return tokenizer.encode(f"<|im_start|>user\n{instruct}<|im_end|>\n")


def codec_language(cfg: Qwen3TTSConfig, language: str, speaker: str | None = None) -> int | None:
    """The language id of the codec column (None: "auto", no id), after a CustomVoice
    speaker's dialect switch (its spk_is_dialect, for "chinese" and "auto" only)."""
    talker = cfg.talker
    language = language.lower()
    if language != "auto" and language not in cfg.languages:
        supported = ", ".join(cfg.languages)
        raise ValueError(f"unsupported language {language!r}; supported: {supported}")
    language_id = None if language == "auto" else talker.codec_language_id[language]
    dialect = talker.spk_is_dialect.get(speaker, False) if speaker is not None else False
    if language in ("chinese", "auto") and dialect is not False:
        language_id = talker.codec_language_id[dialect]
    return language_id


def codec_control_ids(cfg: Qwen3TTSConfig, language: str, speaker: str | None = None) -> list[int]:
    talker = cfg.talker
    language_id = codec_language(cfg, language, speaker)
    if language_id is None:
        return [talker.codec_nothink_id, talker.codec_think_bos_id, talker.codec_think_eos_id]
    return [
        talker.codec_think_id,
        talker.codec_think_bos_id,
        language_id,
        talker.codec_think_eos_id,
    ]


def _ids(values: list[int], device: torch.device) -> torch.Tensor:
    return torch.tensor([values], dtype=torch.long, device=device)  # (1, T)


def build_prompt(
    talker: Talker,
    cfg: Qwen3TTSConfig,
    special: SpecialTextVectors,
    text_ids: list[int],
    language: str,
    speaker_embedding: torch.Tensor | None,
    ref_ids: list[int] | None = None,
    ref_codes: torch.Tensor | None = None,
    *,
    speaker: str | None = None,
    instruct_ids: list[int] | None = None,
    non_streaming_mode: bool = False,
) -> Prompt:
    """ICL when ref_codes (R, G) and ref_ids are given, else one speaker entry (or none).

    speaker_embedding: (H,) the codec column's speaker entry X (x-vector or a preset's codec
    row), None for none (VoiceDesign); speaker: the CustomVoice preset's name (its dialect);
    instruct_ids: `instruct_text_ids`, prepended as text embeddings."""
    device = talker.device
    dtype = talker.dtype
    codec_ids = codec_control_ids(cfg, language, speaker)
    pad_bos = _ids([cfg.talker.codec_pad_id, cfg.talker.codec_bos_id], device)
    parts = [talker.codec_embed(_ids(codec_ids, device))]
    if speaker_embedding is not None:
        parts.append(speaker_embedding.to(device=device, dtype=dtype).view(1, 1, -1))
    codec = torch.cat([*parts, talker.codec_embed(pad_bos)], 1)
    text_column = torch.cat(
        [special.pad.expand(1, codec.shape[1] - 2, -1), special.bos.view(1, 1, -1)], 1
    )
    role = talker.text_embed(_ids(text_ids[:ROLE_TOKENS], device))
    prefix = torch.cat([role, text_column + codec[:, :-1]], dim=1)
    if instruct_ids:
        prefix = torch.cat([talker.text_embed(_ids(instruct_ids, device)), prefix], dim=1)
    target = text_ids[ROLE_TOKENS:-TEXT_TAIL_TOKENS]
    if ref_codes is None and non_streaming_mode:
        part = _all_text_part(talker, cfg, special, target, codec[:, -1:])
        return Prompt(torch.cat([prefix, part], dim=1), special.pad[None], len(target))
    if ref_codes is None:
        first = talker.text_embed(_ids(target[:1], device)) + codec[:, -1:]
        trailing = torch.cat([talker.text_embed(_ids(target[1:], device))[0], special.eos[None]], 0)
        return Prompt(torch.cat([prefix, first], dim=1), trailing, len(target))
    if ref_ids is None:
        raise ValueError("ICL prompt needs the reference transcript ids")
    part, trailing = _icl_part(
        talker, cfg, special, target, ref_ids, ref_codes.to(device), non_streaming_mode
    )
    return Prompt(torch.cat([prefix, part], dim=1), trailing, len(target))


def _all_text_part(
    talker: Talker,
    cfg: Qwen3TTSConfig,
    special: SpecialTextVectors,
    target: list[int],
    codec_bos: torch.Tensor,
) -> torch.Tensor:
    """non_streaming_mode's prefill tail (1, n + 2, H): [T(text) ++ tts_eos] + C(codec_pad),
    then tts_pad + C(codec_bos)."""
    device = codec_bos.device
    text = torch.cat([talker.text_embed(_ids(target, device)), special.eos.view(1, 1, -1)], 1)
    pads = talker.codec_embed(_ids([cfg.talker.codec_pad_id] * text.shape[1], device))
    return torch.cat([text + pads, special.pad.view(1, 1, -1) + codec_bos], dim=1)


def _icl_part(
    talker: Talker,
    cfg: Qwen3TTSConfig,
    special: SpecialTextVectors,
    target: list[int],
    ref_ids: list[int],
    ref_codes: torch.Tensor,
    non_streaming_mode: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(ICL part, trailing); non_streaming_mode: [S + C(codec_pad)] ++ [K + tts_pad], trailing
    [tts_pad] (all text before the reference frames)."""
    device = ref_codes.device
    text = torch.cat(
        [talker.text_embed(_ids(ref_ids + target, device)), special.eos.view(1, 1, -1)], 1
    )
    bos = talker.codec_embed(_ids([cfg.talker.codec_bos_id], device))
    codec = torch.cat([bos, talker.frame_embed(ref_codes)[None]], dim=1)  # (1, R+1, H)
    text_len, codec_len = text.shape[1], codec.shape[1]
    if non_streaming_mode:
        pads = talker.codec_embed(_ids([cfg.talker.codec_pad_id] * text_len, device))
        return torch.cat([text + pads, codec + special.pad], dim=1), special.pad[None]
    if text_len > codec_len:
        return text[:, :codec_len] + codec, text[0, codec_len:]
    padding = special.pad.expand(1, codec_len - text_len, -1)
    return torch.cat([text, padding], dim=1) + codec, special.pad[None]


def step_input(
    talker: Talker, special: SpecialTextVectors, prompt: Prompt, frame: torch.Tensor, index: int
) -> torch.Tensor:
    """The talker's input after frame `index` (G,): F(frame) + the prompt's trailing text vector
    `index` (tts_pad once they run out), (1, 1, H)."""
    trailing = prompt.trailing
    text = trailing[index] if index < trailing.shape[0] else special.pad
    return (talker.frame_embed(frame[None]) + text).view(1, 1, -1)
