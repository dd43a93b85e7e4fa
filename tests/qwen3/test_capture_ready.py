"""The decode step is capture-ready (issue #22): static shapes per batch bucket, no host sync.

serving/static_step.py is the step CUDA graphs capture per bucket (serving/cuda_graphs.py). On
the CPU it is proven here, on the tiny checkpoint:

* `torch.compile(step, fullgraph=True, dynamic=False)` captures the whole step (talker at one
  position over the slot cache, c0 sampling, the predictor's 15 passes and their draws) as ONE
  graph for two bucket sizes. fullgraph turns every graph break into an error, and a graph
  break is exactly what a host synchronisation (`.item()`, `.tolist()`, `bool(tensor)`), Python
  branching on a tensor value or a data-dependent shape would cause. The backend is aot_eager
  (AOTAutograd functionalizes the slot-cache writes as a CUDA graph needs them, then runs the
  captured ATen graph); inductor's C++ code generation would add minutes on 2 cores and says
  nothing more about the capture. Its outputs and slot caches equal the eager step's bit for bit.
* Served through the engine with the static step (a served loop over a model with `cuda_graphs`
  forced on: on a CPU the very step CUDA graphs would capture runs eagerly, with the buckets'
  padding, the pre-drawn random numbers and the engine's bookkeeping), greedy and seeded
  requests give the codes of `model.stream` alone (the row path): the draws are consumed in
  the eager path's order.
* One talker step's hidden states against the row path's from the same KV: within a float32
  bound (derived at the test).
* CUDA-only code skips cleanly without a device; with one, a replayed graph equals the eager
  static step bit for bit at the same bucket.
"""

from __future__ import annotations

import copy
from functools import cache

import pytest
import torch

from tts_core.backends.qwen3 import served_loop
from tts_core.models.layers import Rows, StaticRows
from tts_core.models.qwen3_tts.model import load_model
from tts_core.models.qwen3_tts.sampling import SamplingParams, suppressed_ids
from tts_core.models.qwen3_tts.serving import cuda_graphs as graphs_module
from tts_core.models.qwen3_tts.serving.cuda_graphs import SlotArena, resolve_cuda_graphs
from tts_core.models.qwen3_tts.serving.static_step import (
    C0Rules,
    RowSampling,
    SlotCache,
    StepBuffers,
    bucket_for,
    buckets,
    predraw,
    static_step,
)

from .conftest import FP32_SPREAD, fixture_path, load_ref_clip, run_error

TINY = fixture_path("qwen3-tiny-a")
MAX_LEN = 48  # slot positions in the step tests
SAMPLED = SamplingParams(True, 0.9, 50, 0.8, 1.05)
GREEDY = SamplingParams(False, 1.0, 0, 1.0)


@cache
def _model():
    return load_model(TINY, quantize="none", warm_chunks=())


def _filled(bucket: int, rows: int) -> tuple[SlotCache, StepBuffers, C0Rules]:
    """A slot cache with random keys/values and a bucket of `rows` real rows (the rest padded
    to the scratch slot): mixed greedy / sampled rows, a penalty history, pre-drawn noise."""
    model = _model()
    talker, cfg = model.talker, model.talker.cfg
    gen = torch.Generator().manual_seed(bucket)
    kv = SlotCache(talker.model, bucket, MAX_LEN, model.dtype, model.device)
    for tensor in (*kv.k, *kv.v):
        tensor.normal_(generator=gen)
    rules = C0Rules(
        cfg.codec_eos_token_id, suppressed_ids(cfg.vocab_size, cfg.codec_eos_token_id, "cpu")
    )
    buffers = StepBuffers.empty(talker, bucket, MAX_LEN, kv.scratch)
    codes = torch.randint(
        0, cfg.code_predictor.vocab_size, (rows, cfg.code_predictor.num_code_groups), generator=gen
    )
    buffers.embeds[:rows] = talker.frame_embed(codes)[:, None]
    buffers.slots[:rows] = torch.arange(rows)
    buffers.positions[:rows] = torch.tensor([5, 17, 2, 30, 9, 40, 1][:rows])
    buffers.frames[:rows] = torch.tensor([3, 1, 0, 12, 2, 20, 0][:rows])
    buffers.history.fill_(rules.pad)
    buffers.history[:rows, :3] = torch.randint(0, 2048, (rows, 3), generator=gen)
    params = [SAMPLED if row % 2 else GREEDY for row in range(rows)] + [GREEDY] * (bucket - rows)
    buffers.talker.copy_(RowSampling.of(params, "cpu"))
    buffers.subtalker.copy_(RowSampling.of(params, "cpu"))
    for row in range(rows):
        predraw(gen, params[row], params[row], buffers.noise_c0[row], buffers.noise_codes[row])
    return kv, buffers, rules


