"""Voice-clone prompt layout (official `generate` with non_streaming_mode=False).

prefill = [T(role 3 ids)] ++ [text column + codec control column] ++ mode part, where
  codec control = [nothink, think_bos, think_eos] (auto) or [think, think_bos, lang, think_eos],
  then the x-vector X, then [codec_pad, codec_bos]; the text column is tts_pad for every control
  entry except the last one summed, which gets tts_bos (codec_bos goes to the mode part).
x-vector mode: one more position T(text_0) + C(codec_bos); trailing = T(text_1..) ++ tts_eos.
ICL mode: S = T(ref_text ++ text) ++ tts_eos, K = C(codec_bos) ++ F(ref frames);
  |S| > |K|: part = S[:|K|] + K, trailing = S[|K|:]; else S is tts_pad-padded, trailing = [tts_pad].
After the trailing vectors run out every step adds tts_pad.
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


def codec_control_ids(cfg: Qwen3TTSConfig, language: str) -> list[int]:
    talker = cfg.talker
    language = language.lower()
    if language == "auto":
        return [talker.codec_nothink_id, talker.codec_think_bos_id, talker.codec_think_eos_id]
    if language not in talker.codec_language_id:
        supported = ", ".join(cfg.languages)
        raise ValueError(f"unsupported language {language!r}; supported: {supported}")
    return [
        talker.codec_think_id,
        talker.codec_think_bos_id,
        talker.codec_language_id[language],
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
    speaker_embedding: torch.Tensor,
    ref_ids: list[int] | None = None,
    ref_codes: torch.Tensor | None = None,
) -> Prompt:
    """ICL when ref_codes (R, G) and ref_ids are given, else x-vector only."""
    device = talker.device
    dtype = talker.dtype
    codec_ids = codec_control_ids(cfg, language)
    speaker = speaker_embedding.to(device=device, dtype=dtype).view(1, 1, -1)
    pad_bos = _ids([cfg.talker.codec_pad_id, cfg.talker.codec_bos_id], device)
    codec = torch.cat(
        [talker.codec_embed(_ids(codec_ids, device)), speaker, talker.codec_embed(pad_bos)], 1
    )
    text_column = torch.cat(
        [special.pad.expand(1, codec.shape[1] - 2, -1), special.bos.view(1, 1, -1)], 1
    )
    role = talker.text_embed(_ids(text_ids[:ROLE_TOKENS], device))
    prefix = torch.cat([role, text_column + codec[:, :-1]], dim=1)
    target = text_ids[ROLE_TOKENS:-TEXT_TAIL_TOKENS]
    if ref_codes is None:
        first = talker.text_embed(_ids(target[:1], device)) + codec[:, -1:]
        trailing = torch.cat([talker.text_embed(_ids(target[1:], device))[0], special.eos[None]], 0)
        return Prompt(torch.cat([prefix, first], dim=1), trailing, len(target))
    if ref_ids is None:
        raise ValueError("ICL prompt needs the reference transcript ids")
    part, trailing = _icl_part(talker, cfg, special, target, ref_ids, ref_codes.to(device))
    return Prompt(torch.cat([prefix, part], dim=1), trailing, len(target))


def _icl_part(
    talker: Talker,
    cfg: Qwen3TTSConfig,
    special: SpecialTextVectors,
    target: list[int],
    ref_ids: list[int],
    ref_codes: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    device = ref_codes.device
    text = torch.cat(
        [talker.text_embed(_ids(ref_ids + target, device)), special.eos.view(1, 1, -1)], 1
    )
    bos = talker.codec_embed(_ids([cfg.talker.codec_bos_id], device))
    codec = torch.cat([bos, talker.frame_embed(ref_codes)[None]], dim=1)  # (1, R+1, H)
    text_len, codec_len = text.shape[1], codec.shape[1]
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
