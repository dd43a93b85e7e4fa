"""TADA at the released size (1B, random weights), ours beside the official hume-tada 0.1.9, in one
run: per part (the LM step, the flow head, the decoder per second of audio), first audio and RTF.

    .tada-venv/bin/python benchmarks/tada_bench.py build --out /tmp/tada-1b-random   # ~7 GB
    .venv/bin/python benchmarks/tada_bench.py --folder /tmp/tada-1b-random \\
        [--threads 2] [--repeats 3] [--json benchmarks/results/tada_real_size.json]
    # prints the load average before and after each side, the table (LM step, flow head,
    # decoder per audio second, first audio, RTF; official / ours) and each side's peak memory
    # a smoke run of every code path on a small model of the same layout (no figures):
    .tada-venv/bin/python benchmarks/tada_bench.py build --out /tmp/tada-smoke --smoke
    .venv/bin/python benchmarks/tada_bench.py --folder /tmp/tada-smoke --repeats 1

The checkpoint (`build`, in the oracle environment: tools/oracle/tada/setup_venv.sh): the official
classes at the release's sizes (tests/fixtures/tada-release-shapes.json: Llama 3.2 1B + TADA's
defaults; DecoderConfig's defaults), weights drawn as tools/oracle/tada/build_tiny.py draws them
(CNN residual branches damped), saved in the released layout: `model/` (config, safetensors, the
tiny fixtures' own byte-level BPE tokenizer: Llama 3's is not ours to ship; the LM keeps its
128,256-row tables) and `codec/decoder/`. Voice cloning's encoder and aligner are not timed and
not built. `--smoke` shrinks the LM to 1 layer of 256 and the decoder to 1 layer of 128 with 64
CNN channels, so the whole run takes seconds.

Both sides run the same work in their own process: the same synthetic prompt (the transcript
REF_TEXT, one acoustic vector per token drawn from a seeded generator, tokens 5 frames apart),
the text TEXT, the official default InferenceOptions, and every token's durations forced to
FORCED_FRAMES (the Gray-code decoders patched on both sides): a random flow head's durations
are arbitrary and would set the audio length, a trained head gives about this. Timed (wall,
best of --repeats generations, perf_counter):

* LM step: the Llama backbone's call per generated position (text + unconditional rows),
  the prefill call excluded (official: `model.model.forward`; ours: `lm.model.forward`);
* flow head: one CFG solve per position (official `_solve_flow_matching`; ours `generate.solve`);
* decoder per audio second: the whole-utterance decode (official `_decode_wav`; ours
  `decoder.decode`), and ours streamed (`StreamingDecoder.push_block` + its windowed CNN);
* first audio: ours the first non-empty chunk of `model.stream`; the official has no stream, so
  its first audio is its whole generate();
* RTF: wall time / audio seconds of generate() (both) and of model.stream (ours).

Random weights make random speech; the figures are for compute only. The load average is
printed and stored before and after each side, and each side's peak memory (the machine may
be shared: only runs that start and end near load 0 count).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path[:0] = [str(HERE)]

from common import REF_TEXT, TEXT, Calls, wrap  # noqa: E402

SHAPES = REPO / "tests/fixtures/tada-release-shapes.json"
TINY_TOKENIZER = REPO / "tests/fixtures/tada-tiny-a/model"
ORACLE = REPO / "tools/oracle/tada"
OFFICIAL_PYTHONS = [REPO / ".tada-venv/bin/python", Path("/work/wt/tada/.tada-venv/bin/python")]
SAMPLE_RATE = 24000
FRAME_RATE = 50
FORCED_FRAMES = 5  # every token's duration (frames before and after), 100 ms
PROMPT_SEED = 7
SMOKE_LM = dict(
    num_hidden_layers=1,
    hidden_size=256,
    intermediate_size=512,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=64,
)
SMOKE_DECODER = dict(
    hidden_dim=128,
    num_attn_layers=1,
    num_attn_heads=2,
    attn_dim_feedforward=256,
    wav_decoder_channels=64,
)


# --- arithmetic (tests/tada/test_bench_arithmetic.py) --------------------------------------


def audio_seconds(samples: int) -> float:
    return samples / SAMPLE_RATE


def per_audio_second(seconds: float, samples: int) -> float:
    """Compute seconds per second of audio (an RTF for one part)."""
    return seconds / audio_seconds(samples)


def step_ms(calls: Calls, per_run: int) -> float:
    """Mean ms of the one-position calls (size 1) of the best run: `calls` holds `repeats`
    runs of `per_run` such calls each, in order; the best run is the one with the least sum."""
    steps = calls.ms(lambda n: n == 1)
    if not steps or per_run < 1:
        return 0.0
    runs = [steps[i : i + per_run] for i in range(0, len(steps), per_run)]
    return min(sum(run) for run in runs) / per_run


def speedup(ours: float, official: float) -> float:
    """official / ours: > 1 when ours takes less time."""
    return official / ours if ours > 0 else float("inf")


def table(ours: dict, official: dict) -> list[tuple[str, float, float, float]]:
    """(figure, ours, official, official / ours) for the figures both sides have."""
    rows = []
    for key in ("lm_step_ms", "flow_head_ms", "decoder_per_audio_s", "first_audio_s", "rtf"):
        if key in ours and key in official:
            rows.append((key, ours[key], official[key], speedup(ours[key], official[key])))
    return rows


# --- build (oracle environment) -------------------------------------------------------------


def release_configs(smoke: bool) -> tuple[dict, dict]:
    """(TadaConfig kwargs, DecoderConfig kwargs) of the release, shrunk by --smoke."""
    llama = json.loads(SHAPES.read_text())["llama_config"]
    lm = dict(llama, torch_dtype="float32")
    decoder: dict = {}
    if smoke:
        lm |= SMOKE_LM
        decoder |= SMOKE_DECODER
    return lm, decoder


def build(out: Path, smoke: bool) -> None:
    sys.path[:0] = [str(ORACLE / "stubs"), str(ORACLE)]
    import build_tiny
    import tada_oracle_patch as patch
    import torch
    from tada.modules.decoder import Decoder, DecoderConfig
    from tada.modules.tada import TadaConfig, TadaForCausalLM

    if out.exists():
        shutil.rmtree(out)
    (out / "model").mkdir(parents=True)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(TINY_TOKENIZER / name, out / "model" / name)
    lm_kwargs, decoder_kwargs = release_configs(smoke)
    torch.manual_seed(build_tiny.SEED)
    model = TadaForCausalLM(TadaConfig(**lm_kwargs)).eval()
    build_tiny._randomize(model)
    if model.config.tie_word_embeddings:
        model.tie_weights()
    # one model.safetensors as the release (our loader reads no shards): the float32 LM is 5.9 GB,
    # over save_pretrained's default 5 GB shard size
    model.save_pretrained(out / "model", safe_serialization=True, max_shard_size="50GB")
    del model
    patch.redirect(out / "codec", out / "model")
    decoder = Decoder(DecoderConfig(**decoder_kwargs)).eval()
    build_tiny._randomize(decoder)
    build_tiny._damp_residuals(decoder)
    decoder.save_pretrained(out / "codec" / "decoder", safe_serialization=True)
    total = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    print(f"{out}: {total / 1e9:.2f} GB on disk; peak memory {peak_rss_gb():.1f} GB")


# --- the shared work --------------------------------------------------------------------------


def synthetic_prompt(tokens: int, acoustic_dim: int):  # noqa: ANN201 - (values, positions, samples)
    """Per transcript token an acoustic vector N(0, 1) (seeded) and a 1-based frame position
    FORCED_FRAMES apart; the clip ends FORCED_FRAMES after the last token."""
    import torch

    generator = torch.Generator().manual_seed(PROMPT_SEED)
    values = torch.randn(tokens, acoustic_dim, generator=generator)
    positions = 1 + FORCED_FRAMES * torch.arange(tokens, dtype=torch.long)
    samples = int(positions[-1] + FORCED_FRAMES) * SAMPLE_RATE // FRAME_RATE
    return values, positions, samples


def embeds_length(args: tuple, kwargs: dict) -> int:
    """Positions of a LlamaModel call (inputs_embeds by keyword, as tada passes them)."""
    embeds = kwargs.get("inputs_embeds")
    return int((embeds if embeds is not None else args[0]).shape[1])


def forced_durations(values, bits: int):  # noqa: ANN001, ANN201, ARG001
    import torch

    return torch.full(values.shape[:-1], FORCED_FRAMES, dtype=torch.long)


def decoded_frames(encoded, time_before) -> int:  # noqa: ANN001
    """The official `_decode_wav`'s input frames: the durations of the tokens and the tail."""
    return int(time_before[: encoded.shape[0] + 1].sum())


