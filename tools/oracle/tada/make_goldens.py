"""Goldens of the official hume-tada 0.1.9 on the tiny checkpoints (build_tiny.py).

    .tada-venv/bin/python tools/oracle/tada/make_goldens.py [--fixtures DIR] [--threads N]
        [--suffix S]

Writes `<fixtures>/tada-tiny-<v>.golden<S>.npz` for each variant. Every input is drawn here from
fixed seeds and stored beside the official output, so a test feeds our code the same numbers:
* `tok_*`: the tiny tokenizer's ids of TEXTS (transformers' fast tokenizer, no special tokens);
* `gray_*`: the official Gray-code encode/decode of 0..num_time_classes-1 and of noisy bits;
* `aligner_*`: the aligner's CTC logits on the reference clip and the official dynamic-programming
  alignment of the transcript's tokens (`_align_text_tokens`), token positions (1-based) and mask;
* `encoder_*`: `get_encoder_outputs` (wav encoder + local attention with the v2 block mask) and
  the whole `Encoder.forward` (seeded: it adds N(0, 0.5^2) noise at the token frames);
* `lm_*`: the backbone on a random teacher-forced sequence: a prefill of P positions then one
  `forward_one_step` per position with the official cache (hidden states and logits);
* `head_*`: the flow head's velocity, and `_solve_flow_matching` (10 log-SNR steps, acoustic CFG
  1.6 on the cosine schedule) from stored noise and conditions;
* `decoder_*`: the decoder's transformer output and waveform on an expanded sequence (token
  frames random, the others zero, as `_decode_wav` builds it);
* `gen_*` / `extra_*`: whole seeded `generate()` calls on the cloned prompt (prompt tensors
  stored): input ids, output ids, durations, acoustic features, audio. `extra` has
  num_extra_steps=3 (the text is then sampled: repetition penalty, temperature, top-p).
* `fp32_error_<key>`: E = max |golden - official float64 rerun| on the same inputs (the noise
  drawn in float32 as the float32 run draws it): the tests' error model.
"""

from __future__ import annotations

import argparse
import json
import sys
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import numpy as np
import soundfile as sf
import torch

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE)]

import tada_oracle_patch as patch  # noqa: E402
from safetensors.torch import load_file  # noqa: E402
from tada.modules.decoder import Decoder  # noqa: E402
from tada.modules.encoder import Encoder  # noqa: E402
from tada.modules.tada import InferenceOptions, TadaForCausalLM  # noqa: E402
from tada.utils.gray_code import decode_gray_code_to_time, encode_time_with_gray_code  # noqa: E402

REPO = HERE.parents[2]
TEXTS = [
    "Hello there, this is a tiny test.",
    ".Hello",
    "Please call Stella, 12345!",
    "Ünïcödé — “quotes” and 日本語",
    "<|start_header_id|>assistant<|end_header_id|>",
]
PROMPT_TEXT = "Hello there, this is a tiny test."
PROMPT_SECONDS = 2.0
GEN_TEXT = "Please call Stella. Ask her to bring these things."
# The tiny flow head is random: with the official noise temperature 0.9 its duration bits fall
# outside [-2, 2) in most seeds (README, seed_sweep.py); 0.5 keeps them in for these seeds.
GEN_OPTIONS = InferenceOptions(noise_temperature=0.5)
SEEDS = {"encoder": 11, "lm": 12, "head": 13, "decoder": 14, "gen": 15, "extra": 16}


def load(root: Path, dtype=torch.float32):
    sizes = json.loads((root / "tada_tiny_sizes.json").read_text())
    patch.redirect(root / "codec", root / "model")
    with patch.tiny_sizes(**sizes):
        model = TadaForCausalLM.from_pretrained(root / "model", dtype=dtype).eval()
        encoder = Encoder.from_pretrained(str(root / "codec"), subfolder="encoder").eval()
    check_loaded(model, root / "model" / "model.safetensors")
    check_loaded(model.decoder, root / "codec" / "decoder" / "model.safetensors")
    check_loaded(encoder, root / "codec" / "encoder" / "model.safetensors")
    check_loaded(encoder.aligner, root / "codec" / "aligner" / "model.safetensors")
    return model.to(dtype), encoder.to(dtype)


