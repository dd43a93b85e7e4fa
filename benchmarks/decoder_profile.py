"""Where a steady chunk of the codec decoder goes: aten operators and decoder layers, per format.

    .venv/bin/python benchmarks/decoder_profile.py [--config assets/checkpoints/...-0.6B-Base] \
        [--chunk 6] [--threads 2] [--dtypes float32 bfloat16] [--repeats 3] [--before]

The decoder is real size with random weights (speed does not depend on the values). Each format
decodes an 8-frame prefix and one chunk (kernels built), then `--repeats` profiled chunks; the
tables are their totals divided by the repeats. "by layer" is each module's inclusive CPU time
(record_function around the decoder's stages and the kinds of module inside them), so a row
includes the rows of its children; "ops a chunk" counts every aten and mkldnn call (nested
ones too). `--before`: the decoder as before session 21 (decoder_ab's "copies as before"). On a busy machine
read the shares, not the times.
"""

from __future__ import annotations

import argparse
import contextlib
import time
from pathlib import Path

import decoder_ab
import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile, record_function

from tts_core.models.qwen3_tts.checkpoint import random_speech_tokenizer

REPO = Path(__file__).resolve().parents[1]
PREFIX = 8
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def _labels(decoder: nn.Module) -> dict[nn.Module, str]:
    """A profiler label per module worth a row: the decoder's stages by name, and the kinds of
    module inside them by their class (all SnakeBetas together, all narrow convs together...)."""
    labels = {}
    for name, module in decoder.named_modules():
        if name.count(".") == 1 and name.split(".")[0] in ("upsample", "decoder"):
            labels[module] = f"stage {name}"
        elif name in ("quantizer", "pre_conv", "pre_transformer"):
            labels[module] = f"stage {name}"
        elif type(module).__name__ in ("SnakeBeta", "CausalConv1d", "CausalTransConv1d"):
            channels = getattr(module, "in_channels", None) or module.alpha.numel()
            labels[module] = f"{type(module).__name__} {channels}ch"
    return labels


@contextlib.contextmanager
def _labelled(decoder: nn.Module):
    """record_function around every labelled module's forward."""
    handles, open_ = [], {}

    def enter(module, _args):  # noqa: ANN001
        scope = record_function(labels[module])
        scope.__enter__()
        open_.setdefault(module, []).append(scope)

    def leave(module, _args, _out):  # noqa: ANN001
        open_[module].pop().__exit__(None, None, None)

    labels = _labels(decoder)
    for module in labels:
        handles.append(module.register_forward_pre_hook(enter))
        handles.append(module.register_forward_hook(leave))
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def profile_chunk(decoder, chunk: int, repeats: int) -> tuple[str, str, float, float]:  # noqa: ANN001
    cfg = decoder.config
    generator = torch.Generator().manual_seed(0)
    codes = torch.randint(
        0,
        cfg.codebook_size,
        (1, cfg.num_quantizers, PREFIX + (2 * repeats + 1) * chunk),
        generator=generator,
    )
    state = decoder.init_state(1)
    decoder.decode_step(codes[..., :PREFIX], state)
    decoder.decode_step(codes[..., PREFIX : PREFIX + chunk], state)
    began = time.perf_counter()
    for index in range(1, repeats + 1):  # unprofiled: the wall time a frame
        start = PREFIX + index * chunk
        decoder.decode_step(codes[..., start : start + chunk], state)
    wall_ms = 1000 * (time.perf_counter() - began) / repeats / chunk
    with _labelled(decoder), profile(activities=[ProfilerActivity.CPU]) as prof:
        for index in range(repeats + 1, 2 * repeats + 1):
            start = PREFIX + index * chunk
            decoder.decode_step(codes[..., start : start + chunk], state)
    events = prof.key_averages()
    aten = [e for e in events if e.key.startswith(("aten::", "mkldnn::"))]
    layers = [e for e in events if e.key.startswith(("stage", "Snake", "Causal"))]
    calls = sum(e.count for e in aten) / repeats
    ops = _aten_calls_inside(prof.events())
    by_layer = _table(layers, repeats, chunk, ops=ops)
    return _table(aten, repeats, chunk, self_time=True), by_layer, calls, wall_ms


def _aten_calls_inside(events) -> dict[str, int]:  # noqa: ANN001
    """Per label: the aten calls under its ranges (nested aten calls counted too)."""
    counts: dict[str, int] = {}

    def below(event) -> int:  # noqa: ANN001
        return sum(below(c) + c.name.startswith(("aten::", "mkldnn::")) for c in event.cpu_children)

    for event in events:
        if event.name.startswith(("stage", "Snake", "Causal")):
            counts[event.name] = counts.get(event.name, 0) + below(event)
    return counts


def _table(events, repeats: int, chunk: int, self_time: bool = False, ops=None) -> str:  # noqa: ANN001
    def ms(e) -> float:  # noqa: ANN001
        us = e.self_cpu_time_total if self_time else e.cpu_time_total
        return us / 1000 / repeats / chunk

    rows = sorted(events, key=ms, reverse=True)[:22]
    total = sum(ms(e) for e in events) if self_time else None
    lines = [
        "| name | ms a frame | calls a chunk | aten calls inside a chunk |",
        "|---|--:|--:|--:|",
    ]
    lines += [
        f"| {e.key} | {ms(e):.3f} | {e.count / repeats:.0f} | "
        f"{'' if ops is None else f'{ops.get(e.key, 0) / repeats:.0f}'} |"
        for e in rows
    ]
    if total is not None:
        lines.append(f"| (all aten, self) | {total:.3f} | |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--config", type=Path, default=REPO / "assets" / "checkpoints" / "Qwen3-TTS-12Hz-0.6B-Base"
    )
    ap.add_argument("--chunk", type=int, default=6)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--dtypes", nargs="*", default=list(DTYPES))
    ap.add_argument("--before", action="store_true", help="the decoder as before session 21")
    args = ap.parse_args()
    before = decoder_ab._copies_as_before if args.before else contextlib.nullcontext
    torch.set_num_threads(args.threads)
    codec = random_speech_tokenizer(args.config / "speech_tokenizer", "cpu", torch.float32)
    for name in args.dtypes:
        decoder = codec.decoder.set_dtype(DTYPES[name])  # float32 first: narrowing is one-way
        with torch.inference_mode(), before():
            by_op, by_layer, calls, wall_ms = profile_chunk(decoder, args.chunk, args.repeats)
        load = " ".join(Path("/proc/loadavg").read_text().split()[:3])
        print(f"\n## {name}, chunk {args.chunk}, {args.threads} threads, load {load}")
        print(f"wall {wall_ms:.2f} ms a frame unprofiled; aten + mkldnn ops a chunk: {calls:.0f}")
        print(f"\n### by aten operator (self CPU)\n{by_op}")
        print(f"\n### by layer (inclusive CPU)\n{by_layer}")


if __name__ == "__main__":
    main()
