"""What app.py's load options become on their way down: arguments, never the environment.

- `--cuda-graphs auto|off` travels app.build_engine -> load_backend -> Qwen3Backend.load ->
  load_model (-> resolve_cuda_graphs) as an argument; on a CPU the served decode step is eager
  and says so (engine.info()["decode_step"], and a log line). No layer sets or reads
  TTS_CUDA_GRAPHS but app.py's flag default (the documented user setting).
- One load_backend reads the checkpoint's config.json once: the architecture detection and
  the model's own configs (tokenizer's split rule included) share that read.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

import pytest

import app
from tts_core.models.qwen3_tts.serving import cuda_graphs as graphs_module

FIXTURES = Path(__file__).resolve().parent / "fixtures"
QWEN3 = FIXTURES / "qwen3-tiny-a"
VOXCPM2 = FIXTURES / "voxcpm2-tiny"

pytestmark = pytest.mark.slow


def needs(folder: Path) -> None:
    if not (folder / "config.json").is_file():
        pytest.skip(f"tests/fixtures/{folder.name} is not there")


def build(monkeypatch: pytest.MonkeyPatch, *flags: str):  # noqa: ANN201 - Engine
    """app.build_engine for the tiny Qwen3 checkpoint on the CPU (built-in voices not warmed)."""
    monkeypatch.setattr(app, "warm_builtin_voices", lambda engine: None)
    args = app.parse_args(
        [
            "--model",
            str(QWEN3),
            "--device",
            "cpu",
            "--quantize",
            "none",
            "--no-fallback",
            "--max-batch",
            "2",
            *flags,
        ]
    )
    return app.build_engine(args, lambda *a, **k: None)


def test_the_cuda_graphs_flag_reaches_the_engine_as_an_argument(monkeypatch, caplog):
    needs(QWEN3)
    monkeypatch.delenv("TTS_CUDA_GRAPHS", raising=False)
    seen: list[tuple[object, str]] = []
    resolve = graphs_module.resolve_cuda_graphs

    def spy(setting, device):  # noqa: ANN001, ANN202
        seen.append((setting, str(device)))
        return resolve(setting, device)

    monkeypatch.setattr(graphs_module, "resolve_cuda_graphs", spy)
    with caplog.at_level(logging.INFO, logger="tts_core.backends.qwen3"):
        auto = build(monkeypatch)  # the default: auto
    off = build(monkeypatch, "--cuda-graphs", "off")
    assert seen == [("auto", "cpu"), ("off", "cpu")]
    assert "TTS_CUDA_GRAPHS" not in os.environ  # nothing handed over through the environment
    for engine in (auto, off):
        backend = engine.backend
        assert backend.model.cuda_graphs is False  # graphs exist only on CUDA
        assert backend.loop.runner.graphs is None  # the row-by-row eager step serves
        assert engine.info()["decode_step"] == "eager"
        backend.loop.close()
    assert "decode step: eager (cuda_graphs auto on cpu)" in caplog.text


def test_the_environment_sets_only_the_flags_default(monkeypatch):
    monkeypatch.setenv("TTS_CUDA_GRAPHS", "off")
    assert app.parse_args([]).cuda_graphs == "off"  # the documented user setting
    assert app.parse_args(["--cuda-graphs", "auto"]).cuda_graphs == "auto"
    # below app.py the argument alone decides: "auto" is on for CUDA whatever the environment
    assert graphs_module.resolve_cuda_graphs("auto", "cuda") is True
    assert graphs_module.resolve_cuda_graphs(None, "cuda") is True
    assert graphs_module.resolve_cuda_graphs("off", "cuda") is False


class OpenCounter:
    """Counts the opens of one file (Python's "open" audit event: builtins.open, io.open,
    Path.read_text and every other way Python opens a file)."""

    hooked = False
    target: str | None = None
    count = 0

    @classmethod
    def watch(cls, path: Path) -> None:
        if not cls.hooked:
            sys.addaudithook(cls._hook)  # process-wide, for good: it checks `target` first
            cls.hooked = True
        cls.target, cls.count = os.path.realpath(path), 0

    @classmethod
    def stop(cls) -> int:
        cls.target = None
        return cls.count

    @classmethod
    def _hook(cls, event: str, args: tuple) -> None:
        if cls.target is None or event != "open" or not isinstance(args[0], str | bytes | Path):
            return
        path = os.fsdecode(args[0])
        if os.path.basename(path) == "config.json" and os.path.realpath(path) == cls.target:
            cls.count += 1


@pytest.mark.parametrize("folder", [QWEN3, VOXCPM2], ids=["qwen3", "voxcpm2"])
def test_one_load_reads_config_json_once(folder):
    needs(folder)
    from tts_core.backends import load_backend

    OpenCounter.watch(folder / "config.json")
    try:
        backend, notice = load_backend(
            str(folder), "cpu", allow_fallback=False, quantize="none", max_batch=1
        )
    finally:
        reads = OpenCounter.stop()
    assert notice is None
    assert reads == 1
    backend.loop.close()


def test_quantize_int4_reaches_the_model(monkeypatch):
    """--quantize int4 (the app's choice of the 4-bit code predictor) reaches load_model: the
    predictor's layers are 4-bit and the decision says it was asked for."""
    needs(QWEN3)
    from tts_core.quant.int4 import Int4Linear

    monkeypatch.setattr(app, "warm_builtin_voices", lambda engine: None)
    args = app.parse_args(
        ["--model", str(QWEN3), "--device", "cpu", "--quantize", "int4", "--no-fallback"]
    )
    engine = app.build_engine(args, lambda *a, **k: None)
    try:
        model = engine.backend.model
        predictor = model.talker.code_predictor
        assert any(isinstance(m, Int4Linear) for m in predictor.modules())
        assert "code predictor int4 asked for" in model.format_decision
    finally:
        engine.backend.loop.close()
