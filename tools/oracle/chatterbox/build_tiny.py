"""Build the tiny Chatterbox checkpoints in the released layouts: Turbo
`chatterbox-turbo-tiny-{a,b}` and the original English model `chatterbox-english-tiny-{a,b}`
(`build_english`, tiny_patch.ENGLISH_VARIANTS).

    .chatterbox-venv/bin/python tools/oracle/chatterbox/build_tiny.py [--out tests/fixtures]

Writes `<out>/<name>/` for each variant of tiny_patch.VARIANTS:
* `ve.safetensors`, `t3_turbo_v1.safetensors` (with `tfmr.wte.weight`: the official strict load
  needs it, then deletes it), `s3gen_meanflow.safetensors` (with the S3 tokenizer's
  `_mel_filters` / `window` buffers): the official modules' state dicts, released key names,
  deterministic random weights (torch.manual_seed(SEED) before building, see `_randomize`);
* `vocab.json`, `merges.txt`, `added_tokens.json`, `special_tokens_map.json`,
  `tokenizer_config.json`: a byte-level BPE of 400 entries + 9 paralinguistic tags (the
  release's 50276-entry GPT-2 tokenizer cannot be shipped in a tiny fixture);
* `conds.pt`: the built-in voice, made by the official `prepare_conditionals` on a synthetic
  6.48 s 24 kHz clip (6.48 s = 162 tokens x 40 ms, so mel length = 2 x tokens);
* `chatterbox_sizes.json`: the tiny sizes (what tensor shapes cannot say: head counts), the one
  file our loader reads beyond the released set.
Runs in the oracle venv: the weights are made by the official modules.
`--variant chatterbox-turbo-real-random --out /tmp`: the same at the released sizes (benchmarks:
the app served a real-size Turbo, benchmarks/chatterbox_real_size_bench.py).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import soundfile as sf
import torch

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]  # tiny_patch, ../ref_clip

import tiny_patch  # noqa: E402
from ref_clip import synth_voice  # noqa: E402

REPO = HERE.parents[2]
SEED = 20261126
STOP_SPEECH = 6562
REAL_SIZE = "chatterbox-turbo-real-random"  # benchmarks only: built on demand, never committed
REAL_SIZES = {"stop_row_std": 0.45}
TAGS = [
    "[chuckle]",
    "[laugh]",
    "[sigh]",
    "[cough]",
    "[gasp]",
    "[groan]",
    "[sniff]",
    "[clear throat]",
    "[shush]",
]
CORPUS = [
    "Hello there, this is a tiny test of the voice model.",
    "The quick brown fox jumps over the lazy dog!",
    "How are you today? I am fine, thank you very much.",
    "Speech synthesis turns text into sound, one token at a time.",
    "Numbers like 12, 345 and 6789 are read out loud, aren't they?",
]


def _randomize(module: torch.nn.Module) -> None:
    """Break the ones/zeros inits: every 1-D float parameter += 0.05 N(0,1); BatchNorm running
    stats random (mean 0.1 N(0,1), var U(0.5, 1.5)) so eval-mode BN is not the identity."""
    with torch.no_grad():
        for param in module.parameters():
            if param.ndim == 1:
                param.add_(0.05 * torch.randn_like(param))
        for sub in module.modules():
            if isinstance(sub, torch.nn.modules.batchnorm._BatchNorm) and sub.track_running_stats:
                sub.running_mean.copy_(0.1 * torch.randn_like(sub.running_mean))
                sub.running_var.copy_(0.5 + torch.rand_like(sub.running_var))


def _context_sensitive(t3: torch.nn.Module) -> None:
    """GPT-2's init (N(0, 0.02)) next to N(0, 1) token embeddings leaves attention and MLP
    branches ~100x smaller than the residual: the random T3 would predict from the last token
    alone, and a wrong attention would hide in the last digits. Weights N(0, 1/fan_in) and wpe
    N(0, 0.3^2) make every branch O(1), so the prompt, the text and positions all matter."""
    with torch.no_grad():
        for name, param in t3.tfmr.named_parameters():
            if name.startswith("h.") and param.ndim == 2:  # Conv1D weights are [in, out]
                param.normal_(0.0, param.shape[0] ** -0.5)
        t3.tfmr.wpe.weight.normal_(0.0, 0.3)


def _mix_times(s3gen: torch.nn.Module) -> None:
    """The meanflow time mixer starts as [I | 0] (intmeanflow's diagonal init), which ignores r:
    add N(0, 1/fan_in) so the end time r reaches the output and a wrong r shows."""
    with torch.no_grad():
        weight = s3gen.flow.decoder.estimator.time_embed_mixer.weight
        weight.add_(torch.randn_like(weight) * weight.shape[1] ** -0.5)


def _write_tokenizer(folder: Path) -> None:
    from tokenizers import ByteLevelBPETokenizer

    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(
        CORPUS * 4,
        vocab_size=400,
        min_frequency=1,
        special_tokens=["<|endoftext|>"],
        show_progress=False,
    )
    bpe.save_model(str(folder))  # vocab.json + merges.txt (the GPT-2 file format)
    base = len(json.loads((folder / "vocab.json").read_text()))
    added = {tag: base + i for i, tag in enumerate(TAGS)}
    (folder / "added_tokens.json").write_text(json.dumps(added, indent=2) + "\n")
    eot = "<|endoftext|>"
    special = {"bos_token": eot, "eos_token": eot, "unk_token": eot}
    (folder / "special_tokens_map.json").write_text(json.dumps(special, indent=2) + "\n")
    decoder = {
        str(i): {
            "content": tag,
            "lstrip": False,
            "normalized": True,
            "rstrip": False,
            "single_word": False,
            "special": False,
        }
        for tag, i in added.items()
    }
    config = {
        "tokenizer_class": "GPT2Tokenizer",
        "add_prefix_space": False,
        "model_max_length": 1024,
        "added_tokens_decoder": decoder,
        **special,
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")


def _save(module: torch.nn.Module, path: Path) -> None:
    from safetensors.torch import save_file

    state = {key: value.detach().contiguous().clone() for key, value in module.state_dict().items()}
    save_file(state, str(path))


def build(name: str, out: Path) -> Path:
    """A tiny Turbo variant, or REAL_SIZE: the released sizes (the official constructors
    unpatched; no chatterbox_sizes.json, as in a release), random weights, ~1.8 GB."""
    from chatterbox.models.s3gen import S3Gen
    from chatterbox.models.t3 import T3
    from chatterbox.models.voice_encoder import VoiceEncoder

    sizes = REAL_SIZES if name == REAL_SIZE else tiny_patch.VARIANTS[name]
    if name != REAL_SIZE:
        tiny_patch.apply(sizes)
    import chatterbox.tts_turbo as tts_turbo

    folder = out / name
    folder.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(SEED)
    ve = VoiceEncoder()
    hp = tts_turbo.T3Config(text_tokens_dict_size=50276)
    hp.llama_config_name, hp.speech_tokens_dict_size = "GPT2_medium", 6563
    hp.input_pos_emb, hp.speech_cond_prompt_len = None, 375
    hp.use_perceiver_resampler, hp.emotion_adv = False, False
    t3 = T3(hp)
    s3gen = S3Gen(meanflow=True)
    for module in (ve, t3, s3gen):
        _randomize(module)
    _context_sensitive(t3)
    _mix_times(s3gen)
    with torch.no_grad():  # random models then stop after tens of tokens, not 1000
        t3.speech_head.weight[STOP_SPEECH].normal_(0.0, sizes["stop_row_std"])
    _save(ve, folder / "ve.safetensors")
    _save(t3, folder / "t3_turbo_v1.safetensors")
    _save(s3gen, folder / "s3gen_meanflow.safetensors")
    _write_tokenizer(folder)
    if name != REAL_SIZE:
        (folder / "chatterbox_sizes.json").write_text(json.dumps(sizes, indent=2) + "\n")

    clip = folder.parent / f"{name}.ref24k.wav"  # temporary: conds.pt is built from it
    seconds = 15.0 if name == REAL_SIZE else 6.48  # 15 s: the release's longest prompts
    sf.write(clip, synth_voice(24000, duration_s=seconds, seed=3), 24000, subtype="FLOAT")
    model = tts_turbo.ChatterboxTurboTTS.from_local(folder, "cpu")
    model.prepare_conditionals(str(clip))
    model.conds.save(folder / "conds.pt")
    clip.unlink()
    return folder


EN_SPECIAL = ["[STOP]", "[UNK]", "[SPACE]", "[START]", "[PAD]", "[SEP]", "[CLS]", "[MASK]"]
S3TOKENIZER_BUFFERS = ("tokenizer._mel_filters", "tokenizer.window")


def _context_sensitive_llama(t3: torch.nn.Module) -> None:
    """As `_context_sensitive` for the English Llama T3: projection weights N(0, 1/fan_in)
    (nn.Linear is [out, in]) and both learned position tables N(0, 0.3^2), so attention,
    positions and the prompt all matter."""
    with torch.no_grad():
        for name, param in t3.tfmr.named_parameters():
            if name.startswith("layers.") and param.ndim == 2:
                param.normal_(0.0, param.shape[1] ** -0.5)
        t3.text_pos_emb.emb.weight.normal_(0.0, 0.3)
        t3.speech_pos_emb.emb.weight.normal_(0.0, 0.3)


def _write_en_tokenizer(folder: Path) -> None:
    """tokenizer.json: a `tokenizers` BPE over text whose spaces are `[SPACE]` (EnTokenizer's
    input), ids 0.. for EN_SPECIAL ([STOP] = 0, [START] = 3), 200 entries (< the 704 rows)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    trainer = trainers.BpeTrainer(
        vocab_size=200, min_frequency=1, special_tokens=EN_SPECIAL, show_progress=False
    )
    tok.train_from_iterator([t.replace(" ", "[SPACE]") for t in CORPUS * 4], trainer)
    tok.save(str(folder / "tokenizer.json"))


def build_english(name: str, out: Path) -> Path:
    """The original English model (ChatterboxTTS.from_local's files): ve.safetensors,
    t3_cfg.safetensors (Llama T3 with perceiver and emotion), s3gen.safetensors (regular CFM
    estimator, no time mixer; without the S3 tokenizer's `_mel_filters` / `window` buffers,
    which the official S3Tokenizer lists as `ignore_state_dict_missing` and rebuilds, and the
    official loads s3gen non-strict), tokenizer.json, conds.pt (official prepare_conditionals,
    exaggeration 0.5), chatterbox_sizes.json."""
    from chatterbox.models.s3gen import S3Gen
    from chatterbox.models.t3 import T3
    from chatterbox.models.voice_encoder import VoiceEncoder
    from chatterbox.tts import ChatterboxTTS

    sizes = tiny_patch.ENGLISH_VARIANTS[name]
    tiny_patch.apply(sizes)
    folder = out / name
    folder.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(SEED)
    ve, t3, s3gen = VoiceEncoder(), T3(), S3Gen()
    for module in (ve, t3, s3gen):
        _randomize(module)
    _context_sensitive_llama(t3)
    with torch.no_grad():  # random models then stop after tens of tokens, not 1000
        t3.speech_head.weight[STOP_SPEECH].normal_(0.0, sizes["stop_row_std"])
    _save(ve, folder / "ve.safetensors")
    _save(t3, folder / "t3_cfg.safetensors")
    from safetensors.torch import save_file

    state = {
        key: value.detach().contiguous().clone()
        for key, value in s3gen.state_dict().items()
        if key not in S3TOKENIZER_BUFFERS
    }
    save_file(state, str(folder / "s3gen.safetensors"))
    _write_en_tokenizer(folder)
    (folder / "chatterbox_sizes.json").write_text(json.dumps(sizes, indent=2) + "\n")

    clip = folder.parent / f"{name}.ref24k.wav"  # temporary: conds.pt is built from it
    seconds = 15.0 if name == REAL_SIZE else 6.48  # 15 s: the release's longest prompts
    sf.write(clip, synth_voice(24000, duration_s=seconds, seed=3), 24000, subtype="FLOAT")
    model = ChatterboxTTS.from_local(folder, "cpu")
    model.prepare_conditionals(str(clip))
    model.conds.save(folder / "conds.pt")
    clip.unlink()
    return folder


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=REPO / "tests/fixtures")
    names = sorted(tiny_patch.VARIANTS) + sorted(tiny_patch.ENGLISH_VARIANTS)
    parser.add_argument(
        "--variant",
        choices=[*names, REAL_SIZE],
        action="append",
        help=f"default: every tiny one; {REAL_SIZE}: the released sizes",
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    for name in args.variant or names:
        english = name in tiny_patch.ENGLISH_VARIANTS
        folder = (build_english if english else build)(name, args.out)
        total = sum(p.stat().st_size for p in folder.iterdir())
        print(f"{folder}: {total / 1e6:.2f} MB")


if __name__ == "__main__":
    np.set_printoptions(precision=4)
    main()
