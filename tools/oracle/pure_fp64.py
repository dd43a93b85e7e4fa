"""`pure_float64()`: run the official modules in float64 all the way through.

A model loaded with `dtype=torch.float64` is not computed in float64 everywhere: the official
code casts to float32 in a few places whatever the model dtype (its mixed-precision policy for
bf16), so a plain float64 run still rounds to float32 there and cannot serve as the exact value
that float32 rounding errors are measured against:

* RMSNorm (talker, code predictor, codec decoder) computes in float32 and casts back;
* RoPE angles are computed in float32 (`inv_freq.float() @ positions.float()`, then cos/sin);
* `mel_spectrogram` uses a float32 filterbank and Hann window, and `extract_speaker_embedding`
  builds the mel from the float32 numpy clip;
* the Mimi RVQ computes codebook distances as `torch.cdist(x.float(), embed.float())`.

Inside the context manager these run in float64 on float64 tensors (float32 and bf16 runs are
untouched: every patch falls through to the original code for them):

* RMSNorm computes in the wider of the input dtype and float32;
* in the RoPE forwards and `mel_spectrogram`, `.float()` rounds to float32 *values* but keeps
  float64: inv_freq, positions, the filterbank and the window are constants of the function
  (the float32 run uses exactly those values), while the arithmetic on them is float64;
* `extract_speaker_embedding` gets the same samples upcast to float64;
* the Mimi distances are computed in float64.

The result is the float32 computation of the official code evaluated (almost) exactly: it
differs from the true value by float64 rounding, ~1e-16 x the amplification of the network,
against ~6e-8 x that amplification for any float32 run. The installed package is not modified;
the patches are undone on exit.
"""

from __future__ import annotations

import contextlib
import functools

import numpy as np
import torch
import transformers.models.mimi.modeling_mimi as mimi
from qwen_tts.core.models import modeling_qwen3_tts as talker_mod
from qwen_tts.core.tokenizer_12hz import modeling_qwen3_tts_tokenizer_v2 as codec_mod

_ORIGINAL_FLOAT = torch.Tensor.float
_ORIGINAL_HANN = torch.hann_window
_MODE: list[str] = []  # innermost scope: "constants", "exact" or "" (not a float64 call)
_INHERITED = object()


def _float(self: torch.Tensor, *args, **kwargs) -> torch.Tensor:
    mode = _MODE[-1] if _MODE else None
    if mode == "constants":  # float32 values, float64 arithmetic
        return _ORIGINAL_FLOAT(self).to(torch.float64)
    if mode == "exact" and self.dtype == torch.float64:
        return self
    return _ORIGINAL_FLOAT(self, *args, **kwargs)


def _hann_window(*args, **kwargs) -> torch.Tensor:
    window = _ORIGINAL_HANN(*args, **kwargs)
    return window.to(torch.float64) if _MODE and _MODE[-1] == "constants" else window


def _scoped(mode: str, fn):
    """fn with `mode` active while it runs on float64 tensors (other calls run unchanged)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        wide = any(isinstance(a, torch.Tensor) and a.dtype == torch.float64 for a in args)
        _MODE.append(mode if wide else "")
        try:
            return fn(*args, **kwargs)
        finally:
            _MODE.pop()

    return wrapper


def _rms_norm_forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
    input_dtype = hidden_states.dtype
    compute = torch.promote_types(input_dtype, torch.float32)
    hidden_states = hidden_states.to(compute)
    variance = hidden_states.pow(2).mean(-1, keepdim=True)
    hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
    return self.weight * hidden_states.to(input_dtype)


def _speaker_embedding(original):
    @functools.wraps(original)
    def wrapper(self, audio, sr):
        if self.dtype == torch.float64:
            audio = np.asarray(audio, dtype=np.float64)
        return original(self, audio, sr)

    return wrapper


def _patches() -> list[tuple[object, str, object]]:
    """(owner, attribute, replacement) for every float32 cast listed in the module docstring."""
    patches = [
        (talker_mod.Qwen3TTSRMSNorm, "forward", _rms_norm_forward),
        (codec_mod.Qwen3TTSTokenizerV2DecoderRMSNorm, "forward", _rms_norm_forward),
        (talker_mod, "mel_spectrogram", _scoped("constants", talker_mod.mel_spectrogram)),
        (torch, "hann_window", _hann_window),
        (torch.Tensor, "float", _float),
        (
            mimi.MimiEuclideanCodebook,
            "quantize",
            _scoped("exact", mimi.MimiEuclideanCodebook.quantize),
        ),
        (
            talker_mod.Qwen3TTSForConditionalGeneration,
            "extract_speaker_embedding",
            _speaker_embedding(
                talker_mod.Qwen3TTSForConditionalGeneration.extract_speaker_embedding
            ),
        ),
    ]
    for rope in (
        talker_mod.Qwen3TTSTalkerRotaryEmbedding,
        talker_mod.Qwen3TTSRotaryEmbedding,
        codec_mod.Qwen3TTSTokenizerV2DecoderRotatoryEmbedding,
        mimi.MimiRotaryEmbedding,
    ):
        patches.append((rope, "forward", _scoped("constants", rope.forward)))
    return patches


@contextlib.contextmanager
def pure_float64():
    """Patch the official float32 casts (see module docstring) for the duration of the block."""
    patches = _patches()
    saved = [(owner, name, vars(owner).get(name, _INHERITED)) for owner, name, _new in patches]
    try:
        for owner, name, new in patches:
            setattr(owner, name, new)
        yield
    finally:
        for owner, name, old in saved:
            if old is _INHERITED:  # torch.Tensor.float lives on the C base class
                delattr(owner, name)
            else:
                setattr(owner, name, old)
