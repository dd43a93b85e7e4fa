"""Chatterbox Turbo at the released sizes, ours beside the official chatterbox-tts 0.1.7, in one
run: each part (T3 prefill and per token, the flow whole and per streamed pass, HiFT, the Perth
watermark), then ours served through `/v1/audio/speech` (first audio, RTF, N streams at once).

    .chatterbox-venv/bin/python tools/oracle/chatterbox/build_tiny.py \\
        --variant chatterbox-turbo-real-random --out /tmp          # the checkpoint, ~3 GB
    .venv/bin/python benchmarks/chatterbox_real_size_bench.py \\
        [--folder /tmp/chatterbox-turbo-real-random] [--threads 2] [--tokens 50] \\
        [--streams 1,8] [--audio-seconds 4] [--skip official,served] \\
        [--json benchmarks/results/chatterbox_real_size.json]

The checkpoint: the official modules at their released sizes with random weights, in the
released file layout, and a built-in voice made by the official `prepare_conditionals` on a
15 s clip (375 T3 prompt tokens, 250 S3Gen prompt tokens: the release's longest). Both
implementations load that folder (`from_local` / `from_pretrained`) and time the same work on
it: T3 with `--tokens` forced tokens (draws replaced, so both make the same steps; prefill =
a 1-token run, per token = the rest / (n - 1), best of 3); the flow's whole-utterance pass over
n + 3 tokens (2 meanflow steps); HiFT and the watermark per second of audio. Ours adds the
default streaming chunking's passes (`S3GenStream`: first pass, and a later pass) and the T3
prefill for a voice seen before (its prompt's keys and values kept). The official has no
stream: its first audio is its whole clip (T3 + flow + HiFT + watermark).

The floor beside ours (`chatterbox_floor.py`): T3's bytes per step at the measured read
bandwidth, S3Gen's counted FLOPs at the measured float32 GEMM rate, over a 10 s stream
(`FLOOR_TOKENS`) whose S3Gen passes are also timed; with what 8 rows would allow.

Served: `app.py --model FOLDER` in a subprocess with the backend's defaults (int8 T3 where
`auto` keeps it, the stream watermarked); each stream posts one text and reads PCM until
`--audio-seconds` of audio arrived, then closes. First audio = first PCM bytes after the post;
RTF = wall time to that much audio / audio seconds; N streams: all posted at once, aggregate =
audio seconds received / wall seconds. Random weights do not stop on their own, hence the cut.
`uptime` is printed and stored with every figure (2 shared cores: only idle runs count).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OFFICIAL_PYTHON = REPO / ".chatterbox-venv/bin/python"
FOLDER = Path("/tmp/chatterbox-turbo-real-random")
TEXT = "Hello there, this is a test of the real size model, speaking while it is made."
SILENCE = 4299  # S3GEN_SIL
SAMPLE_RATE = 24000
VOICE = "bench-15s"
FLOOR_TOKENS = 250  # 10 s of speech: the floor's stream, past the chunking's ramp


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def best(fn, repeat: int = 3) -> float:  # noqa: ANN001
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


# --- parts, in the implementation's own process -------------------------------------------


def official_parts(folder: Path, tokens: int) -> dict:
    import torch
    from chatterbox.tts_turbo import ChatterboxTurboTTS

    model = ChatterboxTurboTTS.from_local(folder, "cpu")
    cond, gen = model.conds.t3, model.conds.gen
    text = model.tokenizer(TEXT, return_tensors="pt").input_ids
    speech = torch.randint(0, 6561, (tokens,), generator=torch.Generator().manual_seed(1))

    def t3_run(n: int) -> None:
        forced = iter([*speech[:n].tolist(), 6562])
        multinomial = torch.multinomial
        torch.multinomial = lambda probs, num_samples: torch.tensor([[next(forced)]])
        try:
            model.t3.inference_turbo(cond, text, max_gen_len=n)
        finally:
            torch.multinomial = multinomial

    final = torch.cat([speech, torch.full((3,), SILENCE)])

    def flow() -> torch.Tensor:
        return model.s3gen.flow_inference(
            final, ref_dict=dict(gen), n_cfm_timesteps=2, finalize=True
        )

    mel = flow()
    wav = model.s3gen.hift_inference(mel)[0].squeeze(0).numpy()
    seconds = wav.size / SAMPLE_RATE
    one, whole = best(lambda: t3_run(1)), best(lambda: t3_run(tokens))
    return dict(
        t3_prefill_s=one,
        t3_token_ms=1e3 * (whole - one) / (tokens - 1),
        flow_whole_s=best(flow),
        hift_per_audio_s=best(lambda: model.s3gen.hift_inference(mel)) / seconds,
        watermark_per_audio_s=best(
            lambda: model.watermarker.apply_watermark(wav, sample_rate=SAMPLE_RATE)
        )
        / seconds,
        audio_s=seconds,
    )


def our_parts(folder: Path, tokens: int) -> dict:
    import torch

    from tts_core.audio.perth_watermark import PerthWatermarker
    from tts_core.models.chatterbox.chunking import StreamChunking
    from tts_core.models.chatterbox.model import ChatterboxTurboModel
    from tts_core.models.chatterbox.quant import t3_weight_format
    from tts_core.models.chatterbox.sampling import TurboSampling
    from tts_core.models.chatterbox.streaming import S3GenStream, StreamNoise

    start = time.perf_counter()
    model = ChatterboxTurboModel.from_pretrained(folder, quantize="auto")
    load_s = time.perf_counter() - start
    voice = model.builtin_voice
    text = torch.tensor([model.tokenizer.encode(TEXT)])
    speech = torch.randint(0, 6561, (1, tokens), generator=torch.Generator().manual_seed(1))

    def t3_run(n: int) -> None:
        model.t3.generate(
            voice.speaker_emb,
            voice.t3_prompt_tokens,
            text,
            TurboSampling(),
            None,
            forced=speech[0, :n],
        )

    forget = getattr(model.t3, "forget_prefixes", None)  # the voice prefix cache, where built

    def t3_new_voice() -> None:
        if forget is not None:
            forget()
        t3_run(1)

    final = torch.cat([speech, torch.full((1, 3), SILENCE)], dim=1)
    noise = StreamNoise(1, tokens + 3, voice.prompt_feat.shape[1] + 2)

    def flow() -> torch.Tensor:
        return model.flow.inference(
            final,
            voice.prompt_token,
            voice.prompt_feat,
            voice.embedding,
            torch.Generator().manual_seed(1),
        )

    chunking = StreamChunking()
    passes: list[float] = []
    stream = S3GenStream(model.flow, model.hift, voice, noise, chunking)
    cuts = [*chunking.pass_points(tokens), None]
    for n in cuts:
        begin = time.perf_counter()
        stream.push(final if n is None else speech[:, :n], n is None)
        passes.append(time.perf_counter() - begin)
    mel = flow()
    wav = model.hift.inference(mel, torch.Generator().manual_seed(1))[0]
    seconds = wav.numel() / SAMPLE_RATE
    watermarker = PerthWatermarker()
    one_new, one, whole = best(t3_new_voice), best(lambda: t3_run(1)), best(lambda: t3_run(tokens))
    return dict(
        load_s=load_s,
        t3_weights=t3_weight_format(model),
        t3_prefill_new_voice_s=one_new,
        t3_prefill_s=one,
        t3_token_ms=1e3 * (whole - one) / (tokens - 1),
        flow_whole_s=best(flow),
        flow_stream_passes_s=passes,
        stream_chunking=dict(
            first=chunking.first_tokens,
            every=chunking.chunk_tokens,
            flow_prompt=chunking.flow_prompt,
            flow_context=chunking.flow_context,
        ),
        hift_per_audio_s=best(lambda: model.hift.inference(mel, torch.Generator())) / seconds,
        watermark_per_audio_s=best(lambda: watermarker.apply(wav.numpy(), SAMPLE_RATE)) / seconds,
        audio_s=seconds,
        floor=our_floor(model, voice, text, FLOOR_TOKENS),
    )


def our_floor(model, voice, text, tokens: int) -> dict:  # noqa: ANN001
    """chatterbox_floor.py's bound beside ours at steady state: a `tokens`-token stream's S3Gen
    passes timed and counted (FLOPs), the whole-utterance pass counted, T3's bytes per step."""
    import chatterbox_floor as least
    import torch
    from membw import measure_read_bandwidth

    from tts_core.models.chatterbox.chunking import StreamChunking
    from tts_core.models.chatterbox.streaming import S3GenStream, StreamNoise

    model.flow.requires_grad_(False)  # FlopCounterMode's module hooks skip such parameters
    model.hift.requires_grad_(False)
    speech = torch.randint(0, 6561, (1, tokens), generator=torch.Generator().manual_seed(2))
    final = torch.cat([speech, torch.full((1, 3), SILENCE)], dim=1)
    chunking = StreamChunking()

    def stream() -> None:
        noise = StreamNoise(1, tokens + 3, voice.prompt_feat.shape[1] + 2)
        pushed = S3GenStream(model.flow, model.hift, voice, noise, chunking)
        for n in [*chunking.pass_points(tokens), None]:
            pushed.push(final if n is None else speech[:, :n], n is None)

    def whole() -> None:
        mel = model.flow.inference(
            final,
            voice.prompt_token,
            voice.prompt_feat,
            voice.embedding,
            torch.Generator().manual_seed(1),
        )
        model.hift.inference(mel, torch.Generator().manual_seed(1))

    audio_s = (tokens + 3) / 25
    measured = dict(
        read_gbps=measure_read_bandwidth(size_mb=512, repeats=5),
        gemm_gflops=least.gemm_gflops(),
        t3_weight_bytes=least.t3_step_weight_bytes(model.t3),
        cache_bytes_per_position=least.t3_cache_bytes_per_position(model.t3),
        prompt_positions=2 + voice.t3_prompt_tokens.shape[1] + text.shape[1],
        s3gen_stream_flops_per_audio_s=least.count_flops(stream) / audio_s,
        s3gen_whole_flops_per_audio_s=least.count_flops(whole) / audio_s,
        ours_s3gen_stream_s_per_audio_s=best(stream, 2) / audio_s,
        audio_s=audio_s,
    )
    rows = [
        least.floor(
            measured["t3_weight_bytes"],
            measured["cache_bytes_per_position"],
            measured["prompt_positions"],
            measured["s3gen_stream_flops_per_audio_s"],
            measured["read_gbps"],
            measured["gemm_gflops"],
            streams,
        )
        for streams in (1, 8)
    ]
    return dict(measured, rows=rows)


