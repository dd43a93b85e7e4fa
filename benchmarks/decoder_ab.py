"""The codec decoder's steady chunk under exact-streaming options, timed A/B interleaved in one
process (issue 38, item 2): on a busy machine the load then affects every option alike, so
read the ratios, not the times.

    .venv/bin/python benchmarks/decoder_ab.py [--config assets/checkpoints/Qwen3-TTS-12Hz-0.6B-Base] \
        [--rounds 4] [--threads 2] [--int8] [--chunks 4 8] [--before] [--profile] \
        [--json out.json]

The decoder is real size with random weights (speech_tokenizer/config.json; speed does not
depend on the values). Every option decodes the same random codes after the same 8-frame
prefix, each on its own stateful stream (decode_step, every frame exactly once); a round gives
each option its next chunk in turn, and each option's time per frame is the median over rounds.
Options: float32, int8 (`--int8`; codec/int8.py: auto's choice with VNNI and no native bf16;
"rows copied": its convs' im2col rows copied in torch, as before the kernel read them in place)
and bfloat16 (the app's choice where the CPU has native bf16), steady chunks of 6 (the app's) /
12 / 24 frames (`--chunks 4 8` adds sizes, each on its own decoder copy), oneDNN off (torch's
own convolutions), and "copies as before" (`--before`: the elementwise path before session 21,
SnakeBeta one temporary per operation and every conv's input joined to its history with a
copy; the same bits, so its diff to chunk 6 is 0). The audio of each option is compared
with float32 chunk 6 over the frames both decoded (int8 and bf16: their SNR), and with its own
format's chunk 6: chunk sizes of one format must agree (the stream is exact in every format).
Times are wall clock and the process's CPU time (at 1 thread the CPU time hardly depends on
what else the machine runs: compare int8 with float32 there to emulate a CPU without native
bf16).
`--profile` prints the aten operators of one float32 steady chunk by own CPU time, and again
by input shape (which convolutions take torch's slow path instead of oneDNN's).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from tts_core.models import laid_out
from tts_core.models.qwen3_tts.checkpoint import random_speech_tokenizer
from tts_core.models.qwen3_tts.codec import layers
from tts_core.models.qwen3_tts.codec.int8 import quantize_decoder
from tts_core.quant.linear import Int8Linear

REPO = Path(__file__).resolve().parents[1]
PREFIX = 8


@dataclass
class Option:
    name: str
    decoder: object
    chunk: int
    context: object = contextlib.nullcontext
    state: object = None
    done: int = 0  # frames decoded after the prefix
    per_frame_s: list[float] = field(default_factory=list)
    cpu_per_frame_s: list[float] = field(default_factory=list)  # the process's CPU time
    audio: list[torch.Tensor] = field(default_factory=list)


def options(  # noqa: ANN001
    decoder, dtype_bf16: bool, int8: bool = False, chunks=(), before: bool = False, keep=None
) -> list[Option]:
    """The options named by `keep` (all if None). Each steady chunk size other than 6 decodes on
    its own copy of its format's decoder: a layer keeps laid_out.KEEP input shapes, and one
    decoder streaming the prefix and 4+ chunk sizes in turn would lay its weights out anew on
    every call."""
    onednn_off = lambda: torch.backends.mkldnn.flags(enabled=False)  # noqa: E731
    specs = [("float32", 6, ""), ("float32", 12, ""), ("float32", 24, "")]
    specs += [("float32", 6, ", oneDNN off")]
    if int8:
        specs += [("int8", 6, ""), ("int8", 12, ""), ("int8", 6, ", rows copied")]
    if dtype_bf16:
        specs += [("bfloat16", 6, ""), ("bfloat16", 12, ""), ("bfloat16", 6, ", plain calls")]
    specs += [("float32", 6, ", plain calls")]
    for fmt in ("float32", "bfloat16") if dtype_bf16 else ("float32",):
        specs += [(fmt, 6, ", copies as before")] if before else []
        specs += [(fmt, n, "") for n in chunks if n not in (6, 12, 24)]
    contexts = {
        ", oneDNN off": onednn_off,
        ", rows copied": _rows_copied,
        ", plain calls": _plain_calls,
        ", copies as before": _copies_as_before,
    }
    formats = {
        "float32": lambda: decoder,
        "int8": lambda: quantize_decoder(copy.deepcopy(decoder)),
        "bfloat16": lambda: copy.deepcopy(decoder).set_dtype(torch.bfloat16),
    }
    made, decoders = [], {}
    for fmt, chunk, suffix in specs:
        name = f"{fmt} chunk {chunk}{suffix}"
        if keep is not None and not keep(name):
            continue
        if fmt not in decoders:
            decoders[fmt] = formats[fmt]()
        if (fmt, chunk) not in decoders:
            decoders[fmt, chunk] = decoders[fmt] if chunk == 6 else copy.deepcopy(decoders[fmt])
        made.append(Option(name, decoders[fmt, chunk], chunk, contexts.get(suffix, _nothing)))
    return made


def _nothing():
    return contextlib.nullcontext()


@contextlib.contextmanager
def _replaced(owner: object, name: str, value: object):
    """owner.name = value for the block's duration."""
    saved = getattr(owner, name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, saved)