def check_loaded(module: torch.nn.Module, path: Path) -> None:
    """Every tensor of the file is in the module, bit for bit (no silent re-init)."""
    state = module.state_dict()
    for key, value in load_file(path).items():
        if not torch.equal(state[key].to(value.dtype), value):
            raise AssertionError(f"{path}: {key} not loaded")


def reference_audio() -> torch.Tensor:
    audio, rate = sf.read(REPO / "tests" / "fixtures" / "ref_clip_24k.wav", dtype="float32")
    assert rate == 24000
    return torch.from_numpy(audio[: int(PROMPT_SECONDS * rate)])[None]  # (1, S)


@contextmanager
def float32_noise():
    """torch.randn / randn_like draw float32 numbers (cast to the requested dtype): a float64
    rerun then starts from the float32 run's noise."""
    randn, randn_like = torch.randn, torch.randn_like

    def draw(*size, dtype=None, **kwargs):
        return randn(*size, **kwargs).to(dtype or torch.get_default_dtype())

    def draw_like(x, **kwargs):
        return randn(x.shape, device=x.device).to(kwargs.get("dtype") or x.dtype)

    torch.randn, torch.randn_like = draw, draw_like
    try:
        yield
    finally:
        torch.randn, torch.randn_like = randn, randn_like


def tokenizer_cases(model) -> dict:
    ids = [model.tokenizer.encode(t, add_special_tokens=False) for t in TEXTS]
    return {
        "tok_texts": np.array(TEXTS),
        "tok_lengths": np.array([len(i) for i in ids]),
        "tok_ids": np.array([x for i in ids for x in i], dtype=np.int64),
    }


def gray_cases(model) -> dict:
    bits = model.num_time_bits
    values = torch.arange(model.config.num_time_classes)
    code = encode_time_with_gray_code(values, bits)
    torch.manual_seed(3)
    noisy = code + 0.4 * torch.randn(code.shape)
    return {
        "gray_values": values.numpy(),
        "gray_code": code.numpy(),
        "gray_noisy": noisy.numpy(),
        "gray_noisy_decoded": decode_gray_code_to_time(noisy, bits).numpy(),
    }


def prompt_cases(model, encoder) -> tuple[dict, object]:
    audio = reference_audio()
    length = torch.tensor([audio.shape[1]])
    tokens = encoder.aligner.tokenizer.encode(PROMPT_TEXT, add_special_tokens=False)
    text_tokens = torch.tensor([tokens])
    align = encoder.aligner(audio, text_tokens=text_tokens, audio_length=length, return_logits=True)
    enc_out, masks = encoder.get_encoder_outputs(audio, align.token_masks)
    torch.manual_seed(SEEDS["encoder"])
    prompt = encoder(audio, text=[PROMPT_TEXT], audio_length=length, sample_rate=24000)
    out = {
        "prompt_audio": audio.numpy(),
        "prompt_text": np.array(PROMPT_TEXT),
        "aligner_text_tokens": text_tokens.numpy(),
        "aligner_logits": align.logits.numpy(),
        "aligner_positions": align.token_positions.numpy(),
        "aligner_masks": align.token_masks.numpy(),
        "encoder_hidden": enc_out.numpy(),
        "encoder_masks": masks.numpy(),
        "prompt_token_values": prompt.token_values.numpy(),
        "prompt_token_positions": prompt.token_positions.numpy(),
        "prompt_text_tokens": prompt.text_tokens.numpy(),
        "prompt_audio_len": prompt.audio_len.numpy(),
        "prompt_normalized_text": np.array(prompt.text[0]),
    }
    return out, prompt


def lm_inputs(model, seed: int, steps: int = 12) -> dict:
    cfg = model.config
    g = torch.Generator().manual_seed(seed)
    return {
        "ids": torch.randint(0, cfg.vocab_size, (1, steps), generator=g),
        "acoustic": torch.randn(1, steps, cfg.acoustic_dim, generator=g),
        "masks": torch.randint(0, 2, (1, steps), generator=g),
        "before": torch.randint(0, cfg.num_time_classes, (1, steps), generator=g),
        "after": torch.randint(0, cfg.num_time_classes, (1, steps), generator=g),
    }


