"""Size patches that let the official chatterbox-tts 0.1.7 classes build tiny models.

The release has no config file: sizes are constructor defaults and module constants. Every
patch here replaces a constructor argument or a config table, never forward code, and is
applied identically when building the tiny checkpoints and when loading them for goldens
(`apply(sizes)` before `from_local`). `sizes` is one variant of `VARIANTS`; the same dict is
written next to the checkpoint as `chatterbox_sizes.json`, which is how our loader learns what
tensor shapes cannot say (head counts). Runs in the oracle venv only.
"""

from __future__ import annotations

import functools
from typing import Any

# Released values are in the comments. Head dims: GPT-2 a 32/4 = 8, b 36/3 = 12; conformer
# a 32/2 = 16, b 24/2 = 12; S3 tokenizer must stay 64 (its RoPE table is built for 64).
VARIANTS: dict[str, dict[str, Any]] = {
    "chatterbox-turbo-tiny-a": {
        "t3": {"n_layer": 2, "n_embd": 32, "n_head": 4, "n_positions": 1600, "text_vocab": 512},
        "ve_hidden": 32,  # 256 (the speaker embedding stays 256: T3 expects it)
        "s3tok": {"n_audio_state": 64, "n_audio_head": 1, "n_audio_layer": 1},  # 1280/20/6
        "encoder": {"size": 32, "heads": 2, "linear_units": 64, "num_blocks": 1},  # 512/8/2048/6
        "decoder": {"channels": 32, "heads": 2, "head_dim": 16, "n_blocks": 1, "mid_blocks": 2},
        "campplus": {"embedding_size": 32, "growth_rate": 8, "bn_size": 2, "init_channels": 16},
        "hift": {"base_channels": 32, "f0_channels": 16},  # 512 / 512
        "stop_row_std": 0.45,
    },
    "chatterbox-turbo-tiny-b": {
        "t3": {"n_layer": 3, "n_embd": 36, "n_head": 3, "n_positions": 1700, "text_vocab": 448},
        "ve_hidden": 24,
        "s3tok": {"n_audio_state": 128, "n_audio_head": 2, "n_audio_layer": 1},
        "encoder": {"size": 24, "heads": 2, "linear_units": 40, "num_blocks": 2},
        "decoder": {"channels": 24, "heads": 3, "head_dim": 8, "n_blocks": 2, "mid_blocks": 1},
        "campplus": {"embedding_size": 24, "growth_rate": 8, "bn_size": 1, "init_channels": 24},
        "hift": {"base_channels": 24, "f0_channels": 24},
        "stop_row_std": 0.55,
    },
}

# The original English model (tts.py): Llama T3 + perceiver + emotion, S3Gen with the regular
# CFM (10 cosine steps + CFG). Released: Llama_520M 30 layers x 1024, 16 heads x 64 (kv 16),
# MLP 4096; perceiver 32 queries x 1024, 4 heads. Kept small (a fixture folder < ~3 MB): the
# T3's fixed-size tables (speech 8194 x2, text 704 x2, positions 2050 + 4100) dominate, hence
# width 12. b has grouped kv heads and heads x head_dim != width (Llama allows both).
ENGLISH_VARIANTS: dict[str, dict[str, Any]] = {
    "chatterbox-english-tiny-a": {
        "model": "english",
        "llama": {
            "n_layer": 2,
            "hidden": 12,
            "heads": 2,
            "kv_heads": 2,
            "head_dim": 8,
            "intermediate": 32,
        },
        "perceiver_heads": 4,
        "ve_hidden": 16,
        "s3tok": {"n_audio_state": 64, "n_audio_head": 1, "n_audio_layer": 1},
        "encoder": {"size": 8, "heads": 2, "linear_units": 16, "num_blocks": 1},
        "decoder": {"channels": 8, "heads": 2, "head_dim": 8, "n_blocks": 1, "mid_blocks": 1},
        "campplus": {"embedding_size": 16, "growth_rate": 4, "bn_size": 2, "init_channels": 8},
        "hift": {"base_channels": 16, "f0_channels": 16},
        "stop_row_std": 0.7,
    },
    "chatterbox-english-tiny-b": {
        "model": "english",
        "llama": {
            "n_layer": 3,
            "hidden": 12,
            "heads": 3,
            "kv_heads": 1,
            "head_dim": 8,
            "intermediate": 24,
        },
        "perceiver_heads": 2,
        "ve_hidden": 16,
        "s3tok": {"n_audio_state": 64, "n_audio_head": 1, "n_audio_layer": 1},
        "encoder": {"size": 8, "heads": 2, "linear_units": 12, "num_blocks": 2},
        "decoder": {"channels": 8, "heads": 4, "head_dim": 4, "n_blocks": 1, "mid_blocks": 2},
        "campplus": {"embedding_size": 12, "growth_rate": 4, "bn_size": 1, "init_channels": 12},
        "hift": {"base_channels": 16, "f0_channels": 8},
        "stop_row_std": 0.4,
    },
}

_ORIGINALS: dict[str, Any] = {}


def _with(cls, **fixed):
    """`cls` called with `fixed` keyword arguments overriding the caller's."""

    @functools.wraps(cls)
    def build(*args, **kwargs):
        kwargs.update(fixed)
        return cls(*args, **kwargs)

    return build


