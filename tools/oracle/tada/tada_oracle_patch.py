"""Hub-free loading and tiny-size patches for the official hume-tada 0.1.9 (oracle venv only).

Importing this module sets HF_HUB_OFFLINE and replaces, inside the tada modules only, the names
that reach the Hub by a redirect to local folders (`redirect(...)`):
- `TadaForCausalLM.from_pretrained` always loads `Decoder.from_pretrained("HumeAI/tada-codec",
  subfolder="decoder")` and `AutoTokenizer.from_pretrained(config.tokenizer_name or
  "meta-llama/Llama-3.2-1B")`;
- `Aligner.__init__` loads `AutoTokenizer.from_pretrained(config.tokenizer_name)` and
  `AutoConfig.from_pretrained(config.base_model_name)` ("facebook/wav2vec2-large": only its
  config; the weights come from the codec's aligner folder).
No forward code is touched. `tiny_sizes(...)` patches two constructor constants that the official
classes hard-code (WavEncoder's base width 64, the local attention's max_seq_len 8192, whose
(L, L) mask buffer is in the state dict) so that tiny checkpoints stay small.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import tada.modules.aligner as aligner_module  # noqa: E402
import tada.modules.encoder as encoder_module  # noqa: E402
import tada.modules.tada as tada_module  # noqa: E402
from transformers import AutoConfig, AutoTokenizer  # noqa: E402

HUB_CODEC = "HumeAI/tada-codec"
HUB_TOKENIZER = "meta-llama/Llama-3.2-1B"
HUB_WAV2VEC2 = "facebook/wav2vec2-large"
WAV2VEC2_CONFIG = "encoder_config.json"  # tiny checkpoints: the aligner's wav2vec2 config

_REDIRECTS: dict[str, str] = {}


class _Redirected:
    """`from_pretrained(name, ...)` of `real` with Hub names replaced by local paths; a Hub
    name without a local path raises instead of downloading."""

    def __init__(self, real) -> None:
        self._real = real

    def from_pretrained(self, name, *args, **kwargs):
        name = str(name)
        if name in _REDIRECTS:
            name = _REDIRECTS[name]
        elif not Path(name).exists():
            raise RuntimeError(f"oracle: no local folder for Hub name {name!r} (see redirect())")
        return self._real.from_pretrained(name, *args, **kwargs)

    def __getattr__(self, attr):
        return getattr(self._real, attr)


def redirect(codec: str | Path, tokenizer: str | Path) -> None:
    """Hub names -> local: the codec folder (encoder/, decoder/, aligner/), the folder with the
    tokenizer (tokenizer.json + tokenizer_config.json), and the aligner's wav2vec2 config (the
    codec's aligner/encoder_config.json)."""
    codec = Path(codec)
    _REDIRECTS.update(
        {
            HUB_CODEC: str(codec),
            HUB_TOKENIZER: str(tokenizer),
            HUB_WAV2VEC2: str(codec / "aligner" / WAV2VEC2_CONFIG),
        }
    )


tada_module.AutoTokenizer = _Redirected(AutoTokenizer)
aligner_module.AutoTokenizer = _Redirected(AutoTokenizer)
aligner_module.AutoConfig = _Redirected(AutoConfig)
tada_module.Decoder = _Redirected(tada_module.Decoder)


@contextmanager
def tiny_sizes(wav_encoder_width: int, max_seq_len: int):
    """Build official modules with WavEncoder's first width `wav_encoder_width` (official: 64,
    doubled at each of the 4 strides) and the local attention's `max_seq_len` (official: 8192)."""
    wav_init = encoder_module.WavEncoder.__init__
    attn_init = encoder_module.LocalSelfAttention.__init__

    def wav(self, d_model=64, strides=(2, 4, 8, 8), d_latent=64):
        wav_init(self, wav_encoder_width, list(strides), d_latent)

    def attn(self, d_model, num_heads=8, dropout=0.1, max_seq_len=8192, **kwargs):
        attn_init(self, d_model, num_heads, dropout, max_seq_len=tiny_len, **kwargs)

    tiny_len = max_seq_len
    encoder_module.WavEncoder.__init__ = wav
    encoder_module.LocalSelfAttention.__init__ = attn
    try:
        yield
    finally:
        encoder_module.WavEncoder.__init__ = wav_init
        encoder_module.LocalSelfAttention.__init__ = attn_init