def lm_run(model, inputs: dict, prefill: int = 5) -> dict:
    """Prefill `prefill` positions with model.model(inputs_embeds=...) then step the rest with
    forward_one_step over the same cache (DynamicCache, as _generate's)."""
    dtype = next(model.parameters()).dtype
    ids, ac = inputs["ids"], inputs["acoustic"].to(dtype)
    masks, before, after = inputs["masks"], inputs["before"], inputs["after"]
    embeds = (
        model.model.embed_tokens(ids)
        + model.acoustic_proj(ac)
        + model.acoustic_mask_emb(masks)
        + model.time_start_embed(before)
        + model.time_end_embed(after)
    )
    out = model.model(
        inputs_embeds=embeds[:, :prefill], use_cache=True, cache_position=torch.arange(prefill)
    )
    hidden, cache = [out.last_hidden_state], out.past_key_values
    for t in range(prefill, ids.shape[1]):
        step = model.forward_one_step(
            input_ids=ids[:, t : t + 1],
            acoustic_features=ac[:, t : t + 1],
            acoustic_masks=masks[:, t : t + 1],
            time_len_before=before[:, t : t + 1],
            time_len_after=after[:, t : t + 1],
            past_key_values=cache,
            use_cache=True,
            cache_position=torch.tensor([t]),
            position_ids=torch.tensor([[t]]),
        )
        hidden.append(step.hidden_states[-1])
        cache = step.past_key_values
    hidden = torch.cat(hidden, dim=1)
    return {"hidden": hidden, "logits": model.lm_head(hidden), "embeds": embeds}


def head_inputs(model, seed: int, rows: int = 3) -> dict:
    cfg = model.config
    g = torch.Generator().manual_seed(seed)
    latent = cfg.acoustic_dim + model.time_dim
    return {
        "x": torch.randn(rows, latent, generator=g),
        "t": torch.rand(rows, generator=g),
        "cond": torch.randn(rows, 1, cfg.hidden_size, generator=g),
        "neg_cond": torch.randn(rows, 1, cfg.hidden_size, generator=g),
        "noise": torch.randn(rows, latent, generator=g) * 0.9,
    }


def head_run(model, inputs: dict) -> dict:
    dtype = next(model.parameters()).dtype
    x, t, cond, neg = (inputs[k].to(dtype) for k in ("x", "t", "cond", "neg_cond"))
    velocity = model.prediction_head(x, t, condition=model.bottleneck_proj(cond.squeeze(1)))
    opts = InferenceOptions()
    solved = model._solve_flow_matching(
        speech=inputs["noise"].to(dtype),
        cond=cond,
        neg_cond=neg,
        num_steps=opts.num_flow_matching_steps,
        acoustic_cfg_scale=opts.acoustic_cfg_scale,
        duration_cfg_scale=opts.duration_cfg_scale,
        cfg_schedule=opts.cfg_schedule,
        time_schedule=opts.time_schedule,
    )
    return {"velocity": velocity, "solved": solved}


def decoder_inputs(model, seed: int) -> dict:
    g = torch.Generator().manual_seed(seed)
    durations = torch.randint(0, model.config.num_time_classes, (14,), generator=g)
    frames = []
    for d in durations.tolist():  # as _decode_wav: (d - 1) zeros then the token frame
        frames += [torch.zeros(max(d - 1, 0), model.decoder.config.embed_dim)]
        frames += [torch.randn(1, model.decoder.config.embed_dim, generator=g) * 1.5]
    frames += [torch.zeros(3, model.decoder.config.embed_dim)]
    expanded = torch.cat(frames)[None]
    return {"expanded": expanded, "masks": (expanded.norm(dim=-1) != 0).long()}


def decoder_run(decoder: Decoder, inputs: dict) -> dict:
    from tada.modules.decoder import _create_segment_attention_mask

    dtype = next(decoder.parameters()).dtype
    x, masks = inputs["expanded"].to(dtype), inputs["masks"]
    hidden = decoder.local_attention_decoder(
        decoder.decoder_proj(x), mask=_create_segment_attention_mask(masks, version="v2")
    )
    return {"hidden": hidden, "wav": decoder.generate(x, token_masks=masks)}