# --- served: ours through /v1 ----------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve(folder: Path, threads: int, voices: Path) -> tuple[subprocess.Popen, str]:
    import httpx

    port = free_port()
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    app = subprocess.Popen(
        [
            sys.executable,
            str(REPO / "app.py"),
            "--model",
            str(folder),
            "--port",
            str(port),
            "--host",
            "127.0.0.1",
            "--voices-dir",
            str(voices),
        ],
        env=env,
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    while app.poll() is None:
        try:
            if httpx.get(f"{url}/v1/models", timeout=5).status_code == 200:
                return app, url
        except httpx.HTTPError:
            pass
        time.sleep(1)
    raise RuntimeError(f"app.py exited: {app.stderr.read()[-2000:]}")


def register_voice(url: str) -> str:
    """The built-in voice's clip (build_tiny.py's 15 s synthetic voice) as a named voice: /v1
    names its voice (the checkpoint's conds.pt is the page's voice without a clip)."""
    import io

    import httpx
    import soundfile as sf

    sys.path.insert(0, str(REPO / "tools/oracle"))
    from ref_clip import synth_voice

    clip = io.BytesIO()
    sf.write(clip, synth_voice(SAMPLE_RATE, duration_s=15.0, seed=3), SAMPLE_RATE, format="WAV")
    while True:  # 503 + Retry-After while the model loads
        made = httpx.post(
            f"{url}/v1/audio/voices",
            data={"name": VOICE},
            files={"file": ("clip.wav", clip.getvalue(), "audio/wav")},
            timeout=600,
        )
        if made.status_code != 503:
            break
        time.sleep(float(made.headers.get("retry-after", 1)))
    made.raise_for_status()
    return VOICE


def one_stream(url: str, seed: int, audio_seconds: float, out: dict) -> None:
    import httpx

    body = {"input": TEXT, "voice": VOICE, "response_format": "pcm", "seed": seed}
    wanted = int(audio_seconds * SAMPLE_RATE) * 2  # int16 PCM
    start, got, first = time.perf_counter(), 0, None
    with httpx.stream("POST", f"{url}/v1/audio/speech", json=body, timeout=600) as response:
        response.raise_for_status()
        for piece in response.iter_bytes():
            first = first or time.perf_counter() - start
            got += len(piece)
            if got >= wanted:
                break
    out.update(
        first_audio_s=first, wall_s=time.perf_counter() - start, audio_s=got / 2 / SAMPLE_RATE
    )


def served(folder: Path, threads: int, streams: list[int], audio_seconds: float) -> dict:
    voices = tempfile.TemporaryDirectory()
    app, url = serve(folder, threads, Path(voices.name))
    try:
        register_voice(url)
        one_stream(url, 0, 1.0, {})  # warm: the voice's first use (cloned, then cached)
        rows = []
        for count in streams:
            before = uptime()
            results = [dict() for _ in range(count)]
            workers = [
                threading.Thread(target=one_stream, args=(url, 1 + i, audio_seconds, r))
                for i, r in enumerate(results)
            ]
            start = time.perf_counter()
            for worker in workers:
                worker.start()
            for worker in workers:
                worker.join()
            wall = time.perf_counter() - start
            audio = sum(r["audio_s"] for r in results)
            rows.append(
                dict(
                    streams=count,
                    aggregate=audio / wall,
                    wall_s=wall,
                    first_audio_s=[r["first_audio_s"] for r in results],
                    rtf=[r["wall_s"] / r["audio_s"] for r in results],
                    load=f"{before} -> {uptime()}",
                )
            )
            print(f"  served, {count} stream(s): aggregate {audio / wall:.2f} audio s per s, "
                  f"first audio median {statistics.median(rows[-1]['first_audio_s']):.2f} s, "
                  f"RTF median {statistics.median(rows[-1]['rtf']):.2f}  ({rows[-1]['load']})",
                  flush=True)  # fmt: skip
        return dict(rows=rows)
    finally:
        app.terminate()
        app.wait(60)
        voices.cleanup()


# --- the table ------------------------------------------------------------------------------


def parts_in(python: Path, impl: str, args: argparse.Namespace) -> dict:
    command = [
        str(python),
        __file__,
        "--parts",
        impl,
        "--folder",
        str(args.folder),
        "--tokens",
        str(args.tokens),
        "--threads",
        str(args.threads),
    ]
    before = uptime()
    done = subprocess.run(command, capture_output=True, text=True, cwd=REPO)
    if done.returncode != 0:
        raise RuntimeError(f"{impl} parts failed: {done.stderr[-3000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["load"] = f"{before} -> {uptime()}"
    return result


def print_parts(parts: dict, tokens: int) -> None:
    rows = [
        ("T3 prefill s (voice seen before)", "t3_prefill_s"),
        ("T3 prefill s (new voice)", "t3_prefill_new_voice_s"),
        ("T3 ms per token", "t3_token_ms"),
        (f"flow, whole pass over {tokens} + 3 tokens, s", "flow_whole_s"),
        ("HiFT s per audio s", "hift_per_audio_s"),
        ("watermark s per audio s", "watermark_per_audio_s"),
    ]
    names = list(parts)
    print(f"{'part':44}" + "".join(f"{n:>14}" for n in names))
    for label, key in rows:
        cells = [parts[n].get(key) for n in names]
        print(
            f"{label:44}" + "".join(f"{c:>14.3f}" if c is not None else f"{'-':>14}" for c in cells)
        )
    ours = parts.get("ours")
    if ours:
        passes = ", ".join(f"{p:.2f}" for p in ours["flow_stream_passes_s"])
        print(f"ours, streamed flow+HiFT passes s ({ours['stream_chunking']}): {passes}")
        print(f"ours, T3 weights: {ours['t3_weights']}, load {ours['load_s']:.1f} s")
        print_floor(ours)


def print_floor(ours: dict) -> None:
    """Ours against the floor, seconds per audio second (one stream), then the floor's
    aggregate at 1 and 8 streams."""
    f = ours["floor"]
    one = f["rows"][0]
    t3_ours = 25 * ours["t3_token_ms"] / 1e3
    print(
        f"floor: read {f['read_gbps']:.1f} GB/s, float32 GEMM {f['gemm_gflops']:.0f} GFLOP/s, "
        f"T3 step {f['t3_weight_bytes'] / 1e6:.0f} MB + {f['cache_bytes_per_position'] / 1e3:.0f}"
        f" kB per position, S3Gen {f['s3gen_stream_flops_per_audio_s'] / 1e9:.1f} GFLOP per "
        f"audio s streamed ({f['s3gen_whole_flops_per_audio_s'] / 1e9:.1f} whole)"
    )
    print(f"{'s per audio s (one stream)':44}{'ours':>14}{'floor':>14}")
    for label, mine, least in (
        ("T3", t3_ours, one["t3_s_per_audio_s"]),
        (
            "S3Gen streamed (flow + HiFT)",
            f["ours_s3gen_stream_s_per_audio_s"],
            one["s3gen_s_per_audio_s"],
        ),
    ):
        print(f"{label:44}{mine:>14.3f}{least:>14.3f}")
    total = t3_ours + f["ours_s3gen_stream_s_per_audio_s"]
    print(f"{'RTF of the parts':44}{total:>14.3f}{one['rtf']:>14.3f}")
    for row in f["rows"]:
        print(
            f"floor, {row['streams']} stream(s): aggregate {row['aggregate']:.2f} audio s per s "
            f"({row['aggregate'] * one['rtf']:.2f}x one stream), RTF {row['rtf']:.2f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--folder", type=Path, default=FOLDER)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=50)
    parser.add_argument("--streams", default="1,8")
    parser.add_argument("--audio-seconds", type=float, default=4.0)
    parser.add_argument("--skip", default="", help="official,served")
    parser.add_argument("--parts", choices=("ours", "official"), help=argparse.SUPPRESS)
    parser.add_argument(
        "--json", type=Path, default=REPO / "benchmarks/results/chatterbox_real_size.json"
    )
    args = parser.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    if args.parts:  # a child: one implementation's parts as one JSON line
        with torch.inference_mode():
            parts = (our_parts if args.parts == "ours" else official_parts)(
                args.folder, args.tokens
            )
        print(json.dumps(parts))
        return
    if not (args.folder / "t3_turbo_v1.safetensors").exists():
        sys.exit(f"{args.folder}: build it first (see this script's doc)")
    skip = set(filter(None, args.skip.split(",")))
    result: dict = dict(
        threads=args.threads,
        tokens=args.tokens,
        cpus=os.cpu_count(),
        torch=torch.__version__,
        parts={},
    )
    result["parts"]["ours"] = parts_in(Path(sys.executable), "ours", args)
    if "official" not in skip and OFFICIAL_PYTHON.exists():
        result["parts"]["official"] = parts_in(OFFICIAL_PYTHON, "official", args)
    print_parts(result["parts"], args.tokens)
    if "served" not in skip:
        streams = [int(n) for n in args.streams.split(",")]
        result["served"] = served(args.folder, args.threads, streams, args.audio_seconds)
    result["uptime"] = uptime()
    print(result["uptime"])
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=1))
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