@pytest.mark.parametrize(("bucket", "rows"), [(2, 2), (4, 3)])
def test_the_static_step_compiles_as_one_graph_and_equals_eager(bucket: int, rows: int) -> None:
    torch._dynamo.reset()
    model = _model()
    talker = model.talker
    talker.ensure_rope(MAX_LEN)
    talker.rope.typed(model.dtype)
    kv, buffers, rules = _filled(bucket, rows)
    kv_compiled = copy.deepcopy(kv)
    predictor = [talker.code_predictor.new_caches(bucket) for _ in range(2)]

    def step(cache: SlotCache, caches: list) -> tuple[torch.Tensor, ...]:
        out = static_step(talker, cache, caches, rules, buffers)
        return out.hidden, out.logits, out.c0, out.codes

    compiled = torch.compile(step, fullgraph=True, dynamic=False, backend="aot_eager")
    with torch.inference_mode():
        eager = step(kv, predictor[0])
        graphed = compiled(kv_compiled, predictor[1])
    for ours, theirs in zip(graphed, eager, strict=True):
        assert torch.equal(ours, theirs)
    for ours, theirs in zip((*kv_compiled.k, *kv_compiled.v), (*kv.k, *kv.v), strict=True):
        assert torch.equal(ours, theirs)  # the in-place slot writes happened, identically
    # each real row wrote at its own (slot, position) only; the padded row at the scratch slot
    before = _filled(bucket, rows)[0].k[0]
    changed = (kv.k[0] != before).any(dim=3).any(dim=1).nonzero().tolist()  # [[slot, position]]
    positions = buffers.positions.tolist()
    padded = [[kv.scratch, 0]] if rows < bucket else []
    assert changed == sorted([[row, positions[row]] for row in range(rows)] + padded)


def test_one_static_talker_step_is_the_row_path_within_float32_rounding() -> None:
    """The static step attends over the slot's whole length L with key_pos <= position masked
    in; a masked key gets exp(-inf) = 0 weight exactly, so it is the row path's function
    (Rows: each row over its own filled prefix) with another reduction order in the softmax
    sums and GEMMs of the bucket's row count. Both are float32 evaluations of one network, each
    within FP32_SPREAD x E of the exact value (the error model of tests/qwen3/conftest.py), so
    they differ by at most 2 x FP32_SPREAD x E, E measured now against a float64 run."""
    model = _model()
    talker = model.talker
    talker.ensure_rope(MAX_LEN)
    kv, buffers, _ = _filled(4, 3)
    rows, positions = 3, buffers.positions[:3].tolist()
    with torch.inference_mode():
        static_kv = copy.deepcopy(kv)
        ctx = StaticRows.make(static_kv.k, static_kv.v, buffers.slots, buffers.positions)
        static = talker.model(buffers.embeds, ctx, talker.rope)[:rows, -1]
        row_ctx = Rows([kv.slot_caches(slot, MAX_LEN) for slot in range(rows)], positions)
        row = talker.model(buffers.embeds[:rows], row_ctx, talker.rope)[:, -1]
        exact_talker = copy.deepcopy(talker).double()
        kv64 = copy.deepcopy(kv)
        kv64.k, kv64.v = [t.double() for t in kv64.k], [t.double() for t in kv64.v]
        ctx64 = Rows([kv64.slot_caches(slot, MAX_LEN) for slot in range(rows)], positions)
        exact = exact_talker.model(buffers.embeds[:rows].double(), ctx64, exact_talker.rope)[:, -1]
    bound = 2 * FP32_SPREAD * run_error(row, exact)
    assert float((static - row).abs().max()) <= bound


