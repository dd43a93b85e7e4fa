"""benchmarks/tada_bench.py: its arithmetic (per audio second, the best run's mean step, the
official / ours ratio, the synthetic prompt's layout, the official decoder's input frames), and
our side run end to end on a tiny fixture folder (the released layout it reads)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCH))

import tada_bench as bench  # noqa: E402
from common import Calls  # noqa: E402

from tts_core.models.tada import generate, gray_code, streaming  # noqa: E402

from .conftest import FIXTURES  # noqa: E402


def test_per_audio_second_and_speedup():
    assert bench.audio_seconds(48000) == 2.0
    assert bench.per_audio_second(0.5, 48000) == 0.25  # 0.5 s of work for 2 s of audio
    assert bench.speedup(ours=0.5, official=2.0) == 4.0
    assert bench.speedup(ours=0.0, official=1.0) == float("inf")


def test_step_ms_is_the_mean_of_the_best_run_of_one_position_calls():
    calls = Calls()
    # run 1: prefill (size 9) then steps 3 ms, 5 ms; run 2: prefill, steps 2 ms, 2 ms
    for seconds, size in [(0.1, 9), (0.003, 1), (0.005, 1), (0.1, 9), (0.002, 1), (0.002, 1)]:
        calls.seconds.append(seconds)
        calls.sizes.append(size)
    assert bench.step_ms(calls, per_run=2) == pytest.approx(2.0)
    assert bench.step_ms(Calls(), per_run=2) == 0.0


def test_table_keeps_the_figures_both_sides_have():
    ours = {"lm_step_ms": 2.0, "rtf": 0.5, "stream_rtf": 0.6}
    official = {"lm_step_ms": 3.0, "rtf": 1.0}
    assert bench.table(ours, official) == [("lm_step_ms", 2.0, 3.0, 1.5), ("rtf", 0.5, 1.0, 2.0)]


def test_synthetic_prompt_layout():
    values, positions, samples = bench.synthetic_prompt(4, 8)
    assert values.shape == (4, 8)
    assert positions.tolist() == [1, 6, 11, 16]  # FORCED_FRAMES apart, 1-based
    assert samples == (16 + 5) * 480  # the clip ends FORCED_FRAMES after the last token
    again, _, _ = bench.synthetic_prompt(4, 8)
    assert torch.equal(values, again)  # seeded: both sides get the same prompt


def test_the_official_decoders_input_frames():
    encoded = torch.zeros(3, 4)
    assert bench.decoded_frames(encoded, torch.tensor([5, 5, 5, 5, 9])) == 20  # 3 tokens + tail
    assert bench.embeds_length((), {"inputs_embeds": torch.zeros(2, 7, 3)}) == 7
    assert bench.forced_durations(torch.zeros(2, 1, 3), 3).tolist() == [[5], [5]]


def test_our_side_runs_on_a_tiny_folder(monkeypatch):
    """The whole of our side on tada-tiny-a (decoder and LM in the released layout); the patches
    it makes (forced durations, timing wrappers) are undone after the test."""
    monkeypatch.setattr(gray_code, "decode", gray_code.decode)
    monkeypatch.setattr(generate, "solve", generate.solve)
    for name in ("push_block", "_decode"):
        monkeypatch.setattr(
            streaming.StreamingDecoder, name, getattr(streaming.StreamingDecoder, name)
        )
    result = bench.our_run(FIXTURES / "tada-tiny-a", repeats=1)
    assert result["positions"] > 0 and result["audio_s"] > 0
    for key in ("lm_step_ms", "flow_head_ms", "decoder_per_audio_s", "first_audio_s", "rtf"):
        assert result[key] > 0, key


OFFICIAL = [p for p in bench.OFFICIAL_PYTHONS if p.exists()]
# `python -c SMALL_SHARDS script args...`: the script run with save_pretrained's default
# max_shard_size 100 MB (transformers' own default: 5 GB)
SMALL_SHARDS = """
import runpy, sys
from transformers import PreTrainedModel
save = PreTrainedModel.save_pretrained
def small_shards(self, *args, max_shard_size="100MB", **kwargs):
    return save(self, *args, max_shard_size=max_shard_size, **kwargs)
PreTrainedModel.save_pretrained = small_shards
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


@pytest.mark.slow
@pytest.mark.skipif(not OFFICIAL, reason="no TADA oracle env (tools/oracle/tada/setup_venv.sh)")
def test_smoke_build_and_both_sides(tmp_path):
    """The script as documented, on the --smoke checkpoint: build in the oracle env, then one
    run of each side; both make the same audio from the same positions (same prompt, text,
    forced durations), and every figure of the table is there, with the load averages and
    each side's peak memory.

    The build runs with save_pretrained's default shard size cut from 5 GB to 100 MB: the smoke
    LM (151 MB) then stands where the real float32 LM (5.9 GB) stands against the default, and
    the checkpoint must still be the one model.safetensors our loader reads."""
    import json
    import os
    import subprocess

    folder = tmp_path / "tada-smoke"
    env = dict(os.environ, PYTHONPATH=str(bench.REPO))
    script = str(BENCH / "tada_bench.py")
    build = [str(OFFICIAL[0]), "-c", SMALL_SHARDS, script, "build", "--out", str(folder), "--smoke"]
    done = subprocess.run(build, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    assert sorted(p.name for p in (folder / "model").glob("*.safetensors*")) == [
        "model.safetensors"
    ]
    out = tmp_path / "result.json"
    compare = [
        sys.executable,
        script,
        "--folder",
        str(folder),
        "--repeats",
        "1",
        "--threads",
        "1",
        "--json",
        str(out),
    ]
    done = subprocess.run(compare, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    result = json.loads(out.read_text())
    ours, official = result["ours"], result["official"]
    assert ours["audio_s"] == official["audio_s"] > 0
    assert ours["positions"] == official["positions"] > 0
    assert len(result["load_average"]) == 3  # before ours, between the sides, after both
    assert ours["peak_rss_gb"] > 0 and official["peak_rss_gb"] > 0
    assert [row[0] for row in bench.table(ours, official)] == [
        "lm_step_ms",
        "flow_head_ms",
        "decoder_per_audio_s",
        "first_audio_s",
        "rtf",
    ]