def apply(sizes: dict[str, Any]) -> None:
    """Patch the official modules for `sizes` (idempotent per process: re-applying with other
    sizes replaces the previous patch)."""
    import chatterbox.tts_turbo as tts_turbo
    from chatterbox.models.s3gen import s3gen
    from chatterbox.models.s3gen.transformer import upsample_encoder
    from chatterbox.models.t3 import llama_configs
    from chatterbox.models.t3.modules import cond_enc, t3_config
    from chatterbox.models.voice_encoder.config import VoiceEncConfig

    for module, name in (
        (s3gen, "UpsampleConformerEncoder"),
        (s3gen, "ConditionalDecoder"),
        (s3gen, "CausalMaskedDiffWithXvec"),
        (s3gen, "CAMPPlus"),
        (s3gen, "HiFTGenerator"),
        (s3gen, "ConvRNNF0Predictor"),
        (upsample_encoder, "PreLookaheadLayer"),
        (upsample_encoder, "Upsample1D"),
        (tts_turbo, "T3Config"),
        (cond_enc, "Perceiver"),
    ):
        _ORIGINALS.setdefault(f"{module.__name__}.{name}", getattr(module, name))
    orig = {key.rsplit(".", 1)[1]: value for key, value in _ORIGINALS.items()}

    if sizes.get("model") == "english":
        llama = sizes["llama"]
        llama_configs.LLAMA_CONFIGS["Llama_520M"].update(
            hidden_size=llama["hidden"],
            intermediate_size=llama["intermediate"],
            num_hidden_layers=llama["n_layer"],
            num_attention_heads=llama["heads"],
            num_key_value_heads=llama["kv_heads"],
            head_dim=llama["head_dim"],
        )
        cond_enc.Perceiver = _with(
            orig["Perceiver"],
            pre_attention_query_size=llama["hidden"],
            embedding_dim=llama["hidden"],
            num_attn_heads=sizes["perceiver_heads"],
        )
        _patch_s3gen(sizes, orig)
        VoiceEncConfig.ve_hidden_size = sizes["ve_hidden"]
        return
    cond_enc.Perceiver = orig["Perceiver"]
    t3 = sizes["t3"]
    gpt2 = llama_configs.LLAMA_CONFIGS["GPT2_medium"]  # 24 layers, 1024, 16 heads, 8196 pos
    gpt2.update(
        n_layer=t3["n_layer"],
        n_embd=t3["n_embd"],
        hidden_size=t3["n_embd"],
        n_head=t3["n_head"],
        n_positions=t3["n_positions"],
        n_ctx=t3["n_positions"],
        vocab_size=t3["text_vocab"],
    )

    class TinyT3Config(
        t3_config.T3Config
    ):  # tts_turbo builds T3Config(text_tokens_dict_size=50276)
        def __init__(self, text_tokens_dict_size: int = 704) -> None:
            super().__init__(text_tokens_dict_size=t3["text_vocab"])

    tts_turbo.T3Config = TinyT3Config
    VoiceEncConfig.ve_hidden_size = sizes["ve_hidden"]
    _patch_s3gen(sizes, orig)


def _patch_s3gen(sizes: dict[str, Any], orig: dict[str, Any]) -> None:
    """The S3Gen (and S3 tokenizer) size patches, shared by Turbo and the English model."""
    from chatterbox.models.s3gen import s3gen
    from chatterbox.models.s3gen.transformer import upsample_encoder
    from s3tokenizer.model_v2 import S3TokenizerV2

    # S3TokenizerV2's default ModelConfig() is one shared instance: mutate it in place.
    config = S3TokenizerV2.__init__.__defaults__[0]
    for key, value in sizes["s3tok"].items():
        setattr(config, key, value)

    enc, dec, cam, hift = sizes["encoder"], sizes["decoder"], sizes["campplus"], sizes["hift"]
    width = enc["size"]
    s3gen.UpsampleConformerEncoder = _with(
        orig["UpsampleConformerEncoder"],
        input_size=width,
        output_size=width,
        attention_heads=enc["heads"],
        linear_units=enc["linear_units"],
        num_blocks=enc["num_blocks"],
    )
    upsample_encoder.PreLookaheadLayer = _with(orig["PreLookaheadLayer"], channels=width)
    upsample_encoder.Upsample1D = _with(orig["Upsample1D"], channels=width, out_channels=width)
    s3gen.ConditionalDecoder = _with(
        orig["ConditionalDecoder"],
        channels=[dec["channels"]],
        attention_head_dim=dec["head_dim"],
        n_blocks=dec["n_blocks"],
        num_mid_blocks=dec["mid_blocks"],
        num_heads=dec["heads"],
    )
    s3gen.CausalMaskedDiffWithXvec = _with(
        orig["CausalMaskedDiffWithXvec"], input_size=width, spk_embed_dim=cam["embedding_size"]
    )
    s3gen.CAMPPlus = _with(orig["CAMPPlus"], **cam)
    s3gen.HiFTGenerator = _with(orig["HiFTGenerator"], base_channels=hift["base_channels"])
    s3gen.ConvRNNF0Predictor = _with(orig["ConvRNNF0Predictor"], cond_channels=hift["f0_channels"])
