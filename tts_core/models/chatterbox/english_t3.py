"""The original English model's T3 (spec chatterbox.md 9.1, 9.2, 9.4): a Llama backbone (HF
"Llama_520M": layers.DecoderStack without q/k norms, RoPE llama3-scaled) fed embeddings with
learned text/speech positions, a conditioning prefix [speaker (1) | perceiver over the prompt's
speech tokens (32) | emotion exaggeration (1)], and classifier-free guidance: 2 rows a pass (row
1's text embeddings zeroed), last logits cond + w (cond - uncond), then EnglishSampling
(sampling.py). Attribute names are the keys of `t3_cfg.safetensors` (`tfmr.embed_tokens` and
`text_head` unused: dropped at load).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ..layers import DecoderStack, KVCache, RotaryTable, Span, rope_cos_sin
from .config import SPEAKER_EMBED, START_SPEECH, STOP_SPEECH
from .sampling import EnglishSampling, draw

SPEECH_VOCAB_EN = 8194  # the English speech vocabulary (6561 S3 tokens, start, stop, unused)
TEXT_VOCAB_EN = 704
START_TEXT, STOP_TEXT = 255, 0  # T3Config start/stop_text_token, added by generate
TEXT_POSITIONS = 2048 + 2  # max_text_tokens + 2
SPEECH_POSITIONS = 4096 + 2 + 2  # max_speech_tokens + 4
PERCEIVER_QUERIES = 32
COND_POSITIONS = 1 + PERCEIVER_QUERIES + 1  # speaker, perceiver, emotion
MAX_NEW_TOKENS = 1000  # tts.py's max_new_tokens: at most 1000 draws
RMS_EPS = 1e-5
ROPE_THETA = 500000.0
LLAMA3_ROPE = {
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
}


@dataclass(frozen=True)
class LlamaSizes:
    """Llama_520M by default (the release); tiny checkpoints give theirs in chatterbox_sizes.json."""

    n_layer: int = 30
    hidden: int = 1024
    heads: int = 16
    kv_heads: int = 16
    head_dim: int = 64
    intermediate: int = 4096


@dataclass(frozen=True)
class _Geometry:  # layers.StackGeometry of a LlamaSizes
    hidden_size: int
    intermediate_size: int
    num_attention_heads: int
    num_key_value_heads: int
    num_hidden_layers: int
    head_dim: int
    rms_norm_eps: float = RMS_EPS


def llama3_inverse_frequencies(head_dim: int, theta: float = ROPE_THETA) -> torch.Tensor:
    """transformers' _compute_llama3_parameters, same float32 ops: theta^(-2i/D), the long
    wavelengths divided by `factor`, the middle band interpolated."""
    exponents = torch.arange(0, head_dim, 2, dtype=torch.int64).to(dtype=torch.float) / head_dim
    inv_freq = 1.0 / (theta**exponents)
    factor, low, high = (LLAMA3_ROPE[k] for k in ("factor", "low_freq_factor", "high_freq_factor"))
    old_context = LLAMA3_ROPE["original_max_position_embeddings"]
    low_wavelen, high_wavelen = old_context / low, old_context / high
    wavelen = 2 * math.pi / inv_freq
    inv_freq_llama = torch.where(wavelen > low_wavelen, inv_freq / factor, inv_freq)
    smooth = (old_context / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * inv_freq_llama / factor + smooth * inv_freq_llama
    medium = ~(wavelen < high_wavelen) * ~(wavelen > low_wavelen)
    return torch.where(medium, smoothed, inv_freq_llama)


def llama3_table(head_dim: int, max_len: int) -> RotaryTable:
    """A RotaryTable (positions [0, max_len)) of the llama3-scaled frequencies: HF computes
    cos/sin of float32 position x inv_freq per forward, the same float32 values."""
    table = RotaryTable(head_dim, ROPE_THETA, 1)
    cos, sin = rope_cos_sin(llama3_inverse_frequencies(head_dim), max_len, torch.float32)
    table.cos, table.sin = cos, sin  # registered buffers: replaced, moved by .to()
    return table


class LearnedPositions(nn.Module):
    """LearnedPositionEmbeddings: `emb` rows 0..n-1 added to n inputs."""

    def __init__(self, rows: int, dim: int) -> None:
        super().__init__()
        self.emb = nn.Embedding(rows, dim)

    def forward(self, length: int, device: torch.device) -> torch.Tensor:
        return self.emb(torch.arange(0, length, device=device))  # (length, dim)

    def at(self, index: int, device: torch.device) -> torch.Tensor:
        """get_fixed_embedding(index): (1, 1, dim)."""
        return self.emb(torch.atleast_2d(torch.tensor(index, device=device)))


class PerceiverAttention(nn.Module):
    """AttentionBlock2: one LayerNorm for both inputs, q from x1, k/v from x2 (biased), SDPA
    (default scale, no mask) over `heads`, proj_out, residual on x1."""

    def __init__(self, channels: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm = nn.LayerNorm(channels)
        self.to_q = nn.Linear(channels, channels)
        self.to_k = nn.Linear(channels, channels)
        self.to_v = nn.Linear(channels, channels)
        self.proj_out = nn.Linear(channels, channels)

    def _split(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, channels = x.shape
        return x.view(batch, length, self.heads, channels // self.heads).permute(0, 2, 1, 3)

    def forward(self, x1: torch.Tensor, x2: torch.Tensor) -> torch.Tensor:
        n1, n2 = self.norm(x1), self.norm(x2)
        q, k, v = self._split(self.to_q(n1)), self._split(self.to_k(n2)), self._split(self.to_v(n2))
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=0.0)
        batch, _, length, _ = out.shape
        out = out.permute(0, 2, 1, 3).contiguous().view(batch, length, -1)
        return x1 + self.proj_out(out)


class Perceiver(nn.Module):
    """32 learned queries attend the prompt, then themselves, with the same block twice."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.pre_attention_query = nn.Parameter(torch.empty(1, PERCEIVER_QUERIES, dim))
        self.attn = PerceiverAttention(dim, heads)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        query = self.pre_attention_query.expand(h.shape[0], -1, -1)
        first = self.attn(query, h)
        return self.attn(first, first)