def _voice():
    audio, rate = load_ref_clip()
    return _model().create_voice(audio, rate)


def test_served_with_the_static_step_gives_the_codes_of_model_stream(monkeypatch) -> None:
    """Three requests at once (greedy and seeded sampling) through the served loop with the
    static step (bucket 4 for 3 rows: one padded), each equal to model.stream alone."""
    model = copy.copy(_model())
    model.cuda_graphs = True  # on a CPU: the static step, called eagerly (cuda_graphs.py)
    calls = []
    run = graphs_module.GraphedStep.run
    monkeypatch.setattr(
        graphs_module.GraphedStep,
        "run",
        lambda self, seqs, embeds: calls.append(len(seqs)) or run(self, seqs, embeds),
    )
    voice = _voice()
    requests = [
        ("Hello there, how are you today?", {"greedy": True}),
        ("The quick brown fox.", {"seed": 7}),
        ("One two three four five six seven.", {"seed": 11, "repetition_window": 4}),
    ]
    scheduler = served_loop(model, max_batch=4, cache_positions=4 * 256, prefill_chunk=10_000)
    try:
        assert isinstance(scheduler.runner.arena, SlotArena) and scheduler.runner.graphs
        streams = [scheduler.submit(text, voice, max_new_tokens=24, **kw) for text, kw in requests]
        served = [torch.cat([chunk.codes for chunk in stream]) for stream in streams]
    finally:
        scheduler.close()
    assert calls and max(calls) > 1  # the static step ran, for several rows at once
    for (text, kwargs), codes in zip(requests, served, strict=True):
        alone = _model().stream(text, voice, max_new_tokens=24, **kwargs)
        assert torch.equal(codes, torch.cat([chunk.codes for chunk in alone])), text


def test_buckets_and_the_setting() -> None:
    assert buckets(1) == [1] and buckets(8) == [1, 2, 4, 8] and buckets(12) == [1, 2, 4, 8, 12]
    assert [bucket_for(rows, buckets(12)) for rows in (1, 3, 5, 9, 12)] == [1, 4, 8, 12, 12]
    assert resolve_cuda_graphs("auto", "cpu") is False and resolve_cuda_graphs("on", "cpu") is False
    assert (
        resolve_cuda_graphs("auto", "cuda") is True and resolve_cuda_graphs("off", "cuda") is False
    )
    with pytest.raises(ValueError, match="cuda_graphs"):
        resolve_cuda_graphs("maybe", "cpu")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a CUDA device")
def test_a_replayed_graph_equals_the_eager_static_step_on_cuda() -> None:
    model = load_model(TINY, device="cuda", quantize="none", warm_chunks=(), cuda_graphs="off")
    talker = model.talker
    talker.ensure_rope(256)
    arena = SlotArena(talker, 4, 64)
    graphed = graphs_module.GraphedStep(talker, arena, 4, capture=True)
    bucket = graphed.buckets[4]
    buffers = bucket.buffers
    buffers.embeds.normal_()
    buffers.slots.copy_(torch.tensor([0, 1, 2, arena.cache.scratch]))
    buffers.positions.copy_(torch.tensor([3, 7, 1, 0]))
    before = [t.clone() for t in (*arena.cache.k, *arena.cache.v)]
    with torch.inference_mode():
        replayed = bucket()
        replayed = [t.clone() for t in (replayed.hidden, replayed.c0, replayed.codes)]
        for ours, saved in zip((*arena.cache.k, *arena.cache.v), before, strict=True):
            ours.copy_(saved)  # the same KV for the eager run
        eager = bucket.step()
    for ours, theirs in zip(replayed, (eager.hidden, eager.c0, eager.codes), strict=True):
        assert torch.equal(ours, theirs)
