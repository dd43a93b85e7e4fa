"""Goldens of the official Perth implicit watermarker (resemble-perth 1.0.1), for
tts_core/audio/perth_watermark.py (tests/chatterbox/test_watermark.py).

    .chatterbox-venv/bin/python tools/oracle/chatterbox/make_watermark_goldens.py \
        [--fixtures DIR] [--threads N] [--suffix .t2]

Writes `<fixtures>/perth-watermark.golden.npz`. The input: CLIP_SECONDS of the Chatterbox
reference clip (chatterbox-ref-44k.wav, loaded at 24 kHz as librosa.load does it, from
CLIP_START s), CLIP_SAMPLES long, not a multiple of the hop, so the official's length
rounding shows. Keys:
* `audio_24k`: the input; `wm_24k`: `PerthImplicitWatermarker().apply_watermark(audio, 24000)`;
* its steps: `audio_32k` (librosa soxr_hq), `mag_sub` / `enc_sub`: the normalised dB magnitude's
  lowest `subband` bins before and after the encoder (subband x frames), `wm_32k` (the iSTFT);
* `score_plain`, `score_wm`, `score_wm_head`: the decoder's raw output (before get_watermark's
  clip and round) on the input, on `wm_24k`, and on the first HEAD_SAMPLES of `wm_24k` (a short
  chunk), at 24 kHz (polyphase to 32 kHz, as get_watermark);
* `fp32_error_<key>`: E = max |golden (float32) - the official modules rerun in float64| on the
  same input (perth_net.double(), librosa's resamplers on float64: soxr_hq computes in single
  precision whatever the input, so its own rounding is in neither run); `fp32_error_scores`:
  the largest such error over the three scores and those of the 0.5 s slices of both clips;
* `meta_torch`, `meta_threads`.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import librosa
import numpy as np
import torch

REPO = Path(__file__).resolve().parents[3]
CLIP = REPO / "tests" / "fixtures" / "chatterbox-ref-44k.wav"
CLIP_START, CLIP_SAMPLES = 0.5, 60_010  # 2.5 s + 10 samples at 24 kHz
HEAD_SAMPLES = 7_200  # 0.3 s
SLICE_SAMPLES = 12_000  # 0.5 s: more scores for the scores' E
SR = 24_000


def _official():
    from perth.perth_net.perth_net_implicit.perth_watermarker import PerthImplicitWatermarker

    return PerthImplicitWatermarker()


def _steps(wm, audio: np.ndarray, dtype: torch.dtype) -> dict[str, np.ndarray]:
    """apply_watermark's steps with the official modules, in `dtype` (the float32 run is
    apply_watermark's own code path; float64 only changes the dtype)."""
    from perth.perth_net.perth_net_implicit.utils import cx_to_magphase, magphase_to_cx

    net = wm.perth_net
    hp = net.hp
    sub = net.encoder.subband
    np_dtype = np.float32 if dtype == torch.float32 else np.float64
    audio_32k = librosa.resample(audio.astype(np_dtype), orig_sr=SR, target_sr=hp.sample_rate)
    with torch.inference_mode():
        spec = net.ap.spectrogram(torch.from_numpy(audio_32k.copy()).to(dtype))
        mag, phase = cx_to_magphase(hp, spec)
        enc, _mask = net.encoder(mag[None])
        wm_32k = net.ap.inv_spectrogram(magphase_to_cx(hp, enc[0], phase)).numpy()
    wm_24k = librosa.resample(wm_32k, orig_sr=hp.sample_rate, target_sr=SR)
    return {
        "audio_32k": audio_32k,
        "mag_sub": mag[:sub].numpy(),
        "enc_sub": enc[0, :sub].numpy(),
        "wm_32k": wm_32k,
        "wm_24k": wm_24k,
    }


def _score(wm, audio: np.ndarray, dtype: torch.dtype) -> float:
    """get_watermark's decoder output, unclipped (recorded by a hook), in `dtype`."""
    seen: list[torch.Tensor] = []
    hook = wm.perth_net.decoder.register_forward_hook(lambda m, i, o: seen.append(o.detach()))
    try:
        if dtype == torch.float32:
            wm.get_watermark(audio, sample_rate=SR, round=False)
        else:  # get_watermark casts to float32: its steps in float64
            net = wm.perth_net
            x = librosa.resample(
                audio.astype(np.float64),
                orig_sr=SR,
                target_sr=net.hp.sample_rate,
                res_type="polyphase",
            )
            with torch.inference_mode():
                spec = net.ap.spectrogram(torch.from_numpy(x.copy()))
                from perth.perth_net.perth_net_implicit.utils import cx_to_magphase

                mag, _ = cx_to_magphase(net.hp, spec)
                net.decoder(mag[None])
    finally:
        hook.remove()
    return float(seen[-1][0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fixtures", type=Path, default=REPO / "tests" / "fixtures")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--suffix", default="")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    clip, _ = librosa.load(str(CLIP), sr=SR)  # soxr_hq, as Chatterbox loads a clip
    start = int(CLIP_START * SR)
    audio = np.ascontiguousarray(clip[start : start + CLIP_SAMPLES], dtype=np.float32)
    wm = _official()
    out: dict[str, np.ndarray] = {"audio_24k": audio}
    out["wm_24k"] = wm.apply_watermark(audio, sample_rate=SR).astype(np.float32)
    steps = _steps(wm, audio, torch.float32)
    assert np.array_equal(steps["wm_24k"], out["wm_24k"]), "the steps are not apply_watermark's"
    out.update({key: value for key, value in steps.items() if key != "wm_24k"})
    scored = {
        "score_plain": audio,
        "score_wm": out["wm_24k"],
        "score_wm_head": out["wm_24k"][:HEAD_SAMPLES],
    }
    for key, signal in scored.items():
        out[key] = np.array(_score(wm, signal, torch.float32), dtype=np.float32)

    wm.perth_net.double()
    exact = _steps(wm, audio, torch.float64)
    for key, signal in scored.items():
        exact[key] = _score(wm, signal.astype(np.float64), torch.float64)
    # one scalar's error is a poor estimate of another run's (its rounding errors may cancel):
    # the largest over many scores is the scores' E (the three above, 0.5 s slices of both)
    errors = [abs(float(out[key]) - exact[key]) for key in scored]
    for start in range(0, CLIP_SAMPLES - SLICE_SAMPLES + 1, SLICE_SAMPLES):
        for signal in (audio, out["wm_24k"]):
            piece = signal[start : start + SLICE_SAMPLES]
            wm.perth_net.float()
            f32 = _score(wm, piece, torch.float32)
            wm.perth_net.double()
            errors.append(abs(f32 - _score(wm, piece.astype(np.float64), torch.float64)))
    out["fp32_error_scores"] = np.array(max(errors))
    print(f"scores: E {max(errors):.3g} (max over {len(errors)} scores)")
    for key, value in exact.items():
        error = np.abs(out[key].astype(np.float64) - np.asarray(value, dtype=np.float64)).max()
        out[f"fp32_error_{key}"] = np.array(error)
        print(f"{key}: E {error:.3g} (max |golden| {np.abs(out[key]).max():.3g})")
    for key in scored:
        print(f"{key}: {float(out[key]):.6f}")
    out["meta_torch"] = np.array(torch.__version__)
    out["meta_threads"] = np.array(torch.get_num_threads())
    path = args.fixtures / f"perth-watermark.golden{args.suffix}.npz"
    np.savez_compressed(path, **out)
    print(f"wrote {path} ({path.stat().st_size / 1e6:.2f} MB)")


if __name__ == "__main__":
    main()
