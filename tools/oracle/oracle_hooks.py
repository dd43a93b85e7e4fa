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

import numpy as np
import torch
from qwen_tts.core.models import modeling_qwen3_tts

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

        # Kept in the model's dtype: float32 goldens, float64 values in a pure_float64() run.
        def on_codec_head(_module, inputs, output):
            rec.talker_hidden.append(inputs[0][0, -1].detach().clone())
            rec.talker_logits.append(output[0, -1].detach().clone())

        def on_lm_head(_module, _inputs, output):
            rec.cp_logits.append(output[0, -1].detach().clone())

        self._handles.append(talker.codec_head.register_forward_hook(on_codec_head))
        for head in talker.code_predictor.lm_head:
            self._handles.append(head.register_forward_hook(on_lm_head))
        return rec

    def __exit__(self, *exc) -> None:
        for obj, name in self._restore:
            del obj.__dict__[name]  # drop the instance override; the class method is back
        for handle in self._handles:
            handle.remove()


class RvqDistances:
    """Context manager recording the (N, codebook) distance matrix of every Mimi RVQ choice.

    The distances are recomputed exactly as `MimiEuclideanCodebook.quantize` computes them
    (float32 `torch.cdist`; float64 under pure_float64(), which patches that method too)."""

    def __init__(self) -> None:
        self.distances: list[torch.Tensor] = []

    def __enter__(self) -> list[torch.Tensor]:
        from transformers.models.mimi.modeling_mimi import MimiEuclideanCodebook

        self._owner = MimiEuclideanCodebook
        original = self._original = MimiEuclideanCodebook.__dict__["quantize"]
        distances = self.distances

        def quantize(book, hidden_states):
            wide = hidden_states.dtype == torch.float64
            x, embed = (
                (hidden_states, book.embed) if wide else (hidden_states.float(), book.embed.float())
            )
            distances.append(torch.cdist(x[None], embed[None], p=2)[0].detach().clone())
            return original(book, hidden_states)

        MimiEuclideanCodebook.quantize = quantize
        return distances

    def __exit__(self, *exc) -> None:
        self._owner.quantize = self._original


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


def official_mel(audio: np.ndarray) -> torch.Tensor:
    """(F, 128) log-mel exactly as extract_speaker_embedding computes it (float64 audio under
    pure_float64(): looked up on the module so that its patch applies)."""
    mel = modeling_qwen3_tts.mel_spectrogram(
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


@torch.no_grad()
def tts_pad(tts) -> torch.Tensor:
    talker, cfg = tts.model.talker, tts.model.config
    ids = torch.tensor([[cfg.tts_pad_token_id]])
    return talker.text_projection(talker.get_text_embeddings()(ids))[0, 0]  # model dtype