def _plain_calls():
    """Every conv and matmul as a plain call: no weight laid out once (models/laid_out.py)."""
    return _replaced(laid_out, "_usable", lambda weight, x: False)


def _snake_as_before(self, x, out=None):  # noqa: ANN001
    return x + self.inv_beta * torch.pow(torch.sin(x * self.alpha_exp), 2)


def _window_as_before(x, size, history, act):  # noqa: ANN001
    x = x if act is None else act(x)
    if size == 0:
        return x
    if history is None:
        return torch.nn.functional.pad(x, (size, 0))
    joined = torch.cat([history.buffer, x], dim=-1)
    history.buffer.copy_(joined[..., -size:])
    return joined


@contextlib.contextmanager
def _elementwise_as_before():
    """SnakeBeta's five torch operations and each conv's input padded or joined to its
    history with a copy, as before session 21 (the same bits as now)."""
    with (
        _replaced(layers.SnakeBeta, "forward", _snake_as_before),
        _replaced(layers, "window", _window_as_before),
    ):
        yield


@contextlib.contextmanager
def _copies_as_before():
    """The decoder before session 21: the elementwise path as before and its linears as plain
    calls (bfloat16: the same bits; float32: ~1e-7, the laid-out linears' summation order)."""
    with _elementwise_as_before(), _replaced(laid_out.Linear, "forward", torch.nn.Linear.forward):
        yield


def _rows_copied():
    """Int8Conv1d as before its kernel read the windows in place: im2col rows copied in torch."""
    return _replaced(Int8Linear, "windows_native", lambda self, x: False)


def step(option: Option, codes: torch.Tensor) -> None:
    """The option's next chunk: timed, its audio kept."""
    start = PREFIX + option.done
    chunk = codes[..., start : start + option.chunk]
    with option.context():
        began, began_cpu = time.perf_counter(), time.process_time()
        wav = option.decoder.decode_step(chunk, option.state)
        option.per_frame_s.append((time.perf_counter() - began) / option.chunk)
        option.cpu_per_frame_s.append((time.process_time() - began_cpu) / option.chunk)
    option.audio.append(wav.float())
    option.done += option.chunk