def timed(fn):  # noqa: ANN001, ANN201
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


# --- official ---------------------------------------------------------------------------------


def official_run(folder: Path, repeats: int) -> dict:
    sys.path[:0] = [str(ORACLE / "stubs"), str(ORACLE)]
    import tada_oracle_patch as patch
    import torch
    from tada.modules import tada as tada_module
    from tada.modules.encoder import EncoderOutput
    from tada.modules.tada import InferenceOptions, TadaForCausalLM
    from tada.utils.text import normalize_text

    patch.redirect(folder / "codec", folder / "model")
    start = time.perf_counter()
    model = TadaForCausalLM.from_pretrained(folder / "model").eval()
    load_s = time.perf_counter() - start
    tada_module.decode_gray_code_to_time = forced_durations
    transcript = normalize_text(REF_TEXT)
    tokens = len(model.tokenizer.encode(transcript, add_special_tokens=False))
    values, positions, samples = synthetic_prompt(tokens, model.config.acoustic_dim)

    def prompt() -> EncoderOutput:
        return EncoderOutput(
            audio=torch.zeros(1, samples),
            audio_len=torch.tensor([samples]),
            text=[transcript],
            token_positions=positions[None].clone(),
            token_values=values[None].clone(),
            text_tokens_len=torch.tensor([tokens]),
        )

    backbone = wrap(model.model, "forward", embeds_length)
    flow = wrap(model, "_solve_flow_matching")
    decode = wrap(model, "_decode_wav", lambda a, k: decoded_frames(*a, **k))
    walls, out = [], None
    for repeat in range(repeats):
        torch.manual_seed(repeat)
        with torch.no_grad():
            wall, out = timed(
                lambda: model.generate(
                    prompt=prompt(), text=TEXT, inference_options=InferenceOptions()
                )
            )
        walls.append(wall)
    audio = out.audio[0].numel()
    decoded = decode.sizes[-1] * SAMPLE_RATE // FRAME_RATE  # before the trim
    positions_per_run = len(flow.seconds) // repeats
    return dict(
        load_s=load_s,
        lm_step_ms=step_ms(backbone, positions_per_run),
        flow_head_ms=min(flow.ms()) if flow.seconds else 0.0,
        decoder_per_audio_s=per_audio_second(min(decode.seconds), decoded),
        first_audio_s=min(walls),
        rtf=per_audio_second(min(walls), audio),
        audio_s=audio_seconds(audio),
        positions=positions_per_run,
    )