class CondEnc(nn.Module):
    def __init__(self, dim: int, perceiver_heads: int) -> None:
        super().__init__()
        self.spkr_enc = nn.Linear(SPEAKER_EMBED, dim)
        self.emotion_adv_fc = nn.Linear(1, dim, bias=False)
        self.perceiver = Perceiver(dim, perceiver_heads)


@dataclass
class EnglishT3Output:
    draws: torch.Tensor  # (N,) every drawn token, STOP included when drawn (the official's row 0)
    logits: list[torch.Tensor]  # teacher-forced runs: the raw (rows, V) logits per step
    stop_reason: str = "eos"  # or "max_tokens"


class T3English(nn.Module):
    def __init__(self, sizes: LlamaSizes, perceiver_heads: int, max_positions: int) -> None:
        super().__init__()
        dim = sizes.hidden
        geometry = _Geometry(
            dim, sizes.intermediate, sizes.heads, sizes.kv_heads, sizes.n_layer, sizes.head_dim
        )
        self.tfmr = DecoderStack(geometry, qk_norm=False)
        self.cond_enc = CondEnc(dim, perceiver_heads)
        self.text_emb = nn.Embedding(TEXT_VOCAB_EN, dim)
        self.speech_emb = nn.Embedding(SPEECH_VOCAB_EN, dim)
        self.text_pos_emb = LearnedPositions(TEXT_POSITIONS, dim)
        self.speech_pos_emb = LearnedPositions(SPEECH_POSITIONS, dim)
        self.speech_head = nn.Linear(dim, SPEECH_VOCAB_EN, bias=False)
        self.rope = llama3_table(sizes.head_dim, max_positions)

    @torch.inference_mode()
    def conditioning(
        self, speaker_emb: torch.Tensor, prompt_tokens: torch.Tensor, exaggeration: float
    ) -> torch.Tensor:
        """[spk | perceiver(speech_emb(prompt) + speech positions) | emotion] -> (1, 34, H)."""
        spk = self.cond_enc.spkr_enc(speaker_emb.view(-1, SPEAKER_EMBED))[:, None]
        prompt = self.speech_emb(prompt_tokens)
        prompt = prompt + self.speech_pos_emb(prompt_tokens.shape[1], prompt.device)
        prompt = self.cond_enc.perceiver(prompt)
        emotion = exaggeration * torch.ones(1, 1, 1, device=spk.device)
        emotion = self.cond_enc.emotion_adv_fc(emotion.to(spk.dtype).view(-1, 1, 1))
        return torch.cat((spk, prompt, emotion), dim=1)

    def prompt(self, cond: torch.Tensor, text_ids: torch.Tensor, guided: bool) -> torch.Tensor:
        """[cond | text + positions | start + position 0 | start + position 0] -> (rows, L, H)
        of text_ids (1, Lt); guided: row 1 (unconditional) with its text embeddings zeroed."""
        rows = 2 if guided else 1
        text_ids = text_ids.expand(rows, -1)
        text = self.text_emb(text_ids)
        if guided:
            text[1].zero_()
        text = text + self.text_pos_emb(text_ids.shape[1], text.device)
        start = torch.full_like(text_ids[:, :1], START_SPEECH)
        speech = self.speech_emb(start) + self.speech_pos_emb(1, text.device)
        cond = cond.expand(rows, -1, -1)
        embeds = torch.stack(
            [torch.cat((c, t, s)) for c, t, s in zip(cond, text, speech, strict=True)]
        )
        bos = self.speech_emb(torch.tensor([[START_SPEECH]], device=text.device))
        bos = bos + self.speech_pos_emb.at(0, text.device)
        return torch.cat([embeds, torch.cat([bos] * rows)], dim=1)

    @torch.inference_mode()
    def generate(
        self,
        cond: torch.Tensor,
        text_ids: torch.Tensor,
        sampling: EnglishSampling,
        generator: torch.Generator | None,
        max_new_tokens: int = MAX_NEW_TOKENS,
        forced: torch.Tensor | None = None,
    ) -> EnglishT3Output:
        """T3.inference: up to max_new_tokens draws, STOP ends it (kept in `draws`). forced
        (N,): teacher forcing, those tokens fed instead of drawn, raw logits recorded."""
        logits: list[torch.Tensor] = []
        seen = logits if forced is not None else None
        drawn = list(self.draws(cond, text_ids, sampling, generator, max_new_tokens, forced, seen))
        tokens = torch.cat(drawn, dim=1)[0] if drawn else text_ids.new_zeros(0)
        eos = len(tokens) > 0 and int(tokens[-1]) == STOP_SPEECH
        reason = "eos" if eos or forced is not None else "max_tokens"
        return EnglishT3Output(tokens, logits, reason)

    @torch.inference_mode()
    def draws(
        self,
        cond: torch.Tensor,
        text_ids: torch.Tensor,
        sampling: EnglishSampling,
        generator: torch.Generator | None,
        max_new_tokens: int = MAX_NEW_TOKENS,
        forced: torch.Tensor | None = None,
        logits_seen: list[torch.Tensor] | None = None,
    ) -> Iterator[torch.Tensor]:
        """Each drawn token (1, 1) as soon as it is drawn (STOP included, then the end)."""
        embeds = self.prompt(cond, text_ids, sampling.guided)
        rows, length, _ = embeds.shape
        steps = max_new_tokens if forced is None else len(forced)
        if length + steps > self.rope.cos.shape[0]:
            raise ValueError(
                f"T3 prompt of {length} positions + {steps} tokens exceeds the "
                f"{self.rope.cos.shape[0]} positions this model was set up for"
            )
        caches: list[KVCache] = self.tfmr.new_caches(
            rows, length + steps, embeds.dtype, embeds.device
        )
        hidden = self.tfmr(embeds, Span(caches, 0), self.rope)  # (rows, L, H)
        logits = self.speech_head(hidden)[:, -1, :]  # the official projects every position
        position = length
        history = torch.full((1, 1), START_SPEECH, dtype=torch.long, device=embeds.device)
        for step in range(steps):
            if logits_seen is not None:
                logits_seen.append(logits)
            processed = sampling.process(history, sampling.combine(logits))
            if forced is None:
                token = draw(processed, generator)
            else:
                token = forced[step].view(1, 1).to(embeds.device)
            yield token
            history = torch.cat([history, token], dim=1)
            if int(token) == STOP_SPEECH:
                return
            step_embed = self.speech_emb(token) + self.speech_pos_emb.at(step + 1, embeds.device)
            step_embed = torch.cat([step_embed] * rows)
            hidden = self.tfmr(step_embed, Span(caches, position), self.rope)
            logits = self.speech_head(hidden)[:, -1, :]
            position += 1