def _common(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The samples both decoded (options of longer chunks decode more)."""
    common = min(a.shape[-1], b.shape[-1])
    return a[..., :common], b[..., :common]


def _max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = _common(a, b)
    return float((a - b).abs().max())


def snr_db(reference: torch.Tensor, other: torch.Tensor) -> float:
    noise = (reference.double() - other.double()).pow(2).sum()
    return (
        float("inf")
        if noise == 0
        else float(10 * torch.log10(reference.double().pow(2).sum() / noise))
    )


def run(args: argparse.Namespace) -> dict:
    torch.set_num_threads(args.threads)
    codec = random_speech_tokenizer(args.config / "speech_tokenizer", "cpu", torch.float32)
    decoder = codec.decoder
    cfg = decoder.config
    made = options(
        decoder,
        not args.no_bf16,
        getattr(args, "int8", False),
        getattr(args, "chunks", ()),
        getattr(args, "before", False),
        lambda name: (
            name == "float32 chunk 6" or not args.only or any(w in name for w in args.only)
        ),
    )
    longest = max(o.chunk for o in made)
    generator = torch.Generator().manual_seed(0)
    codes = torch.randint(
        0,
        cfg.codebook_size,
        (1, cfg.num_quantizers, PREFIX + (args.rounds + 1) * longest),
        generator=generator,
    )
    with torch.inference_mode():
        for option in made:  # the prefix, and one chunk each to build the kernels
            option.state = option.decoder.init_state(1)
            with option.context():
                option.audio.append(option.decoder.decode_step(codes[..., :PREFIX], option.state))
            step(option, codes)
            option.per_frame_s.clear()
            option.cpu_per_frame_s.clear()
        for _ in range(args.rounds):
            for option in made:
                step(option, codes)
        profiled = _profile(decoder, codes) if args.profile else None
    base = made[0]
    audio = {option.name: torch.cat(option.audio, dim=-1) for option in made}
    rows = []
    for option in made:
        # the first option of the same format (its chunk 6): chunk sizes of one format must agree
        same = next(o for o in made if o.name.split()[0] == option.name.split()[0])
        ms = 1000 * statistics.median(option.per_frame_s)
        cpu_ms = 1000 * statistics.median(option.cpu_per_frame_s)
        rows.append(
            {
                "option": option.name,
                "ms_per_frame": ms,
                "ratio_to_first": ms / (1000 * statistics.median(base.per_frame_s)),
                "cpu_ms_per_frame": cpu_ms,
                "cpu_ratio_to_first": cpu_ms / (1000 * statistics.median(base.cpu_per_frame_s)),
                "max_abs_diff": _max_diff(audio[base.name], audio[option.name]),
                "same_format_diff": _max_diff(audio[same.name], audio[option.name]),
                "snr_db": snr_db(*_common(audio[base.name], audio[option.name])),
            }
        )
    return {
        "config": str(args.config),
        "threads": args.threads,
        "rounds": args.rounds,
        "rows": rows,
        "profile": profiled,
    }


def _profile(decoder, codes: torch.Tensor) -> str:  # noqa: ANN001
    state = decoder.init_state(1)
    decoder.decode_step(codes[..., :PREFIX], state)
    decoder.decode_step(codes[..., PREFIX : PREFIX + 6], state)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        decoder.decode_step(codes[..., PREFIX + 6 : PREFIX + 12], state)
    by_op = prof.key_averages().table(
        sort_by="self_cpu_time_total", row_limit=15, max_name_column_width=40
    )
    by_shape = prof.key_averages(group_by_input_shape=True).table(
        sort_by="self_cpu_time_total",
        row_limit=12,
        max_name_column_width=30,
        max_shapes_column_width=70,
    )
    return by_op + "\n" + by_shape


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--config", type=Path, default=REPO / "assets" / "checkpoints" / "Qwen3-TTS-12Hz-0.6B-Base"
    )
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--no-bf16", action="store_true")
    ap.add_argument("--int8", action="store_true", help="add the int8 decoder (codec/int8.py)")
    ap.add_argument("--chunks", type=int, nargs="*", default=[], help="more steady chunk sizes")
    ap.add_argument("--before", action="store_true", help='add "copies as before" at chunk 6')
    ap.add_argument(
        "--only",
        nargs="*",
        default=[],
        help="options whose names contain one of these (float32 chunk 6 always)",
    )
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    result = run(args)
    load = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    print(f"decoder A/B, {args.threads} threads, {args.rounds} interleaved rounds; load {load}")
    print(
        "| option | ms a frame (median) | ratio to float32 chunk 6 | CPU ms a frame | CPU ratio "
        "| max abs diff | SNR dB | diff to its format's chunk 6 |"
    )
    print("|---|--:|--:|--:|--:|--:|--:|--:|")
    for row in result["rows"]:
        print(
            f"| {row['option']} | {row['ms_per_frame']:.1f} | {row['ratio_to_first']:.2f} | "
            f"{row['cpu_ms_per_frame']:.1f} | {row['cpu_ratio_to_first']:.2f} | "
            f"{row['max_abs_diff']:.2e} | {row['snr_db']:.1f} | "
            f"{row['same_format_diff']:.2e} |"
        )
    if result["profile"]:
        print(result["profile"])
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