# --- ours -------------------------------------------------------------------------------------


def our_run(folder: Path, repeats: int) -> dict:

    from tts_core.models.tada import generate as generation
    from tts_core.models.tada import streaming
    from tts_core.models.tada.checkpoint import load_decoder, load_lm
    from tts_core.models.tada.generate import Prompt
    from tts_core.models.tada.model import TadaModel
    from tts_core.models.tada.text import normalize_text
    from tts_core.models.tada.tokenizer import TadaTokenizer

    start = time.perf_counter()
    tokenizer = TadaTokenizer.from_folder(folder / "model")
    model = TadaModel(tokenizer, load_lm(folder / "model"), load_decoder(folder / "codec"),
                      None, None)  # fmt: skip  # no voice cloning here: encoder, aligner unused
    load_s = time.perf_counter() - start
    generation.gray_code.decode = forced_durations
    transcript = normalize_text(REF_TEXT)
    values, positions, samples = synthetic_prompt(
        len(tokenizer.encode(transcript)), model.lm.cfg.acoustic_dim
    )
    prompt = Prompt(values, positions, transcript, samples)
    backbone = wrap(model.lm.model, "forward", lambda a, k: a[0].shape[1])
    flow = wrap(generation, "solve")
    decode = wrap(model.decoder, "decode", lambda a, k: a[0].shape[1])  # frames in
    walls = []
    for repeat in range(repeats):
        wall, audio = timed(lambda: model.generate(prompt, TEXT, seed=repeat))  # noqa: B023
        walls.append(wall)
    positions_per_run = len(flow.seconds) // repeats
    lm_step, flow_ms = step_ms(backbone, positions_per_run), min(flow.ms())
    push = wrap(streaming.StreamingDecoder, "push_block")
    window = wrap(streaming.StreamingDecoder, "_decode")
    firsts, stream_walls, streamed = [], [], 0
    for repeat in range(repeats):
        push.clear()
        window.clear()
        begin, first, streamed = time.perf_counter(), None, 0
        for chunk in model.stream(prompt, TEXT, seed=repeat):
            if first is None and chunk.audio.size:
                first = time.perf_counter() - begin
            streamed += chunk.audio.size
        stream_walls.append(time.perf_counter() - begin)
        firsts.append(first if first is not None else stream_walls[-1])
    stream_decoder = sum(push.seconds) + sum(window.seconds)
    decoded = decode.sizes[-1] * SAMPLE_RATE // FRAME_RATE
    return dict(
        load_s=load_s,
        lm_step_ms=lm_step,
        flow_head_ms=flow_ms,
        decoder_per_audio_s=per_audio_second(min(decode.seconds), decoded),
        stream_decoder_per_audio_s=per_audio_second(stream_decoder, decoded),
        first_audio_s=min(firsts),
        rtf=per_audio_second(min(walls), audio.size),
        stream_rtf=per_audio_second(min(stream_walls), streamed),
        audio_s=audio_seconds(audio.size),
        positions=positions_per_run,
    )


