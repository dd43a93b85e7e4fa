"""Build the tiny TADA checkpoints in the released layout, with hume-tada 0.1.9's own classes.

    .tada-venv/bin/python tools/oracle/tada/build_tiny.py [--out tests/fixtures]

For each variant of VARIANTS, `<out>/tada-tiny-<v>/`:
* `model/` (like HumeAI/tada-1b): `config.json` (TadaConfig), `model.safetensors`
  (`TadaForCausalLM.save_pretrained`), `tokenizer.json` + `tokenizer_config.json`;
* `codec/` (like HumeAI/tada-codec): `encoder/`, `decoder/`, `aligner/` (each `config.json` +
  `model.safetensors` from `save_pretrained`); `aligner/encoder_config.json` is the tiny
  wav2vec2 config that the release fetches from facebook/wav2vec2-large;
* `tada_tiny_sizes.json`: the two constructor constants the official code hard-codes and the
  tiny build patches (tada_oracle_patch.tiny_sizes), read back by make_goldens.py.

The tokenizer: a byte-level BPE trained here from scratch on CORPUS with Llama 3's split
pattern (256 byte tokens + merges, then Llama 3's first 11 special tokens in Llama 3's order and
names, 384 + 11 = 395 ids). Llama 3's own vocabulary (128,256 ids) would make every tiny
embedding table 128,256 rows, and a file derived from it falls under the Llama 3.2 licence; this
one is ours and exercises the same code (pre-tokenizer, byte-level BPE, special tokens by name).

Weights are deterministic (torch.manual_seed per module) and re-drawn so that every part
matters (`_randomize`): Linear/conv weights N(0, 1/fan_in) (weight-norm: v drawn so, g = |v| *
(1 + 0.05 N)), embeddings N(0, 1), every 1-D parameter 1 + 0.05 N (norm weights, Snake alphas)
or 0.05 N (biases), the zero inits (flow head adaLN and output, acoustic mask embedding) random
as well. Two parts are then scaled down:
* the flow head's rows that predict the Gray-coded duration bits, by TIME_ROW_SCALE: the
  official decoder of those bits turns an output below -2 or from 2 up into a bit outside {0, 1}
  (often a negative or too large duration: an embedding index error), which a trained head
  does not produce and a random one would; damped, the bits stay near the starting noise,
  which at the official noise temperature 0.9 still leaves [-2, 2) in most seeds (README);
* each CNN residual branch, by RESIDUAL_SCALE (`_damp_residuals`): unscaled, the random stacks
  grow the signal 2x per block and float32 rounding with it (measured on the decoder: 1e-3
  absolute error before tanh against a float64 rerun; scaled: 4e-6).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE)]

import tada_oracle_patch as patch  # noqa: E402
from tada.modules.aligner import Aligner, AlignerConfig  # noqa: E402
from tada.modules.decoder import Decoder, DecoderConfig  # noqa: E402
from tada.modules.encoder import Encoder, EncoderConfig  # noqa: E402
from tada.modules.tada import TadaConfig, TadaForCausalLM  # noqa: E402

REPO = HERE.parents[2]
SEED = 20261128
TIME_ROW_SCALE = 0.05
RESIDUAL_SCALE = 0.3
LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
    r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
SPECIALS = [
    "<|begin_of_text|>",
    "<|end_of_text|>",
    "<|reserved_special_token_0|>",
    "<|reserved_special_token_1|>",
    "<|finetune_right_pad_id|>",
    "<|reserved_special_token_2|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eom_id|>",
    "<|eot_id|>",
    "<|python_tag|>",
]
BPE_SIZE = 384
CORPUS = [
    "Hello there, this is a tiny test of the voice model.",
    "The quick brown fox jumps over the lazy dog!",
    "How are you today? I am fine, thank you very much.",
    "Speech synthesis turns text into sound, one token at a time.",
    "Numbers like 12, 345 and 6789 are read out loud, aren't they?",
    "Please call Stella. Ask her to bring these things with her from the store.",
    "The examination and testimony of the experts enabled the commission to conclude.",
    "She sells sea shells by the sea shore, and the shells she sells are sea shells.",
]

LLAMA_COMMON = dict(
    rope_theta=500000.0,
    max_position_embeddings=131072,
    rms_norm_eps=1e-5,
    rope_scaling={
        "rope_type": "llama3",
        "factor": 32.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    },
    hidden_act="silu",
    attention_bias=False,
    mlp_bias=False,
    torch_dtype="float32",
)
# a: 1B-like (tied embeddings as Llama 3.2 1B, no bottleneck); b: 3B-like (grouped kv 3:1,
# untied lm_head, a bottleneck before the flow head, 4 duration bits).
VARIANTS = {
    "a": dict(
        lm=dict(
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=8,
            tie_word_embeddings=True,
            acoustic_dim=16,
            num_time_classes=8,
            head_layers=2,
            head_ffn_ratio=3.0,
            bottleneck_dim=None,
        ),
        encoder=dict(
            hidden_dim=32,
            embed_dim=16,
            num_attn_layers=1,
            num_attn_heads=2,
            attn_dim_feedforward=64,
        ),
        decoder=dict(
            embed_dim=16,
            hidden_dim=32,
            num_attn_layers=2,
            num_attn_heads=4,
            attn_dim_feedforward=64,
            wav_decoder_channels=32,
        ),
        wav2vec2=dict(
            hidden_size=16,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=32,
            conv_dim=[16] * 7,
            num_conv_pos_embeddings=8,
            num_conv_pos_embedding_groups=2,
        ),
        sizes=dict(wav_encoder_width=4, max_seq_len=320),
    ),
    "b": dict(
        lm=dict(
            hidden_size=48,
            intermediate_size=80,
            num_hidden_layers=3,
            num_attention_heads=6,
            num_key_value_heads=2,
            head_dim=8,
            tie_word_embeddings=False,
            acoustic_dim=24,
            num_time_classes=16,
            head_layers=3,
            head_ffn_ratio=2.0,
            bottleneck_dim=40,
        ),
        encoder=dict(
            hidden_dim=24,
            embed_dim=24,
            num_attn_layers=2,
            num_attn_heads=3,
            attn_dim_feedforward=48,
        ),
        decoder=dict(
            embed_dim=24,
            hidden_dim=24,
            num_attn_layers=1,
            num_attn_heads=3,
            attn_dim_feedforward=40,
            wav_decoder_channels=48,
        ),
        wav2vec2=dict(
            hidden_size=24,
            num_hidden_layers=2,
            num_attention_heads=3,
            intermediate_size=40,
            conv_dim=[12] * 7,
            num_conv_pos_embeddings=4,
            num_conv_pos_embedding_groups=3,
        ),
        sizes=dict(wav_encoder_width=2, max_seq_len=320),
    ),
}


def build_tokenizer(folder: Path) -> int:
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.BPE(ignore_merges=True))
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(LLAMA3_SPLIT), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=BPE_SIZE,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(CORPUS, trainer)
    assert tokenizer.get_vocab_size() == BPE_SIZE, tokenizer.get_vocab_size()
    from tokenizers import AddedToken

    tokenizer.add_special_tokens([AddedToken(s, normalized=False, special=True) for s in SPECIALS])
    bos = SPECIALS[0]
    tokenizer.post_processor = processors.Sequence(
        [
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(
                single=f"{bos}:0 $A:0",
                pair=f"{bos}:0 $A:0 {bos}:1 $B:1",
                special_tokens=[(bos, BPE_SIZE)],
            ),
        ]
    )
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(folder / "tokenizer.json"))
    config = {
        "bos_token": SPECIALS[0],
        "eos_token": SPECIALS[1],
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": 131072,
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
    return tokenizer.get_vocab_size()


def _normal_(tensor: torch.Tensor, std: float) -> None:
    tensor.normal_(0.0, std)


def _randomize(module: torch.nn.Module) -> None:
    """Re-draw every parameter (see the module docstring)."""
    embeddings = {
        f"{name}.weight"
        for name, sub in module.named_modules()
        if isinstance(sub, torch.nn.Embedding)
    }
    with torch.no_grad():
        for name, param in module.named_parameters():
            leaf = name.rsplit(".", 1)[-1]
            if name.endswith("parametrizations.weight.original1"):  # weight-norm v
                fan_in = param[0].numel()
                _normal_(param, fan_in**-0.5)
            elif name.endswith("parametrizations.weight.original0"):  # weight-norm g
                continue  # set from v below
            elif name in embeddings:
                _normal_(param, 1.0)
            elif param.dim() >= 2:
                _normal_(param, param[0].numel() ** -0.5)
            elif leaf == "bias":
                _normal_(param, 0.05)
            else:  # norm weights, Snake alphas (..., stored (1, C, 1) so caught above: see next)
                param.copy_(1.0 + 0.05 * torch.randn_like(param))
        for name, param in module.named_parameters():
            if name.endswith("alpha"):  # Snake1d alpha (1, C, 1): positive, near 1
                param.copy_(1.0 + 0.05 * torch.randn_like(param))
            if name.endswith("parametrizations.weight.original0"):
                v = dict(module.named_parameters())[name[: -len("0")] + "1"]
                # g keeps the weight_norm dim (0 for convs and ConvTranspose1d's (in, out, k),
                # 2 for wav2vec2's positional conv): |v| over the dims where g has size 1
                dims = tuple(d for d in range(v.dim()) if param.shape[d] == 1)
                norm = torch.linalg.vector_norm(v, dim=dims, keepdim=True)
                param.copy_(norm * (1.0 + 0.05 * torch.randn_like(norm)))


def _damp_residuals(module: torch.nn.Module) -> None:
    """Each CNN ResidualUnit's branch (its last 1x1 conv's g) times RESIDUAL_SCALE: at full
    scale the 12 residual additions of the random DAC-style stack double the signal per block,
    and float32 rounding grows with it (measured: 10x per block, pre-tanh 1e-3 absolute)."""
    from tada.modules.encoder import ResidualUnit

    with torch.no_grad():
        for sub in module.modules():
            if isinstance(sub, ResidualUnit):
                sub.block[3].parametrizations.weight.original0.mul_(RESIDUAL_SCALE)


def build_lm(spec: dict, vocab: int, folder: Path) -> TadaForCausalLM:
    lm = dict(spec["lm"])
    config = TadaConfig(
        vocab_size=vocab, bos_token_id=BPE_SIZE, eos_token_id=BPE_SIZE + 1, **lm, **LLAMA_COMMON
    )
    model = TadaForCausalLM(config).eval()
    _randomize(model)
    if config.tie_word_embeddings:
        model.tie_weights()
    with torch.no_grad():  # the duration bits' output rows (see module docstring)
        final = model.prediction_head.final_layer.linear.weight  # (acoustic + time, hidden)
        final[config.acoustic_dim :] *= TIME_ROW_SCALE
    model.save_pretrained(folder, safe_serialization=True)
    return model


def build_codec(spec: dict, vocab_folder: Path, folder: Path) -> None:
    from transformers import Wav2Vec2Config

    wav2vec2 = Wav2Vec2Config(
        feat_extract_norm="group", do_stable_layer_norm=False, conv_bias=False, **spec["wav2vec2"]
    )
    (folder / "aligner").mkdir(parents=True, exist_ok=True)
    wav2vec2.to_json_file(folder / "aligner" / patch.WAV2VEC2_CONFIG)
    patch.redirect(folder, vocab_folder)
    with patch.tiny_sizes(**spec["sizes"]):
        encoder = Encoder(EncoderConfig(**spec["encoder"])).eval()
        decoder = Decoder(DecoderConfig(**spec["decoder"])).eval()
    aligner = Aligner(AlignerConfig()).eval()
    for name, module in (("encoder", encoder), ("decoder", decoder), ("aligner", aligner)):
        _randomize(module)
        _damp_residuals(module)
        module.save_pretrained(folder / name, safe_serialization=True)


def build(name: str, spec: dict, out: Path) -> None:
    root = out / f"tada-tiny-{name}"
    if root.exists():
        shutil.rmtree(root)
    torch.manual_seed(SEED)
    vocab = build_tokenizer(root / "model")
    torch.manual_seed(SEED + 1)
    build_lm(spec, vocab, root / "model")
    torch.manual_seed(SEED + 2)
    build_codec(spec, root / "model", root / "codec")
    (root / "tada_tiny_sizes.json").write_text(json.dumps(spec["sizes"], indent=2) + "\n")
    total = sum(p.stat().st_size for p in root.rglob("*") if p.is_file())
    print(f"{root}: {total / 1e6:.2f} MB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "tests" / "fixtures")
    args = parser.parse_args()
    torch.set_num_threads(1)
    for name, spec in VARIANTS.items():
        build(name, spec, args.out)


if __name__ == "__main__":
    main()
