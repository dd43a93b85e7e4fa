"""Static-shape decode steps equal the eager ones; the CUDA-graph wrapper falls back cleanly.

The static steps (fixed shapes, whole-cache masked attention, K/V written at a position
tensor) are what CUDA graphs capture. There is no GPU here: the graph plumbing (static input
copies, aliased static outputs) is exercised with a CPU stand-in for the capture.

Static and eager steps are two float32 evaluations of the same talker / predictor (other shapes,
so other kernels and summation orders): they may differ by 2 x 4 E (tests/qwen3/conftest.py), E
the float32 error of the official prefill logits / hidden state on the same checkpoint. Codes are
compared exactly: for the golden cases the margins proved by the oracle (cases.json
"decision_margins") make them portable; for other texts the two greedy runs differ by rounding
only, and a flip would need a top-2 logit gap below ~1e-5 (logits have std ~4).
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import pytest
import torch

import tts_core
from tts_core.models.qwen3_tts import cuda_graphs, decode_loop
from tts_core.models.qwen3_tts.static_step import PredictorStep, StaticSteps, TalkerStep

from .conftest import fixture_path, fp32_pair_bound, golden_voice, load_goldens

TEXT = "Hello there, this is a test of the static decode step."


@cache
def _model(folder: Path):
    return tts_core.load_model(folder)


def _voice(name: str) -> tts_core.Voice:
    return tts_core.Voice(speaker_embedding=load_goldens(name)["speaker_embedding"])


def _generate(model, name: str, mode: str, **kwargs) -> torch.Tensor:
    previous = model.decode_mode
    model.set_decode_mode(mode)
    try:
        return model.generate(TEXT, _voice(name), max_new_tokens=30, **kwargs).codes
    finally:
        model.decode_mode = previous


def _bounds(folder: Path) -> tuple[float, float]:
    """(logits, hidden-size values) bounds for two of our float32 evaluations."""
    goldens = load_goldens(folder.name)
    return (
        fp32_pair_bound(goldens, "xvec_prefill_logits"),
        fp32_pair_bound(goldens, "xvec_past_hidden"),
    )


def _random(shape: tuple[int, ...], seed: int) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed))


def test_static_talker_step_equals_eager(tiny_checkpoint) -> None:
    talker = _model(tiny_checkpoint).talker
    logit_bound, hidden_bound = _bounds(tiny_checkpoint)
    embeds = _random((1, 9, talker.cfg.stack.hidden_size), 0)
    with torch.inference_mode():
        eager_caches, static_caches = talker.new_caches(1, 12), talker.new_caches(1, 12)
        talker(embeds[:, :5], eager_caches, start=0)
        talker(embeds[:, :5], static_caches, start=0)
        step = TalkerStep(talker, static_caches)
        for position in range(5, 9):
            x = embeds[:, position : position + 1]
            logits, hidden = talker(x, eager_caches, start=position)
            static_logits, static_hidden = step(x, torch.tensor([position]))
            assert static_logits.shape == logits.shape and static_logits.dtype == torch.float32
            assert (static_logits - logits).abs().max() <= logit_bound
            assert (static_hidden - hidden).abs().max() <= hidden_bound
    for eager, static in zip(eager_caches, static_caches, strict=True):
        # K = W_k rmsnorm(h): hidden-sized values (|K| ~ 1), same error scale as the hidden state
        assert (eager.k[:, :, :9] - static.k[:, :, :9]).abs().max() <= hidden_bound
        assert not static.k[:, :, 9:].any()  # nothing written past the last position


def test_static_predictor_equals_eager_over_two_frames(tiny_checkpoint) -> None:
    # Two frames through the same caches: the second must not see the first one's K/V.
    talker = _model(tiny_checkpoint).talker
    predictor = talker.code_predictor
    hidden_size = talker.cfg.stack.hidden_size
    logit_bound, _ = _bounds(tiny_checkpoint)
    with torch.inference_mode():
        eager = decode_loop.make_steps(
            "eager", talker, talker.new_caches(1, 1), predictor.new_caches(1)
        )
        static = StaticSteps(talker, talker.new_caches(1, 1), predictor.new_caches(1))
        for frame in range(2):
            hidden = _random((1, hidden_size), 10 + frame)
            c0_embed = talker.codec_embed(torch.tensor([frame + 3]))
            eager_logits, static_logits = [], []

            def recorder(store):
                return lambda logits: store.append(logits) or logits.argmax(-1)

            codes = eager.predict(hidden, c0_embed, recorder(eager_logits))
            static_codes = static.predict(hidden, c0_embed, recorder(static_logits))
            assert torch.equal(codes, static_codes)
            assert len(static_logits) == predictor.cfg.num_code_groups - 1
            for a, b in zip(eager_logits, static_logits, strict=True):
                assert (a - b).abs().max() <= logit_bound


@pytest.mark.parametrize("case", ["icl", "xvec"])
def test_static_generate_equals_eager_and_official(tiny_checkpoint, goldens, case) -> None:
    # The official greedy cases (29..39 frames, EOS and max_new_tokens stops), in both modes.
    model, spec = _model(tiny_checkpoint), goldens.cases[case]
    voice = golden_voice(goldens, case)
    args = dict(language=spec["language"], max_new_tokens=spec["max_new_tokens"], greedy=True)
    codes = {}
    for mode in ("eager", "static"):
        model.set_decode_mode(mode)
        try:
            codes[mode] = model.generate(spec["text"], voice, **args).codes
        finally:
            model.set_decode_mode("eager")
    assert codes["static"].shape[0] == spec["frames"]
    assert torch.equal(codes["static"], codes["eager"])
    assert torch.equal(codes["static"], goldens[f"{case}_codes"])


def test_static_sampled_generate_equals_eager(tiny_checkpoint) -> None:
    # Same logits, same generator: the same draws (29 frames on -b, an early EOS on -a).
    model, name = _model(tiny_checkpoint), tiny_checkpoint.name
    sampled = _generate(model, name, "eager", seed=5)
    assert torch.equal(_generate(model, name, "static", seed=5), sampled)


def test_unknown_decode_mode_is_rejected() -> None:
    with pytest.raises(ValueError, match="decode mode"):
        _model(fixture_path("qwen3-tiny-a")).set_decode_mode("graphs")


def test_cuda_graphs_on_cpu_warn_and_decode_eagerly() -> None:
    model = _model(fixture_path("qwen3-tiny-b"))
    expected = _generate(model, "qwen3-tiny-b", "eager", greedy=True)
    with pytest.warns(UserWarning, match="CUDA graphs not used.*CUDA device"):
        codes = _generate(model, "qwen3-tiny-b", "cuda_graphs", greedy=True)
    assert torch.equal(codes, expected)


def test_env_switch_disables_cuda_graphs(monkeypatch) -> None:
    cuda = torch.device("cuda")  # a device object only: nothing runs on it
    monkeypatch.delenv(cuda_graphs.DISABLE_ENV, raising=False)
    assert cuda_graphs.unavailable_reason(cuda) is None
    assert "CUDA device" in cuda_graphs.unavailable_reason(torch.device("cpu"))
    monkeypatch.setenv(cuda_graphs.DISABLE_ENV, "1")
    assert cuda_graphs.DISABLE_ENV in cuda_graphs.unavailable_reason(cuda)
    monkeypatch.setenv(cuda_graphs.DISABLE_ENV, "0")
    assert cuda_graphs.unavailable_reason(cuda) is None


class _CpuGraph:
    """Stand-in for torch.cuda.CUDAGraph: replay reruns fn on the static inputs and writes
    the static outputs in place, as a real replay does."""

    replays = 0

    def __init__(self, fn, inputs, outputs) -> None:
        self.fn, self.inputs, self.outputs = fn, inputs, outputs

    def replay(self) -> None:
        fresh = self.fn(*self.inputs)
        if not isinstance(fresh, tuple):
            fresh, outputs = (fresh,), (self.outputs,)
        else:
            outputs = self.outputs
        for static, new in zip(outputs, fresh, strict=True):
            static.copy_(new)
        _CpuGraph.replays += 1


def _cpu_capture(fn, inputs, warmup_steps):
    for _ in range(warmup_steps):
        fn(*inputs)
    outputs = fn(*inputs)
    return _CpuGraph(fn, inputs, outputs), outputs


def _failing_capture(fn, inputs, warmup_steps):
    raise RuntimeError("operation not permitted when stream is capturing")


def _use_capture(monkeypatch, capture) -> None:
    def make_steps(mode, talker, caches, predictor_caches):
        wrap = lambda fn: cuda_graphs.GraphedCallable(fn, capture=capture)  # noqa: E731
        return StaticSteps(talker, caches, predictor_caches, wrap=wrap)

    monkeypatch.setattr(decode_loop, "make_steps", make_steps)


def test_graph_replay_through_static_buffers_equals_eager(monkeypatch) -> None:
    model = _model(fixture_path("qwen3-tiny-b"))
    expected = _generate(model, "qwen3-tiny-b", "eager", greedy=True)
    _use_capture(monkeypatch, _cpu_capture)
    _CpuGraph.replays = 0
    codes = _generate(model, "qwen3-tiny-b", "cuda_graphs", greedy=True)
    assert torch.equal(codes, expected)
    frames = codes.shape[0]
    assert frames == 29  # stopped by max_new_tokens: the talker stepped after all but the last
    assert _CpuGraph.replays == frames - 1 + 16 * frames  # + 16 predictor positions per frame


# The real capture too: on this CPU-only torch it fails at its first CUDA call.
@pytest.mark.parametrize("capture", [_failing_capture, cuda_graphs.capture_cuda_graph])
def test_capture_failure_warns_and_falls_back_to_eager(monkeypatch, capture) -> None:
    model = tts_core.load_model(fixture_path("qwen3-tiny-b"))  # its decode mode is changed
    expected = _generate(model, "qwen3-tiny-b", "eager", greedy=True)
    _use_capture(monkeypatch, capture)
    model.set_decode_mode("cuda_graphs")
    with pytest.warns(RuntimeWarning, match="capture failed.*TTS_NO_CUDA_GRAPH"):
        codes = model.generate(TEXT, _voice("qwen3-tiny-b"), greedy=True, max_new_tokens=30)
    assert torch.equal(codes.codes, expected)
    assert model.decode_mode == "eager"  # not retried on the next request


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:.*script_method.*:DeprecationWarning")
def test_static_steps_compile_with_fullgraph(tiny_checkpoint) -> None:
    # fullgraph=True fails on any graph break: proof the steps have no data-dependent Python.
    talker = _model(tiny_checkpoint).talker
    predictor = talker.code_predictor
    logit_bound, hidden_bound = _bounds(tiny_checkpoint)
    embeds = _random((1, 4, talker.cfg.stack.hidden_size), 1)
    with torch.inference_mode():
        caches, compiled_caches = talker.new_caches(1, 8), talker.new_caches(1, 8)
        talker(embeds[:, :3], caches, start=0)
        talker(embeds[:, :3], compiled_caches, start=0)
        position = torch.tensor([3])
        expected = TalkerStep(talker, caches)(embeds[:, 3:], position)
        step = torch.compile(TalkerStep(talker, compiled_caches), fullgraph=True)
        result = step(embeds[:, 3:], position)
        for a, b, bound in zip(expected, result, (logit_bound, hidden_bound), strict=True):
            assert (a - b).abs().max() <= bound
        pstep = torch.compile(PredictorStep(predictor, predictor.new_caches(1)), fullgraph=True)
        eager_pstep = PredictorStep(predictor, predictor.new_caches(1))
        for group in range(3):
            x = embeds[:, group : group + 1]
            out = pstep(x, torch.tensor([group]))
            assert (out - eager_pstep(x, torch.tensor([group]))).abs().max() <= logit_bound


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("case", ["icl", "xvec"])
def test_cuda_graphs_on_cuda_equal_eager(tiny_checkpoint, goldens, case) -> None:
    # Runs only where a GPU exists: real capture and replay, no fallback warning allowed.
    import warnings

    model = tts_core.load_model(tiny_checkpoint, device="cuda")
    spec, voice = goldens.cases[case], golden_voice(goldens, case)
    args = dict(language=spec["language"], max_new_tokens=spec["max_new_tokens"], greedy=True)
    expected = model.generate(spec["text"], voice, **args).codes
    model.set_decode_mode("cuda_graphs")
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="CUDA graph")  # both fallback messages
        for _ in range(2):  # a second request captures its own graphs
            assert torch.equal(model.generate(spec["text"], voice, **args).codes, expected)
    assert model.decode_mode == "cuda_graphs"
