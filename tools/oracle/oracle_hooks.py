"""Runtime hooks on the official model: capture intermediates without editing the package.

`Capture(tts)` wraps, on the loaded instances only:
  * `tts.model.talker.generate`       -> prefill embeddings, trailing text, tts_pad embedding
  * `tts.model.generate`              -> the (N, 16) codes it returns (EOS frame already cut)
  * `tts.model.speech_tokenizer.decode` -> the codes sent to the codec and the waveform
and registers forward hooks on `talker.codec_head` (input = final-norm hidden, output =
logits; one call per talker forward) and on every `code_predictor.lm_head[j]`, from which the
greedy argmax margins are computed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

EOS = 2150
NUM_AUDIO_CODES = 2048


@dataclass
class Captured:
    prefill_embeds: list[torch.Tensor] = field(default_factory=list)  # (P, H) per generate
    trailing_text: list[torch.Tensor] = field(default_factory=list)  # (L, H)
    tts_pad_embed: list[torch.Tensor] = field(default_factory=list)  # (H,)
    talker_hidden: list[torch.Tensor] = field(default_factory=list)  # (H,) per talker forward
    talker_logits: list[torch.Tensor] = field(default_factory=list)  # (3072,) per forward
    cp_logits: list[torch.Tensor] = field(default_factory=list)  # (2048,) per lm_head call
    codes: list[torch.Tensor] = field(default_factory=list)  # (N, 16) per generate
    decode_codes: list[torch.Tensor] = field(default_factory=list)  # (T, 16) per decode
    decode_wavs: list[torch.Tensor] = field(default_factory=list)  # (T*1920,)


class Capture:
    """Context manager collecting a `Captured` record from one official wrapper instance."""

    def __init__(self, tts) -> None:
        self.tts = tts
        self.record = Captured()
        self._handles = []

    def __enter__(self) -> Captured:
        model, rec = self.tts.model, self.record
        talker = model.talker
        orig_talker_generate = talker.generate
        orig_generate = model.generate
        orig_decode = model.speech_tokenizer.decode

        def talker_generate(*args, **kwargs):
            rec.prefill_embeds.append(kwargs["inputs_embeds"][0].detach().clone())
            rec.trailing_text.append(kwargs["trailing_text_hidden"][0].detach().clone())
            rec.tts_pad_embed.append(kwargs["tts_pad_embed"].reshape(-1).detach().clone())
            return orig_talker_generate(*args, **kwargs)

        def generate(*args, **kwargs):
            codes_list, hidden_list = orig_generate(*args, **kwargs)
            rec.codes.extend(c.detach().clone() for c in codes_list)
            return codes_list, hidden_list

        def decode(encoded):
            for item in encoded:
                rec.decode_codes.append(torch.as_tensor(item["audio_codes"]).clone())
            wavs, sr = orig_decode(encoded)
            rec.decode_wavs.extend(torch.from_numpy(w.copy()) for w in wavs)
            return wavs, sr

        talker.generate = talker_generate
        model.generate = generate
        model.speech_tokenizer.decode = decode
        self._restore = [
            (talker, "generate"),
            (model, "generate"),
            (model.speech_tokenizer, "decode"),
        ]

        def on_codec_head(_module, inputs, output):
            rec.talker_hidden.append(inputs[0][0, -1].detach().float().clone())
            rec.talker_logits.append(output[0, -1].detach().float().clone())

        def on_lm_head(_module, _inputs, output):
            rec.cp_logits.append(output[0, -1].detach().float().clone())

        self._handles.append(talker.codec_head.register_forward_hook(on_codec_head))
        for head in talker.code_predictor.lm_head:
            self._handles.append(head.register_forward_hook(on_lm_head))
        return rec

    def __exit__(self, *exc) -> None:
        for obj, name in self._restore:
            del obj.__dict__[name]  # drop the instance override; the class method is back
        for handle in self._handles:
            handle.remove()


def talker_choice_logits(logits: torch.Tensor, step: int, min_new_tokens: int = 2):
    """Logits as the greedy talker sees them: only audio codes and EOS; EOS masked early."""
    allowed = torch.full_like(logits, float("-inf"))
    allowed[:NUM_AUDIO_CODES] = logits[:NUM_AUDIO_CODES]
    if step >= min_new_tokens:
        allowed[EOS] = logits[EOS]
    return allowed


def top2_gap(logits: torch.Tensor) -> float:
    top = torch.topk(logits, 2).values
    return float(top[0] - top[1])


def greedy_margins(rec: Captured) -> dict[str, float]:
    """Smallest top-1/top-2 gap over every greedy decision captured (talker and predictor)."""
    talker = [top2_gap(talker_choice_logits(lg, i)) for i, lg in enumerate(rec.talker_logits)]
    cp = [top2_gap(lg) for lg in rec.cp_logits]
    return {
        "talker_min_gap": min(talker, default=float("inf")),
        "code_predictor_min_gap": min(cp, default=float("inf")),
    }