def generate(model, prompt, seed: int, **kwargs) -> dict:
    prompt = replace(prompt)  # generate() casts the prompt's tensors in place
    torch.manual_seed(seed)
    out = model.generate(prompt=prompt, text=GEN_TEXT, inference_options=GEN_OPTIONS, **kwargs)
    return {
        "input_ids": out.input_text_ids,
        "output_ids": out.output_text_ids,
        "time_before": out.time_before,
        "acoustic": out.acoustic_features,
        "audio": out.audio[0],
    }


def run_all(model, encoder, prompt, golden: dict | None) -> dict:
    """Every float case on this model's dtype; inputs are drawn (and stored) on the first run."""
    out = {}
    lm_in = lm_inputs(model, SEEDS["lm"])
    head_in = head_inputs(model, SEEDS["head"])
    dec_in = decoder_inputs(model, SEEDS["decoder"])
    for name, value in lm_run(model, lm_in).items():
        out[f"lm_{name}"] = value
    for name, value in head_run(model, head_in).items():
        out[f"head_{name}"] = value
    for name, value in decoder_run(model.decoder, dec_in).items():
        out[f"decoder_{name}"] = value
    for case, kwargs in (("gen", {}), ("extra", {"num_extra_steps": 3})):
        for name, value in generate(model, prompt, SEEDS[case], **kwargs).items():
            out[f"{case}_{name}"] = value
    if golden is None:  # store the inputs once
        for prefix, inputs in (("lm_in", lm_in), ("head_in", head_in), ("decoder_in", dec_in)):
            for name, value in inputs.items():
                out[f"{prefix}_{name}"] = value
    return out


def as_numpy(values: dict) -> dict:
    return {k: v.detach().numpy() if isinstance(v, torch.Tensor) else v for k, v in values.items()}


def make(root: Path, out_path: Path) -> None:
    model, encoder = load(root)
    with torch.no_grad():
        golden = tokenizer_cases(model) | gray_cases(model)
        prompt_golden, prompt = prompt_cases(model, encoder)
        golden |= prompt_golden
        golden |= as_numpy(run_all(model, encoder, prompt, None))
        model64, encoder64 = load(root, torch.float64)
        prompt64 = replace(prompt, token_values=prompt.token_values.double())
        with float32_noise():
            exact = as_numpy(run_all(model64, encoder64, prompt64, golden))
            torch.manual_seed(SEEDS["encoder"])
            audio = reference_audio().double()
            enc64 = encoder64(
                audio,
                text=[PROMPT_TEXT],
                audio_length=torch.tensor([audio.shape[1]]),
                sample_rate=24000,
            )
            exact["encoder_hidden"] = encoder64.get_encoder_outputs(
                audio, torch.from_numpy(golden["aligner_masks"])
            )[0].numpy()
            exact["prompt_token_values"] = enc64.token_values.numpy()
            exact["aligner_logits"] = encoder64.aligner(
                audio,
                text_tokens=torch.from_numpy(golden["aligner_text_tokens"]),
                audio_length=torch.tensor([audio.shape[1]]),
                return_logits=True,
            ).logits.numpy()
    for key, value in exact.items():
        if key not in golden or not np.issubdtype(np.asarray(value).dtype, np.floating):
            continue
        if np.asarray(value).shape != np.asarray(golden[key]).shape:
            print(f"  {key}: float64 rerun has another shape {np.shape(value)} (no E)")
            continue
        error = float(np.max(np.abs(np.asarray(value) - golden[key]))) if np.size(value) else 0.0
        golden[f"fp32_error_{key}"] = np.array(error)
    for case in ("gen", "extra"):
        same = all(
            np.array_equal(exact[f"{case}_{k}"], golden[f"{case}_{k}"])
            for k in ("output_ids", "time_before")
        )
        print(
            f"  {case}: float64 rerun ids/durations equal: {same}; "
            f"{golden[f'{case}_audio'].shape[-1]} samples"
        )
    np.savez_compressed(out_path, **golden)
    print(f"{out_path}: {out_path.stat().st_size / 1e6:.2f} MB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fixtures", type=Path, default=REPO / "tests" / "fixtures")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--suffix", default="")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    for root in sorted(args.fixtures.glob("tada-tiny-?")):
        make(root, args.fixtures / f"{root.name}.golden{args.suffix}.npz")


if __name__ == "__main__":
    main()
