"""Our frame beside its floor on this machine, both measured in the same run (issue 38, item 1).

    .venv/bin/python benchmarks/frame_floor.py --checkpoint assets/checkpoints/Qwen3-TTS-12Hz-0.6B-Base \
        [--format int8] [--decoder-dtype auto|float32|bfloat16|int8] [--frames 26] [--threads 2] [--json out.json]

`--checkpoint` is a folder in the released layout: with model.safetensors (e.g. from
make_random_checkpoint.py) it loads as the app does (`load_model`, int8 calibrated and saved
as there); with the released JSONs only (assets/checkpoints/...) it builds the real-size model
with random weights in memory (`Qwen3TTSModel.from_config`) and quantizes it as `load_model`
does. Speed does not depend on weight values.

In one process it measures the machine (membw.py's read kernels over a 1 GiB buffer, a float32
and a bfloat16 2048^3 product, our int8 kernel at 128 rows) and then times our frame as
engine_bench.py does (talker step, the 15 code-predictor passes, the decoder per frame of the
steady chunks, the rest of the loop).

The floor of each part = its weight bytes per frame at the measured read bandwidth + its FLOPs
per frame at the measured rate of the arithmetic it runs in (the issue's definition: a sum, so
a part that could overlap its reads and its arithmetic perfectly could go below it by at most
the smaller term; the table shows both terms).
* talker step / code predictor: weight_bytes.py's bytes in the format loaded (int8: the layer
  projections at 1 byte + a float32 scale a row, the rest float32); FLOPs 2 x their parameters
  (one row), at the int8 kernel's rate for int8, else the float GEMM rate.
* decoder: its weights are read once per call, so per frame they are divided by the steady
  chunk's frames; FLOPs are what torch's FlopCounterMode counts over one steady chunk of
  `decode_step` (convolutions, matrix products, attention; element-wise work left out) per frame,
  at the GEMM rate of its dtype.
* the rest (sampling, embeddings, chunk assembly): no floor (0).
Ours for the decoder is engine_bench.py's: every chunk of the clip per frame, the short first
one included (with 26 frames: 2 + 4 x 6), so it sits a little above a steady chunk's cost.

Whether the code predictor's weights stay in cache across its 15 passes (the issue's item 4):
its time per pass beside one pass's bytes at the measured bandwidth (a pass that is faster than
that was served from cache), and the read rate of a buffer of one pass's size read again and
again (the cache's rate where it fits) beside the 1 GiB buffer's.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

import soundfile as sf
import torch
from chatterbox_floor import count_flops
from common import REF_CLIP, REF_TEXT, wrap
from engine_bench import split, stream_once, suppress_eos
from membw import measure_kernels
from weight_bytes import DTYPE_BYTES, frame_params

PARTS = ("talker_step", "code_predictor", "decoder", "other")
GEMM_SIZE = 2048
INT8_ROWS = 128  # enough rows that the int8 kernel is bound by arithmetic, not by reads
RESULTS = Path(__file__).resolve().parent / "results"


# ---------------------------------------------------------------- the machine's rates
def _best_s(run, repeats: int) -> float:  # noqa: ANN001
    run()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return best


def gemm_gflops(dtype: torch.dtype, size: int = GEMM_SIZE, repeats: int = 5) -> float:
    """Best rate of a (size x size) @ (size x size) product in `dtype`, GFLOP/s."""
    a, b = torch.randn(size, size).to(dtype), torch.randn(size, size).to(dtype)
    return 2 * size**3 / _best_s(lambda: a @ b, repeats) / 1e9


def int8_gops(size: int = GEMM_SIZE, rows: int = INT8_ROWS, repeats: int = 5) -> float | None:
    """Best rate of our 8-bit layer (Int8Linear: the native kernel where this CPU runs one) on
    (rows x size) @ (size x size)^T, GOP/s; None without an int8 path."""
    from tts_core.quant.linear import Int8Linear, int8_matmul_available

    if not int8_matmul_available():
        return None
    layer, x = Int8Linear(torch.randn(size, size)), torch.randn(rows, size)
    with torch.inference_mode():
        return 2 * rows * size**2 / _best_s(lambda: layer(x), repeats) / 1e9


def machine_rates(size_mb: int, repeats: int) -> dict:
    kernels = measure_kernels(size_mb, repeats)
    return {
        "read_gbps": max(kernels.values()),
        "read_kernels_gbps": kernels,
        "gemm_gflops": {
            "float32": gemm_gflops(torch.float32),
            "bfloat16": gemm_gflops(torch.bfloat16),
        },
        "int8_gops": int8_gops(),
    }


# ---------------------------------------------------------------- the floor (pure arithmetic)
def part_floor(
    bytes_per_frame: float, flops_per_frame: float, read_gbps: float, rate_gflops: float
) -> dict:
    """ms per frame: bytes at `read_gbps` (1e9 B/s), FLOPs at `rate_gflops`, and their sum."""
    bytes_ms = 1000 * bytes_per_frame / (read_gbps * 1e9)
    flops_ms = 1000 * flops_per_frame / (rate_gflops * 1e9)
    return {
        "bytes": bytes_per_frame,
        "flops": flops_per_frame,
        "bytes_ms": bytes_ms,
        "flops_ms": flops_ms,
        "floor_ms": bytes_ms + flops_ms,
    }


def compare(ours_ms: dict[str, float], floors: dict[str, dict]) -> dict:
    """Rows per part and a total: ours, floor, ratio (None where the floor is 0)."""
    rows = {}
    for part in PARTS:
        floor = floors.get(part, {}).get("floor_ms", 0.0)
        rows[part] = {
            "ours_ms": ours_ms[part],
            "floor_ms": floor,
            "ratio": ours_ms[part] / floor if floor else None,
        }
    ours, floor = sum(ours_ms[p] for p in PARTS), sum(r["floor_ms"] for r in rows.values())
    rows["total"] = {"ours_ms": ours, "floor_ms": floor, "ratio": ours / floor if floor else None}
    return rows


def cache_verdict(pass_bytes: float, pass_ms: float, read_gbps: float) -> dict:
    """The code predictor's pass beside its bytes at the memory read rate: a pass faster than
    its bytes can come from memory read (part of) them from cache."""
    from_memory_ms = 1000 * pass_bytes / (read_gbps * 1e9)
    effective_gbps = pass_bytes / (pass_ms / 1000) / 1e9
    return {
        "pass_bytes": pass_bytes,
        "pass_ms": pass_ms,
        "from_memory_ms": from_memory_ms,
        "effective_gbps": effective_gbps,
        "faster_than_memory": pass_ms < from_memory_ms,
    }


# ---------------------------------------------------------------- the model and our frame
def load(folder: Path, fmt: str, chunks: tuple[int, int]):  # noqa: ANN201
    """The model with a float32 decoder (its format is chosen after its FLOPs are counted)."""
    import tts_core
    from tts_core.models.qwen3_tts.model import Qwen3TTSModel
    from tts_core.models.qwen3_tts.quantize import quantize_model

    if (folder / "model.safetensors").is_file():
        return tts_core.load_model(
            folder,
            quantize="int8" if fmt == "int8" else None,
            decoder_dtype=torch.float32,
            warm_chunks=chunks,
        )
    model = Qwen3TTSModel.from_config(folder, dtype=torch.float32)
    if fmt == "int8":
        quantize_model(model)
    return model


def set_decoder_format(model, fmt: str, decoder_format: str, chunks: tuple[int, int]) -> str:  # noqa: ANN001
    """Put the decoder in `decoder_format` (auto: the app's choice, backends/qwen3.py: bfloat16
    with native bf16, else int8 on VNNI where its audio holds the 30 dB gate, else float32;
    ONEDNN_MAX_CPU_ISA below AVX512_CORE_BF16 emulates a CPU without native bf16); returns the
    format it runs in."""
    from tts_core.backends.qwen3 import _native_bf16_cpu
    from tts_core.models.qwen3_tts.codec.int8 import quantize_decoder

    codec = model.speech_tokenizer
    if decoder_format == "auto":
        print("decoder:", codec.choose_decoder_format(_native_bf16_cpu(), int8=fmt == "int8"))
    elif decoder_format == "int8":
        quantize_decoder(codec.decoder)
    else:
        codec.set_decoder_dtype(getattr(torch, decoder_format))
    codec.decoder.warm_up(chunks)
    return codec.decoder.weight_format or str(codec.decoder.dtype).removeprefix("torch.")


def decoder_flops_per_frame(decoder, chunk: int, prefix: int = 8) -> float:  # noqa: ANN001
    """FLOPs torch counts for one steady chunk of `chunk` frames (after `prefix` frames of
    state), per frame."""
    n_q = decoder.config.num_quantizers
    codes = torch.zeros(1, n_q, prefix + chunk, dtype=torch.long)
    state = decoder.init_state(1)
    decoder.decode_step(codes[..., :prefix], state)
    return count_flops(lambda: decoder.decode_step(codes[..., prefix:], state)) / chunk


def time_frame(model, frames: int, first: int, chunk: int) -> dict:  # noqa: ANN001
    from tts_core.models.qwen3_tts.serving.runner import Qwen3Runner

    original_step = Qwen3Runner.talker_step
    suppress_eos(model)
    ref, rate = sf.read(REF_CLIP, dtype="float32")
    voice = model.create_voice(ref, rate, ref_text=REF_TEXT)
    talker = wrap(model.talker, "forward", lambda a, k: a[0].shape[1])
    steps = wrap(Qwen3Runner, "talker_step", lambda a, k: len(a[1]))
    predictor = wrap(model.talker.code_predictor, "predict")
    decoder = wrap(model.speech_tokenizer.decoder, "decode_step", lambda a, k: a[0].shape[-1])
    stream_once(model, voice, min(2, frames), True, first, chunk)  # warm-up
    for calls in (talker, steps, predictor, decoder):
        calls.clear()
    clip = stream_once(model, voice, frames, True, first, chunk)
    parts = split(talker, steps, predictor, decoder)
    loop_ms = 1000 * clip["whole_s"] - parts["prefill_ms"] - parts["decoder_reference_warmup_ms"]
    other = (loop_ms - 1000 * clip["setup_s"] - parts.pop("parts_sum_ms")) / frames
    Qwen3Runner.talker_step = original_step  # wrap replaced the class's method
    return {
        "talker_step": parts["talker_step_ms"],
        "code_predictor": parts["code_predictor_ms"],
        "decoder": parts["decoder_ms_per_frame"],
        "other": max(other, 0.0),
    }


def floors_of(
    folder: Path, fmt: str, decoder_name: str, decoder_flops: float, chunk: int, rates: dict
) -> tuple[dict, dict]:
    """(floors per part, the code predictor's bytes per pass). An int8 decoder's floor counts
    every weight at 1 byte and its FLOPs at the int8 kernel's rate (its float64 attention and
    norms left out): a floor it cannot go below."""
    params = frame_params(folder)
    sizes = params.bytes(fmt)
    gemm = {**rates["gemm_gflops"], "int8": rates["int8_gops"] or rates["gemm_gflops"]["float32"]}
    step_rate = rates["int8_gops"] if fmt == "int8" and rates["int8_gops"] else gemm["float32"]
    read = rates["read_gbps"]
    floors = {
        "talker_step": part_floor(sizes["talker_step"], 2 * params.talker_step, read, step_rate),
        "code_predictor": part_floor(
            sizes["code_predictor"], 2 * params.code_predictor, read, step_rate
        ),
        "decoder": part_floor(
            (1 if decoder_name == "int8" else DTYPE_BYTES[decoder_name])
            * params.decoder_frame
            / chunk,
            decoder_flops,
            read,
            gemm[decoder_name],
        ),
    }
    return floors, {
        "pass_bytes": sizes["code_predictor"] / params.code_predictor_passes,
        "passes": params.code_predictor_passes,
    }


# ---------------------------------------------------------------- report
def _f(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def table(rows: dict, floors: dict) -> str:
    lines = [
        "| part | ours ms | floor ms | bytes ms | FLOPs ms | ours / floor |",
        "|---|--:|--:|--:|--:|--:|",
    ]
    for part, row in rows.items():
        floor = floors.get(part, {})
        lines.append(
            f"| {part} | {_f(row['ours_ms'])} | {_f(row['floor_ms'])} | "
            f"{_f(floor.get('bytes_ms'))} | {_f(floor.get('flops_ms'))} | "
            f"{_f(row['ratio'], 2)} |"
        )
    return "\n".join(lines)


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


def run(args: argparse.Namespace) -> dict:
    torch.set_num_threads(args.threads)
    load_before = load_average()
    rates = machine_rates(args.size_mb, args.repeats)
    chunks = (args.first_chunk, args.chunk)
    model = load(args.checkpoint, args.format, chunks)
    with torch.inference_mode():  # counted in float32: torch does not count our int8 ops
        decoder_flops = decoder_flops_per_frame(model.speech_tokenizer.decoder, args.chunk)
    decoder_name = set_decoder_format(model, args.format, args.decoder_dtype, chunks)
    floors, predictor = floors_of(
        args.checkpoint, args.format, decoder_name, decoder_flops, args.chunk, rates
    )
    ours = time_frame(model, args.frames, args.first_chunk, args.chunk)
    rows = compare(ours, floors)
    pass_ms = ours["code_predictor"] / predictor["passes"]
    cache = cache_verdict(predictor["pass_bytes"], pass_ms, rates["read_gbps"])
    pass_mb = max(1, round(predictor["pass_bytes"] / 2**20))
    cache["same_size_buffer_read_gbps"] = measure_kernels(pass_mb, args.repeats)
    return {
        "checkpoint": str(args.checkpoint),
        "format": args.format,
        "decoder_dtype": decoder_name,
        "onednn_max_cpu_isa": os.environ.get("ONEDNN_MAX_CPU_ISA"),
        "threads": args.threads,
        "frames": args.frames,
        "first_chunk": args.first_chunk,
        "chunk": args.chunk,
        "cpu": cpu_model(),
        "rates": rates,
        "floors": floors,
        "rows": rows,
        "code_predictor_cache": cache,
        "load_average_before": load_before,
        "load_average_after": load_average(),
    }


def report(result: dict) -> str:
    rates, cache = result["rates"], result["code_predictor_cache"]
    same = max(cache["same_size_buffer_read_gbps"].values())
    return "\n".join(
        [
            f"{result['checkpoint']} ({result['format']}, decoder {result['decoder_dtype']}, "
            f"{result['threads']} threads, chunks {result['first_chunk']}+{result['chunk']}) on "
            f"{result['cpu']}; load average {result['load_average_before']} -> "
            f"{result['load_average_after']}",
            f"read {rates['read_gbps']:.1f} GB/s; GEMM float32 {rates['gemm_gflops']['float32']:.0f}, "
            f"bfloat16 {rates['gemm_gflops']['bfloat16']:.0f} GFLOP/s; int8 "
            f"{_f(rates['int8_gops'], 0)} GOP/s",
            table(result["rows"], result["floors"]),
            f"code predictor: {cache['pass_ms']:.2f} ms a pass over {cache['pass_bytes'] / 1e6:.1f} "
            f"MB = {cache['effective_gbps']:.1f} GB/s (memory: {cache['from_memory_ms']:.2f} ms at "
            f"{rates['read_gbps']:.1f} GB/s; a buffer of one pass's size reads at {same:.1f} GB/s): "
            + (
                "faster than memory: (partly) served from cache"
                if cache["faster_than_memory"]
                else "no faster than memory: not shown to be cached (it streams, or time goes "
                "elsewhere)"
            ),
        ]
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoint", type=Path, required=True)
    ap.add_argument("--format", choices=["int8", "float32"], default="int8")
    ap.add_argument(
        "--decoder-dtype", choices=["auto", "float32", "bfloat16", "int8"], default="auto"
    )
    ap.add_argument("--frames", type=int, default=26)
    ap.add_argument("--first-chunk", type=int, default=2)
    ap.add_argument("--chunk", type=int, default=6)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--size-mb", type=int, default=1024, help="membw buffer")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json", type=Path, default=None, help="default: results/frame_floor-*.json")
    args = ap.parse_args()
    result = run(args)
    print(report(result))
    out = args.json or RESULTS / f"frame_floor-{args.checkpoint.name}-{args.format}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
