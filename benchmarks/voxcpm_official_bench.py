"""Times the official voxcpm==2.0.3 streaming the work of voxcpm_bench.py (oracle venv only).

    .oracle-voxcpm-venv/bin/python benchmarks/voxcpm_official_bench.py \
        --checkpoint /tmp/voxcpm2-random-fp32 --patches 10 --threads 2 \
        --json benchmarks/results/voxcpm/official-float32.json

The official loader takes its dtype from config.json: /tmp/voxcpm2-random says bfloat16 (the
release file), /tmp/voxcpm2-random-fp32 float32 (make_random_voxcpm.py writes both). Loaded as
the oracle tools do: `VoxCPM(path, zipenhancer_model_path=None, enable_denoiser=False,
optimize=False, device="cpu")` (torch.compile is CUDA-only in 2.0.3 anyway). The voice is built
once with the official `build_prompt_cache` (as our `create_voice`), then each run is
`generate_with_prompt_cache_streaming(..., max_len=patches, min_len=2, retry_badcase=False)`:
one audio chunk per patch, as our `stream(chunk_patches=1)`.

Parts (wrapped methods, no library code changed): prompt = `base_lm.forward` +
`residual_lm.forward` (the prefill passes); LM step = `base_lm.forward_step` +
`residual_lm.forward_step`; DiT = `feat_decoder.forward` (UnifiedCFM: Euler, 10 steps, CFG);
LocEnc = `feat_encoder.forward` on one patch; VAE = `audio_vae.decode` (what
`StreamingVAEDecoder.decode_chunk` calls).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from common import REF_CLIP, REF_TEXT, TEXT, wrap
from voxcpm_bench import (
    CFG,
    MODES,
    SEED,
    TIMESTEPS,
    finish,
    load_average,
    peak_rss_mb,
    rss_mb,
    summarize,
)


def stream_once(tts, cache, patches: int) -> dict:
    torch.manual_seed(SEED)
    start = time.perf_counter()
    ttfa, produced, samples, rss = None, 0, 0, 0.0
    chunks = tts.generate_with_prompt_cache_streaming(
        target_text=TEXT,
        prompt_cache=cache,
        min_len=2,
        max_len=patches,
        inference_timesteps=TIMESTEPS,
        cfg_value=CFG,
        retry_badcase=False,
    )
    for audio, _, _ in chunks:
        if ttfa is None and audio.numel():
            ttfa = time.perf_counter() - start
        produced += 1
        samples += audio.numel()
        rss = max(rss, rss_mb())  # while the stream's state is alive
    whole = time.perf_counter() - start
    if produced != patches:
        raise RuntimeError(f"asked for {patches} patches, got {produced}")
    return {"whole_s": whole, "ttfa_s": ttfa, "audio_s": samples / tts.sample_rate, "rss_mb": rss}


def run(args: argparse.Namespace) -> dict:
    from voxcpm.core import VoxCPM

    torch.set_num_threads(args.threads)
    config = json.loads((args.checkpoint / "config.json").read_text(encoding="utf-8"))
    result = {
        "impl": "official voxcpm 2.0.3",
        "checkpoint": str(args.checkpoint),
        "dtype": config["dtype"],
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "patches": args.patches,
        "load_average_start": load_average(),
        "modes": {},
    }
    start = time.perf_counter()
    vox = VoxCPM(
        str(args.checkpoint),
        zipenhancer_model_path=None,
        enable_denoiser=False,
        optimize=False,
        device="cpu",
    )
    result["load_s"] = time.perf_counter() - start
    result["rss_after_load_mb"] = rss_mb()
    result["peak_rss_after_load_mb"] = peak_rss_mb()
    tts = vox.tts_model
    for mode in args.modes:
        cache, voice_s = None, None
        if mode == "ref_text":
            start = time.perf_counter()
            cache = tts.build_prompt_cache(
                prompt_text=REF_TEXT,
                prompt_wav_path=str(REF_CLIP),
                reference_wav_path=str(REF_CLIP),
            )
            voice_s = time.perf_counter() - start
        prefill = [wrap(tts.base_lm, "forward"), wrap(tts.residual_lm, "forward")]
        lm = [wrap(tts.base_lm, "forward_step"), wrap(tts.residual_lm, "forward_step")]
        dit = wrap(tts.feat_decoder, "forward")
        locenc = wrap(tts.feat_encoder, "forward", lambda a, k: a[0].shape[1])
        vae = wrap(tts.audio_vae, "decode")
        stream_once(tts, cache, 2)  # warm-up
        for calls in (*prefill, *lm, dit, locenc, vae):
            calls.clear()
        before = rss_mb()
        run_ = stream_once(tts, cache, args.patches)
        growth = run_["rss_mb"] - before
        for obj, name in (
            (tts.base_lm, "forward"),
            (tts.residual_lm, "forward"),
            (tts.base_lm, "forward_step"),
            (tts.residual_lm, "forward_step"),
            (tts.feat_decoder, "forward"),
            (tts.feat_encoder, "forward"),
            (tts.audio_vae, "decode"),
        ):
            delattr(obj, name)
        base, residual = lm[0].ms(), lm[1].ms()
        result["modes"][mode] = {
            "voice_s": voice_s,
            **summarize(
                patches=args.patches,
                audio_s=run_["audio_s"],
                whole_s=run_["whole_s"],
                ttfa_s=run_["ttfa_s"],
                # the prompt's LocEnc runs outside base_lm here, inside our net.prefill
                prefill_ms=sum(prefill[0].ms())
                + sum(prefill[1].ms())
                + sum(locenc.ms(lambda n: n > 1)),
                lm=[b + r for b, r in zip(base, residual, strict=True)],
                dit=dit.ms(),
                locenc=locenc.ms(lambda n: n == 1),
                vae=vae.ms(),
            ),
            "base_lm_step_ms": sum(base) / max(len(base), 1),
            "residual_lm_step_ms": sum(residual) / max(len(residual), 1),
            "rss_growth_mb": growth,
            "load_average": load_average(),
        }
        print(f"{mode}: {json.dumps(result['modes'][mode])}", flush=True)
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoint", type=Path, default=Path("/tmp/voxcpm2-random-fp32"))
    ap.add_argument("--patches", type=int, default=10)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    finish(run(args), args.json)


if __name__ == "__main__":
    main()
