"""The benchmark keeps working: weight-bytes arithmetic and a quick end-to-end run (ours only).

The official side needs .oracle-venv and real-size checkpoints; it is run by hand
(`bash benchmarks/run_full.sh`), not here.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"
RELEASED = ROOT / "assets" / "checkpoints"
TINY = ROOT / "tests" / "fixtures" / "qwen3-tiny-a"
sys.path.insert(0, str(BENCH))

from weight_bytes import frame_params  # noqa: E402

# The spec's table (qwen3-tts-12hz.md §2.2): bf16 MB per frame (1e6 bytes, one decimal).
SPEC_BF16_MB = {
    "0.6B": {
        "talker_step": 887.2,
        "code_predictor": 2422.6,
        "decoder_frame": 211.3,
        "total": 3521.1,
    },
    "1.7B": {
        "talker_step": 2831.4,
        "code_predictor": 2485.5,
        "decoder_frame": 211.3,
        "total": 5528.2,
    },
}


def _released(model: str) -> Path:
    return RELEASED / f"Qwen3-TTS-12Hz-{model}-Base"


@pytest.mark.parametrize("model", sorted(SPEC_BF16_MB))
def test_weight_bytes_per_frame_match_the_spec_table(model: str) -> None:
    sizes = frame_params(_released(model)).bytes("bfloat16")
    assert {k: round(v / 1e6, 1) for k, v in sizes.items()} == SPEC_BF16_MB[model]
    assert frame_params(_released(model)).bytes("float32")["total"] == 2 * sizes["total"]


def _count(modules) -> int:
    return sum(p.numel() for module in modules for p in module.parameters())


def test_weight_bytes_arithmetic_matches_our_modules() -> None:
    """The formulas count exactly the parameters of the modules a frame runs (tiny config)."""
    from tts_core.models.qwen3_tts.codec import CodecDecoder, load_speech_tokenizer_config
    from tts_core.models.qwen3_tts.config import load_config
    from tts_core.models.qwen3_tts.talker import Talker

    with torch.device("meta"):
        talker = Talker(load_config(TINY).talker)
        decoder = CodecDecoder(load_speech_tokenizer_config(TINY / "speech_tokenizer").decoder)
    predictor = talker.code_predictor
    one_pass = [predictor.model.layers, predictor.model.norm, predictor.lm_head[0]]
    one_pass.append(predictor.small_to_mtp_projection)
    # Codebook tables are gathered row by row; the RVQ input_proj only serves encoding.
    skipped = [
        p.numel()
        for name, p in decoder.named_parameters()
        if "._codebook." in name or name.endswith("input_proj.weight") and "rvq" in name
    ]
    params = frame_params(TINY)
    assert params.talker_step == _count([talker.model.layers, talker.model.norm, talker.codec_head])
    assert params.code_predictor == params.code_predictor_passes * _count(one_pass)
    assert params.decoder_frame == _count([decoder]) - sum(skipped)


@pytest.mark.slow
def test_quick_mode_runs_end_to_end(tmp_path: Path) -> None:
    command = [sys.executable, str(BENCH / "bench.py"), "--quick", "--threads", "1"]
    done = subprocess.run(
        [*command, "--out-dir", str(tmp_path)], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    result = json.loads((tmp_path / "results.json").read_text())
    assert result["read_bandwidth_gbps"] > 0
    floor = result["floors"]["tiny-a"]["float32"]
    assert floor["bytes"]["total"] == 4 * frame_params(TINY).total
    float_run, int8_run = result["runs"]
    assert (float_run["dtype"], int8_run["dtype"]) == ("float32", "int8")
    assert result["floors"]["tiny-a"]["int8"]["bytes"]["total"] < floor["bytes"]["total"]
    ours = float_run["ours"]
    assert ours["frames"] == int8_run["ours"]["frames"] == 4 and "official" not in float_run
    assert ours["talker_steps"] == 3  # the wrappers saw the loop: one step between frames
    # create_voice decodes the reference once and caches that decoder state in the voice, before
    # the wrappers are installed: no reference frame is decoded during the stream
    assert ours["reference_frames"] == 0
    parts = ours["talker_step_ms"] + ours["code_predictor_ms"] + ours["decoder_ms_per_frame"]
    assert ours["frame_ms"] == pytest.approx(parts + ours["other_ms_per_frame"])
    assert min(parts, ours["prefill_ms"], ours["peak_rss_mb"]) > 0
    first_audio_floor = ours["prefill_ms"] + ours["decoder_reference_warmup_ms"]
    assert ours["time_to_first_audio_ms"] >= first_audio_floor
    assert ours["whole_clip_s"] * 1000 >= ours["time_to_first_audio_ms"]
    (modes,) = result["decoder_modes"]
    costs = [modes[k] for k in ("stateful_t1", "stateful_t6", "window_w80_e12", "window_w25ctx_e8")]
    assert min(costs) > 0
    markdown = (tmp_path / "results.md").read_text()
    for heading in ("## Targets", "## Bandwidth floor", "## Per configuration", "## Decoder cost"):
        assert heading in markdown
    assert "| tiny-a | float32 | greedy | ours |" in markdown


def test_isa_bench_runs_a_configuration_and_writes_its_row(tmp_path: Path) -> None:
    command = [
        sys.executable,
        str(BENCH / "isa_bench.py"),
        "--checkpoint",
        str(TINY),
        "--frames",
        "4",
        "--threads",
        "1",
        "--only",
        "int8 torch._int_mm",
        "--out",
        str(tmp_path),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    (row,) = json.loads((tmp_path / "summary.json").read_text())
    assert row["label"] == "int8 torch._int_mm" and row["env"] == {"TTS_CORE_NATIVE_ISA": "torch"}
    assert row["frame_ms"] > 0 and "| int8 torch._int_mm |" in done.stdout


def test_served_bench_times_a_request_through_the_real_app(tmp_path: Path) -> None:
    out = tmp_path / "served.json"
    command = [
        sys.executable,
        str(BENCH / "served_bench.py"),
        "--model",
        str(TINY),
        "--requests",
        "2",
        "--json",
        str(out),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    result = json.loads(out.read_text())
    assert result["weight_format"] == "int8" and result["weight_format_reason"].startswith("int8")
    for run in result["requests"]:
        assert 0 < run["first_byte_ms"] < 1000 * run["wall_s"] and run["audio_s"] > 0
        cpu = run["cpu_ms_per_audio_s"]  # the request's CPU by thread: the model ran
        assert set(cpu) == {"event_loop", "model", "other"} and cpu["model"] > 0


def test_served_bench_splits_the_cpu_of_a_request_by_thread() -> None:
    """The main thread is the event loop; the `team` busiest others the model's; the rest
    other. A thread new in the second snapshot counts from zero."""
    from served_bench import cpu_shares

    before = {1: 1.0, 2: 10.0, 3: 10.0, 4: 0.5}
    after = {1: 1.25, 2: 14.0, 3: 13.5, 4: 0.75, 5: 0.5}
    shares = cpu_shares(1, before, after, team=2)
    assert shares == {"event_loop": 0.25, "model": 7.5, "other": 0.75}


def test_chatterbox_floor_counts_what_a_step_reads_and_a_pass_computes() -> None:
    """chatterbox_floor: T3's step bytes are its blocks, ln_f and speech head in the format they
    run in (int8 after quantizing: about a quarter of float32's projection bytes); the FLOP
    count of a known product is 2 M N K; the floor's arithmetic on round numbers."""
    import chatterbox_floor as least

    from tts_core.models.chatterbox.model import ChatterboxTurboModel

    folder = ROOT / "tests" / "fixtures" / "chatterbox-turbo-tiny-a"
    model = ChatterboxTurboModel.from_pretrained(folder, quantize="none")
    t3 = model.t3
    hidden, layers = t3.tfmr.wpe.weight.shape[1], len(t3.tfmr.h)
    block_params = sum(p.numel() for p in t3.tfmr.h.parameters())
    head = sum(p.numel() for p in (*t3.tfmr.ln_f.parameters(), *t3.speech_head.parameters()))
    assert least.t3_step_weight_bytes(t3) == 4 * (block_params + head)
    assert least.t3_cache_bytes_per_position(t3) == layers * 2 * hidden * 4
    float_bytes = least.t3_step_weight_bytes(t3)
    int8 = ChatterboxTurboModel.from_pretrained(folder, quantize="int8")
    projections = sum(
        m.weight.numel()
        for name, m in t3.tfmr.h.named_modules()
        if name.endswith(("c_attn", "c_proj", "c_fc"))
    )
    saved = float_bytes - least.t3_step_weight_bytes(int8.t3)
    # 4 -> 1 byte a weight, less 8 bytes a row (scale, column sum): 6 % of the tiny rows
    assert 3 * projections * 0.9 < saved <= 3 * projections

    a, b = torch.randn(3, 5), torch.randn(5, 7)
    assert least.count_flops(lambda: a @ b) == 2 * 3 * 5 * 7

    one = least.floor(
        10**9, 10**6, 100, 1e11, read_gbps=10.0, gemm_gflops_rate=100.0, streams=1, audio_s=8.0
    )
    # per step 1e9 + 1e6 (100 + 200 / 2) bytes at 10 GB/s, 25 steps; 1e11 FLOP at 100 GFLOP/s
    assert one["t3_s_per_audio_s"] == pytest.approx(25 * (1e9 + 2e8) / 1e10)
    assert one["s3gen_s_per_audio_s"] == pytest.approx(1.0)
    assert one["rtf"] == pytest.approx(4.0) and one["aggregate"] == pytest.approx(0.25)
    eight = least.floor(10**9, 10**6, 100, 1e11, 10.0, 100.0, streams=8, audio_s=8.0)
    assert eight["t3_s_per_audio_s"] == pytest.approx(25 * (1e9 + 8 * 2e8) / 1e10)
    assert eight["aggregate"] == pytest.approx(8 / (6.5 + 8.0))


def test_frame_floor_arithmetic_on_round_numbers() -> None:
    """frame_floor: a part's floor is its bytes at the read rate plus its FLOPs at the GEMM
    rate; ratios per part and in total; the cache verdict compares a pass with its bytes read
    from memory. Round numbers, so every value is exact in binary floating point or within
    a relative 1e-12 (pytest.approx's default)."""
    import frame_floor as ff

    # 2e9 B at 10 GB/s = 200 ms; 3e9 FLOP at 100 GFLOP/s = 30 ms
    part = ff.part_floor(2e9, 3e9, read_gbps=10.0, rate_gflops=100.0)
    assert part["bytes_ms"] == pytest.approx(200.0) and part["flops_ms"] == pytest.approx(30.0)
    assert part["floor_ms"] == pytest.approx(230.0)

    floors = {
        "talker_step": {"floor_ms": 10.0},
        "code_predictor": {"floor_ms": 20.0},
        "decoder": {"floor_ms": 5.0},
    }
    ours = {"talker_step": 15.0, "code_predictor": 60.0, "decoder": 20.0, "other": 5.0}
    rows = ff.compare(ours, floors)
    assert rows["talker_step"]["ratio"] == pytest.approx(1.5)
    assert rows["code_predictor"]["ratio"] == pytest.approx(3.0)
    assert rows["decoder"]["ratio"] == pytest.approx(4.0)
    assert rows["other"] == {"ours_ms": 5.0, "floor_ms": 0.0, "ratio": None}
    assert rows["total"]["ours_ms"] == pytest.approx(100.0)
    assert rows["total"]["floor_ms"] == pytest.approx(35.0)
    assert rows["total"]["ratio"] == pytest.approx(100 / 35)
    assert "| decoder | 20.0 | 5.0 |" in ff.table(rows, floors)

    # 79 MB a pass at 20 GB/s is 3.95 ms from memory: 2 ms is faster (cache), 5 ms is not
    cached = ff.cache_verdict(79e6, 2.0, read_gbps=20.0)
    assert cached["from_memory_ms"] == pytest.approx(3.95)
    assert cached["effective_gbps"] == pytest.approx(39.5) and cached["faster_than_memory"]
    assert not ff.cache_verdict(79e6, 5.0, read_gbps=20.0)["faster_than_memory"]


def test_frame_floor_counts_the_decoder_flops_of_a_steady_chunk() -> None:
    """The decoder's FLOPs per frame barely depend on the steady chunk's size: convolutions
    cost the same per output sample, and the attention's keys are the window's history plus
    the chunk's t frames, so only that term grows with t (under 1 % apart on the tiny codec:
    8.56e6 vs 8.54e6 a frame; 2 % allows for it). The prefix must not be counted: it is
    decoded outside the counter."""
    import frame_floor as ff

    from tts_core.models.qwen3_tts.codec import SpeechTokenizer

    decoder = SpeechTokenizer.from_folder(TINY / "speech_tokenizer").decoder
    with torch.inference_mode():
        two, six = (ff.decoder_flops_per_frame(decoder, chunk) for chunk in (2, 6))
    assert two > 0 and six > 0
    assert abs(two - six) / six < 0.02


def test_listener_playback_counts_stalls_on_synthetic_arrivals() -> None:
    """The simulated player: starts at 250 ms buffered, plays at real time, stalls whenever it
    holds nothing before the stream ended. Times and audio are multiples of 1/8 s (exact in
    binary), so the sums compare exactly."""
    from listeners_bench import percentile, playback, summarize

    # audio arrives faster than real time: 0.125 s pieces every 0.0625 s -> never stalls
    fast = [(0.5 + 0.0625 * i, 0.125) for i in range(8)]
    heard = playback(fast)
    assert heard["first_audio_s"] == 0.5 and heard["playback_start_s"] == 0.5625
    assert heard["stalls"] == 0 and heard["stall_s"] == 0 and heard["audio_s"] == 1.0

    # start at 1.0 s with 0.25 s held; the next piece comes 0.75 s later: 0.5 s stall; then
    # 0.25 s at 2.0 (holding 0.25 from 1.75: no stall); then at 2.375 (0.125 s late: a stall)
    slow = [(0.875, 0.125), (1.0, 0.125), (1.75, 0.25), (2.0, 0.25), (2.375, 0.125)]
    heard = playback(slow)
    assert heard["playback_start_s"] == 1.0
    assert heard["stalls"] == 2 and heard["stall_s"] == 0.5 + 0.125

    # running dry exactly as the next piece arrives is no stall
    assert playback([(0.0, 0.25), (0.25, 0.25)])["stalls"] == 0
    # a stream shorter than the buffer plays once it has ended: nothing to stall on
    short = playback([(0.25, 0.125), (3.0, 0.0625)])
    assert short["playback_start_s"] == 3.0 and short["stalls"] == 0
    # a 0.5 s buffer starts at 1.75 holding 0.5 s: both later gaps (0.25, 0.375 s) are covered
    assert playback(slow, buffer_s=0.5)["stalls"] == 0

    assert percentile([4.0, 1.0, 3.0, 2.0], 50) == 2.5
    assert percentile([1.0, 2.0, 3.0, 4.0, 5.0], 95) == pytest.approx(4.8)
    row = summarize([playback(fast), playback(slow)])
    assert row["streams"] == 2 and row["stalled_share"] == 0.5 and row["stalls"] == 2
    assert row["first_audio_p50_ms"] == pytest.approx(1000 * (0.5 + 0.875) / 2)


def test_listeners_bench_serves_concurrent_listeners_through_the_real_app(tmp_path: Path) -> None:
    """A smoke run on the tiny checkpoint (no figure): two listeners at once, every stream's
    audio accounted, a row per listener count and the load averages written. The app runs
    from another tree (`--app-dir`: a copy of this checkout's code, as a before/after run
    times an earlier commit's), with its own text."""
    tree = tmp_path / "tree"
    tree.mkdir()
    shutil.copy(ROOT / "app.py", tree / "app.py")
    shutil.copytree(ROOT / "assets", tree / "assets")
    shutil.copytree(
        ROOT / "tts_core", tree / "tts_core", ignore=shutil.ignore_patterns("__pycache__")
    )
    out = tmp_path / "listeners.json"
    command = [
        sys.executable,
        str(BENCH / "listeners_bench.py"),
        "--model",
        str(TINY),
        "--listeners",
        "1",
        "2",
        "--rounds",
        "1",
        "--json",
        str(out),
        "--app-dir",
        str(tree),
        "--text",
        "Two listeners at once.",
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    result = json.loads(out.read_text())
    assert result["app_dir"] == str(tree) and result["text"] == "Two listeners at once."
    assert sorted(result["rows"]) == ["1", "2"] and result["load_average_before"]
    assert [len(result["streams"][n]) for n in ("1", "2")] == [1, 2]
    for stream in result["streams"]["2"]:
        assert stream["audio_s"] > 0 and stream["first_audio_s"] <= stream["playback_start_s"]
    assert "| 2 | 2 |" in done.stdout


def test_decoder_ab_chunk_options_decode_the_same_stream(tmp_path: Path) -> None:
    """decoder_ab's options are exact streaming: float32 chunks of 6, 12 and 24 frames, torch's
    own convolutions and plain calls (no weight laid out once) give the audio of chunk 6 to
    float32 rounding. The error model:
    each output sample passes ~20 layers, each rounding at ~6e-8 relative, so the difference
    is ~1e-7 of the signal (measured 124-131 dB SNR, tiny and real size); 100 dB leaves 20x in
    amplitude for other summation orders. Every option gets a time per frame."""
    import argparse

    import decoder_ab

    args = argparse.Namespace(
        config=TINY, rounds=1, threads=1, no_bf16=True, only=[], profile=False
    )
    rows = {row["option"]: row for row in decoder_ab.run(args)["rows"]}
    assert set(rows) == {
        "float32 chunk 6",
        "float32 chunk 12",
        "float32 chunk 24",
        "float32 chunk 6, oneDNN off",
        "float32 chunk 6, plain calls",
    }
    assert rows["float32 chunk 6"]["max_abs_diff"] == 0.0
    for row in rows.values():
        assert row["snr_db"] > 100 and row["ms_per_frame"] > 0


@pytest.mark.parametrize("decoder", ["auto", "int8"])
def test_frame_floor_runs_end_to_end_on_the_tiny_checkpoint(tmp_path: Path, decoder: str) -> None:
    """A smoke run (no figure): the machine's rates, our frame's parts and the floor land in the
    JSON, and each ratio is ours over the floor of the same row; an int8 decoder is timed and
    floored as int8."""
    out = tmp_path / "floor.json"
    command = [
        sys.executable,
        str(BENCH / "frame_floor.py"),
        "--checkpoint",
        str(TINY),
        "--frames",
        "6",
        "--size-mb",
        "16",
        "--repeats",
        "1",
        "--threads",
        "1",
        "--json",
        str(out),
        "--decoder-dtype",
        decoder,
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    result = json.loads(out.read_text())
    assert result["rates"]["read_gbps"] > 0 and result["rates"]["gemm_gflops"]["float32"] > 0
    rows = result["rows"]
    assert decoder == "auto" or result["decoder_dtype"] == "int8"
    assert set(rows) == {"talker_step", "code_predictor", "decoder", "other", "total"}
    for part in ("talker_step", "code_predictor", "decoder", "total"):
        row = rows[part]
        assert row["ours_ms"] > 0 and row["floor_ms"] > 0
        assert row["ratio"] == pytest.approx(row["ours_ms"] / row["floor_ms"])
    assert result["code_predictor_cache"]["pass_bytes"] > 0
    assert "| total |" in done.stdout


def test_turbo_schedule_fits_the_costs_it_was_given() -> None:
    """benchmarks/turbo_schedule.py's fit on chunks made by chunking.py's time model from
    known costs: each later interval is exactly pass_s + token_s x its tokens, so least squares
    gives them back to float rounding (1e-9), and the prefill is what the first chunk leaves."""
    import turbo_schedule

    from tts_core.models.chatterbox.chunking import StreamChunking, StreamCost, chunk_timeline

    given = StreamCost(prefill_s=0.08, token_s=0.021, pass_s=0.33)
    runs = []
    for total in (90, 160, 250):
        chunking = StreamChunking()
        points = [*chunking.pass_points(total), total]
        tokens = [b - a for a, b in zip([0, *points], points, strict=False)]
        timeline = chunk_timeline(chunking, total, given)
        runs.append([(at, audio, n) for (at, audio), n in zip(timeline, tokens, strict=True)])
    fitted = turbo_schedule.fit_cost(runs)
    for field in ("prefill_s", "token_s", "pass_s"):
        assert getattr(fitted, field) == pytest.approx(getattr(given, field), abs=1e-9)
    assert turbo_schedule.chunking_for("doubling").pass_points(100) == [12, 24, 48, 96]
    assert turbo_schedule.chunking_for("growth=6").ramp_growth == 6


def test_batch_step_profile_times_every_path_on_the_tiny_checkpoint(tmp_path: Path) -> None:
    """--attention all: every row count with the whole step native, layer by layer with the
    one-query kernel and with SDPA, in one process; each path's time is there only where it
    ran, SDPA's only where it was asked."""
    from tts_core.models import native, stack_step
    from tts_core.models.attend_one import _kernel

    out = tmp_path / "steps.json"
    run = subprocess.run(
        [sys.executable, str(BENCH / "batch_step_profile.py"), "--checkpoint", str(TINY)]
        + ["--rows", "1", "2", "--frames", "3", "--attention", "all", "--json", str(out)],
        cwd=BENCH,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    table = json.loads(out.read_text())["ms_per_step"]
    modes = ("step", "kernel", "sdpa")
    assert set(table) == {f"{r} row(s), {m}" for r in (1, 2) for m in modes}
    step_runs = stack_step._kernel(native.generation) is not None
    for name, parts in table.items():
        assert parts["whole decode step"][0] > 0
        step_ms = parts.get("8-bit stacks, one native call a step", [0.0])[0]
        kernel_ms = parts.get("attention, one-query kernel", [0.0])[0]
        if name.endswith("step"):
            assert step_ms > 0
            assert kernel_ms == 0.0 or not step_runs  # its attention is inside the call
        elif name.endswith("sdpa") or _kernel() is None:
            assert step_ms == kernel_ms == 0.0 and parts["attention, SDPA"][0] > 0
        else:
            assert step_ms == 0.0 and kernel_ms > 0
