"""The benchmark keeps working: weight-bytes arithmetic and a quick end-to-end run (ours only).

The official side needs .oracle-venv and real-size checkpoints; it is run by hand
(`bash benchmarks/run_full.sh`), not here.
"""

from __future__ import annotations

import json
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
    command = [sys.executable, str(BENCH / "isa_bench.py"), "--checkpoint", str(TINY),
               "--frames", "4", "--threads", "1", "--only", "int8 torch._int_mm",
               "--out", str(tmp_path)]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    (row,) = json.loads((tmp_path / "summary.json").read_text())
    assert row["label"] == "int8 torch._int_mm" and row["env"] == {"TTS_CORE_NATIVE_ISA": "torch"}
    assert row["frame_ms"] > 0 and "| int8 torch._int_mm |" in done.stdout


def test_served_bench_times_a_request_through_the_real_app(tmp_path: Path) -> None:
    out = tmp_path / "served.json"
    command = [sys.executable, str(BENCH / "served_bench.py"), "--model", str(TINY),
               "--requests", "2", "--json", str(out)]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    result = json.loads(out.read_text())
    assert result["weight_format"] == "int8" and result["weight_format_reason"].startswith("int8")
    for run in result["requests"]:
        assert 0 < run["first_byte_ms"] < 1000 * run["wall_s"] and run["audio_s"] > 0


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
    projections = sum(m.weight.numel() for name, m in t3.tfmr.h.named_modules()
                      if name.endswith(("c_attn", "c_proj", "c_fc")))  # fmt: skip
    saved = float_bytes - least.t3_step_weight_bytes(int8.t3)
    # 4 -> 1 byte a weight, less 8 bytes a row (scale, column sum): 6 % of the tiny rows
    assert 3 * projections * 0.9 < saved <= 3 * projections

    a, b = torch.randn(3, 5), torch.randn(5, 7)
    assert least.count_flops(lambda: a @ b) == 2 * 3 * 5 * 7

    one = least.floor(10**9, 10**6, 100, 1e11, read_gbps=10.0, gemm_gflops_rate=100.0,
                      streams=1, audio_s=8.0)  # fmt: skip
    # per step 1e9 + 1e6 (100 + 200 / 2) bytes at 10 GB/s, 25 steps; 1e11 FLOP at 100 GFLOP/s
    assert one["t3_s_per_audio_s"] == pytest.approx(25 * (1e9 + 2e8) / 1e10)
    assert one["s3gen_s_per_audio_s"] == pytest.approx(1.0)
    assert one["rtf"] == pytest.approx(4.0) and one["aggregate"] == pytest.approx(0.25)
    eight = least.floor(10**9, 10**6, 100, 1e11, 10.0, 100.0, streams=8, audio_s=8.0)
    assert eight["t3_s_per_audio_s"] == pytest.approx(25 * (1e9 + 8 * 2e8) / 1e10)
    assert eight["aggregate"] == pytest.approx(8 / (6.5 + 8.0))
