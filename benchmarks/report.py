"""Markdown for BENCHMARKS.md from bench.py's result dict (tables, floor ratios, targets)."""

from __future__ import annotations

from common import FRAME_S

# The issue's reference figures: the official implementation at 0.6B, random weights, 2 threads,
# greedy, 20 frames, measured on this machine before the benchmark existed (ms/frame, RTF).
ISSUE_OFFICIAL = {"float32": (546, 56, 7.5), "bfloat16": (267, 18, 3.6)}
FLOOR_TARGET = 1.2  # per-frame time at most this multiple of the bandwidth floor
DECODER_TARGET = 5.0  # window W=80/E=12 at least this many times the stateful cost


def _f(value: float | None, digits: int = 1) -> str:
    return "–" if value is None else f"{value:,.{digits}f}"


def _yes(ok: bool) -> str:
    return "**met**" if ok else "**not met**"


def ttfa_bound_ms(ours: dict) -> float:
    """prefill + 2 frames (talker step + code predictor) + one decoder frame."""
    frame = ours["talker_step_ms"] + ours["code_predictor_ms"]
    return ours["prefill_ms"] + 2 * frame + ours["decoder_ms_per_frame"]


def official_frame_ms(official: dict) -> float:
    return official["talker_and_code_predictor_ms_per_frame"] + official["decoder_ms_per_frame"]


def _floor(result: dict, run: dict) -> float:
    return result["floors"][run["model"]][run["dtype"]]["floor_ms"]


def floor_table(result: dict) -> list[str]:
    lines = [
        "| model | dtype | talker step MB | code predictor MB (15 passes) | decoder frame MB "
        "| total MB/frame | floor ms/frame |",
        "|---|---|--:|--:|--:|--:|--:|",
    ]
    for model, entry in result["floors"].items():
        for dtype, value in entry.items():
            if not isinstance(value, dict):
                continue
            size = {k: v / 1e6 for k, v in value["bytes"].items()}
            lines.append(
                f"| {model} | {dtype} | {_f(size['talker_step'])} | {_f(size['code_predictor'])} "
                f"| {_f(size['decoder_frame'])} | {_f(size['total'])} | {_f(value['floor_ms'])} |"
            )
    return lines