# --- driver -----------------------------------------------------------------------------------


def load_average() -> list[float]:
    """The 1, 5 and 15 minute load averages (an idle machine: all near 0)."""
    return [round(x, 2) for x in os.getloadavg()]


def peak_rss_gb() -> float:
    """This process's peak resident memory (Linux ru_maxrss: KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def official_python(given: str | None) -> Path:
    for candidate in [Path(given)] if given else OFFICIAL_PYTHONS:
        if candidate.exists():
            return candidate
    raise SystemExit("no oracle environment: bash tools/oracle/tada/setup_venv.sh")


def run_side(python: Path, side: str, args: argparse.Namespace) -> dict:
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(REPO), str(ORACLE / "stubs"), str(ORACLE)])
    )
    command = [
        str(python),
        __file__,
        "part",
        "--side",
        side,
        "--folder",
        str(args.folder),
        "--threads",
        str(args.threads),
        "--repeats",
        str(args.repeats),
    ]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{side} failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", nargs="?", default="compare", choices=["compare", "build", "part"])
    parser.add_argument("--folder", type=Path, default=Path("/tmp/tada-1b-random"))
    parser.add_argument("--out", type=Path, help="build: where to write the checkpoint")
    parser.add_argument("--smoke", action="store_true", help="build: the small model")
    parser.add_argument("--side", choices=["ours", "official"])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--official-python")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if args.mode == "build":
        build(args.out or args.folder, args.smoke)
        return
    import torch

    torch.set_num_threads(args.threads)
    if args.mode == "part":
        run = our_run if args.side == "ours" else official_run
        print(json.dumps(run(args.folder, args.repeats) | {"peak_rss_gb": peak_rss_gb()}))
        return
    sides, loads = {}, [load_average()]
    for side, python in (
        ("ours", Path(sys.executable)),
        ("official", official_python(args.official_python)),
    ):
        print(f"load average {loads[-1]} (1, 5, 15 min); running {side}", flush=True)
        sides[side] = run_side(python, side, args)
        loads.append(load_average())
    print(f"load average {loads[-1]} after both")
    ours, official = sides["ours"], sides["official"]
    result = dict(
        folder=str(args.folder),
        threads=args.threads,
        repeats=args.repeats,
        load_average=loads,
        ours=ours,
        official=official,
    )
    print(f"{'figure':24} {'ours':>10} {'official':>10} {'official/ours':>14}")
    for key, mine, theirs, ratio in table(ours, official):
        print(f"{key:24} {mine:10.4g} {theirs:10.4g} {ratio:14.3g}")
    for key in ("stream_decoder_per_audio_s", "stream_rtf", "audio_s", "load_s", "peak_rss_gb"):
        print(f"{key:24} {ours[key]:10.4g} {official.get(key, float('nan')):10.4g}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1) + "\n")
        print(f"written to {args.json}")
    else:
        print(json.dumps(result))


if __name__ == "__main__":
    main()