def main_table(result: dict) -> list[str]:
    lines = [
        "| model | dtype | mode | impl | time to first audio ms | prefill ms | talker step ms "
        "| code predictor ms | talker + CP ms | decoder ms/frame | other ms/frame "
        "| frame ms | × floor | RTF (per frame) | RTF (whole clip) | whole clip s | peak RSS MB |",
        "|---|---|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for run in result["runs"]:
        key = f"| {run['model']} | {run['dtype']} | {run['mode']} "
        ours, floor = run["ours"], _floor(result, run)
        lines.append(
            key + f"| ours | {_f(ours['time_to_first_audio_ms'])} | {_f(ours['prefill_ms'])} "
            f"| {_f(ours['talker_step_ms'])} | {_f(ours['code_predictor_ms'])} "
            f"| {_f(ours['talker_step_ms'] + ours['code_predictor_ms'])} "
            f"| {_f(ours['decoder_ms_per_frame'])} | {_f(ours['other_ms_per_frame'])} "
            f"| {_f(ours['frame_ms'])} | {_f(ours['frame_ms'] / floor, 2)} "
            f"| {_f(ours['rtf_steady'], 2)} | {_f(ours['rtf_whole_clip'], 2)} "
            f"| {_f(ours['whole_clip_s'], 2)} | {_f(ours['peak_rss_mb'], 0)} |"
        )
        official = run.get("official")
        if official:
            frame = official_frame_ms(official)
            lines.append(
                key + f"| official | {_f(official['time_to_first_audio_s'] * 1000)} "
                f"| {_f(official.get('prefill_ms'))} | {_f(official.get('talker_step_ms'))} "
                f"| {_f(official.get('code_predictor_ms'))} "
                f"| {_f(official['talker_and_code_predictor_ms_per_frame'])} "
                f"| {_f(official['decoder_ms_per_frame'])} | – | {_f(frame)} "
                f"| {_f(frame / floor, 2)} | {_f(frame / (1000 * FRAME_S), 2)} "
                f"| {_f(official['rtf'], 2)} | {_f(official['whole_clip_s'], 2)} "
                f"| {_f(official['peak_rss_mb'], 0)} |"
            )
    return lines


def ttfa_table(result: dict) -> list[str]:
    lines = [
        "| model | dtype | mode | setup ms | decoder warm-up on reference ms (frames) "
        "| prefill ms | first chunk decode ms | time to first audio ms | bound ms | met "
        "| without the warm-up ms | official (whole clip) ms |",
        "|---|---|---|--:|--:|--:|--:|--:|--:|---|--:|--:|",
    ]
    for run in result["runs"]:
        ours, official = run["ours"], run.get("official")
        bound = ttfa_bound_ms(ours)
        whole = _f(official["whole_clip_s"] * 1000) if official else "–"
        lines.append(
            f"| {run['model']} | {run['dtype']} | {run['mode']} | {_f(ours['setup_ms'])} "
            f"| {_f(ours['decoder_reference_warmup_ms'])} ({ours['reference_frames']}) "
            f"| {_f(ours['prefill_ms'])} | {_f(ours['decoder_first_chunk_ms'])} "
            f"| {_f(ours['time_to_first_audio_ms'])} | {_f(bound)} "
            f"| {_yes(ours['time_to_first_audio_ms'] <= bound)} "
            f"| {_f(ours['time_to_first_audio_ms'] - ours['decoder_reference_warmup_ms'])} "
            f"| {whole} |"
        )
    return lines


def decoder_table(result: dict) -> list[str]:
    lines = [
        "| dtype | stateful t=1 | stateful t=C | window W=80, E=12 | window W=25+8, E=8 "
        "| W=80/E=12 ÷ stateful t=1 | W=25+8/E=8 ÷ stateful t=1 |",
        "|---|--:|--:|--:|--:|--:|--:|",
    ]
    for row in result["decoder_modes"]:
        chunked = next(
            v for k, v in row.items() if k.startswith("stateful_t") and k != "stateful_t1"
        )
        base = row["stateful_t1"]
        lines.append(
            f"| {row['dtype']} | {_f(base, 3)} | {_f(chunked, 3)} | {_f(row['window_w80_e12'], 3)} "
            f"| {_f(row['window_w25ctx_e8'], 3)} | {_f(row['window_w80_e12'] / base, 2)} "
            f"| {_f(row['window_w25ctx_e8'] / base, 2)} |"
        )
    return lines


def _chunk_key(row: dict) -> str:
    return next(k for k in row if k.startswith("stateful_t") and k != "stateful_t1")


def targets(result: dict) -> list[str]:
    lines = []
    for run in result["runs"]:
        ratio = run["ours"]["frame_ms"] / _floor(result, run)
        tag = f"{run['model']} {run['dtype']} {run['mode']}"
        lines.append(
            f"- Per-frame time within {FLOOR_TARGET}× the floor, {tag}: "
            f"{ratio:.2f}× — {_yes(ratio <= FLOOR_TARGET)}"
            + (
                f" (official: {official_frame_ms(run['official']) / _floor(result, run):.2f}×)"
                if run.get("official")
                else ""
            )
        )
    for row in result["decoder_modes"]:
        chunk_key = _chunk_key(row)
        ratio = row["window_w80_e12"] / row[chunk_key]
        strict = row["window_w80_e12"] / row["stateful_t1"]
        lines.append(
            f"- Stateful decoding ≥ {DECODER_TARGET:g}× cheaper than W=80/E=12, {row['dtype']}, "
            f"at the engine's chunk size ({chunk_key[len('stateful_t') :]} frames): {ratio:.2f}× — "
            f"{_yes(ratio >= DECODER_TARGET)} (frame by frame, t=1: {strict:.2f}×)"
        )
    for run in result["runs"]:
        ours = run["ours"]
        bound = ttfa_bound_ms(ours)
        official = run.get("official")
        lines.append(
            f"- Time to first audio ≤ prefill + 2 frames + one decoder frame, "
            f"{run['model']} {run['dtype']} {run['mode']}: {ours['time_to_first_audio_ms']:.0f} ms "
            f"vs {bound:.0f} ms ({ours['time_to_first_audio_ms'] / bound:.2f}×) — "
            f"{_yes(ours['time_to_first_audio_ms'] <= bound)}"
            + (f"; official first audio at {official['whole_clip_s']:.1f} s" if official else "")
        )
    return lines


def issue_reference(result: dict) -> list[str]:
    lines = [
        "| dtype | official talker + CP ms/frame (issue / now) | official decoder ms/frame "
        "(issue / now) | official RTF (issue / now) |",
        "|---|--:|--:|--:|",
    ]
    for run in result["runs"]:
        official = run.get("official")
        if not (official and run["model"] == "0.6B" and run["mode"] == "greedy"):
            continue
        issue = ISSUE_OFFICIAL.get(run["dtype"])
        if issue is None:
            continue
        now_rtf = official_frame_ms(official) / (1000 * FRAME_S)
        lines.append(
            f"| {run['dtype']} | {issue[0]} / {_f(official['talker_and_code_predictor_ms_per_frame'])} "
            f"| {issue[1]} / {_f(official['decoder_ms_per_frame'])} | {issue[2]} / {_f(now_rtf, 2)} |"
        )
    return lines if len(lines) > 2 else []


def _kernels(result: dict) -> str:
    kernels = result.get("bandwidth_kernels_gbps") or {}
    return ", ".join(f"{name} {value:.1f} GB/s" for name, value in kernels.items()) or "–"


def header(result: dict) -> list[str]:
    info, settings = result["machine"], result["settings"]
    return [
        "# Benchmarks: our engine vs the official qwen-tts, against the bandwidth floor",
        "",
        "Real-size Qwen3-TTS 12 Hz Base models built from the released configs with random weights "
        "(one seed, `benchmarks/make_random_checkpoint.py`); both implementations read the same "
        "safetensors. Same text, same 3 s reference clip (ICL voice), exactly "
        f"{settings['frames']} generated frames (EOS row of `codec_head` zeroed), "
        f"threads = {settings['threads']}, CPU. Every configuration ran in its own process.",
        "",
        f"- Date: {result['date_utc']}; whole run {result['duration_s'] / 60:.1f} min",
        f"- Machine: {info['cpu']}, {info['cores']} cores, {info['memory_gb']} GiB RAM, "
        f"{info['os']}, Python {info['python']}",
        f"- Measured memory read bandwidth: **{result['read_bandwidth_gbps']:.1f} GB/s** "
        f"(`benchmarks/membw.py`: {settings['membw_mb']} MiB buffer, best of 7 passes, faster of "
        f"{_kernels(result)})",
        f"- Load average at start / end: {info['load_average_start']} / "
        f"{info['load_average_end']} (figures are only meaningful on an otherwise idle machine)",
        f"- Command: `{result['command']}` (everything: `bash benchmarks/run_full.sh`)",
        f"- Streaming: first chunk {settings['first_chunk']} frames, then {settings['chunk']}; "
        "greedy = argmax everywhere; sampled = the checkpoint's defaults with seed 0",
    ]


NOTES = [
    "## How to read this",
    "",
    "- *floor*: weight bytes read per frame (talker step + 15 code-predictor passes + one "
    "incremental decoder frame, computed from the config JSON by `benchmarks/weight_bytes.py`; "
    "embedding rows and KV caches left out) divided by the measured read bandwidth. "
    "`× floor` = frame ms / floor.",
    "- *ours*: `talker step` / `code predictor` / `decoder` are the mean wall times of "
    "`talker.forward` (one position), `code_predictor.predict` (15 passes) and "
    "`decoder.decode_step` per frame during `model.stream`; *other* is the rest of the loop "
    "per frame (sampling, embeddings, chunk assembly). `frame ms` is their sum.",
    "- *official*: `talker + CP` is the per-frame slope of `model.generate` between a "
    "short and a long run (prefill excluded); its decoder is one full `speech_tokenizer.decode` "
    "of reference + generated frames after generation, per decoded frame; its first audio "
    "arrives with the whole clip. Its prefill / talker step / code predictor come from wrapping "
    "`talker.forward` and `code_predictor.generate` (a step's forward runs the code predictor "
    "inside it; the step is the rest).",
    "- RTF = compute seconds per audio second: *per frame* = frame ms / 80 ms, *whole clip* "
    "includes setup, prefill and (ours) the decoder warm-up on the reference.",
    "- Decoder modes: seconds of compute per audio second in steady state (80 frames of left "
    "context given first, new frames arriving one at a time; `benchmarks/decoder_modes.py`).",
]


def render_markdown(result: dict) -> str:
    sections = [
        header(result),
        ["## Targets", "", *targets(result)],
        ["## Bandwidth floor", "", *floor_table(result)],
        ["## Per configuration", "", *main_table(result)],
        ["## Time to first audio (ours)", "", *ttfa_table(result)],
        ["## Decoder cost per audio second (s/s), stateful vs window", "", *decoder_table(result)],
    ]
    reference = issue_reference(result)
    if reference:
        sections.append(
            ["## The issue's official figures (0.6B, greedy) vs this run", "", *reference]
        )
    if result.get("failures"):
        failed = [
            f"- `{f['command']}`: {(f['error'].strip().splitlines() or ['?'])[-1]}"
            for f in result["failures"]
        ]
        sections.append(["## Failed configurations (left out of the tables)", "", *failed])
    sections.append(NOTES)
    return "\n\n".join("\n".join(section) for section in sections) + "\n"
