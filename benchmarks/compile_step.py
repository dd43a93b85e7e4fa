"""The static decode step eager against the same step under torch.compile (Inductor, CPU):
issue 38, item 3 ("the rest of the frame": the small operators and the Python between them).

    .venv/bin/python benchmarks/compile_step.py --checkpoint assets/checkpoints/Qwen3-TTS-12Hz-0.6B-Base \
        [--modes default max-autotune-no-cudagraphs] [--threads 1 2] [--batches 1 4] [--rounds 5]

The step is serving/static_step.py's `static_step`: the talker at one new position for each
row of a bucket of B rows, c0 chosen from its logits, then the code predictor's 15 passes and
their draws; int8 as the app loads it on a CPU (frame_floor.py's loader: with the released JSONs
only, the real-size model with random weights, quantized as `load_model` does). Rows mix greedy
and sampled rows (the sampling ops run whatever the mode), each at its own slot and position.

Our int8 layers call a C kernel through ctypes with bare data pointers, which Dynamo cannot
trace: with them as they are, `fullgraph=True` fails (the report says where). To compile the
step, this script registers the kernel as a torch custom op (`compile_step::int8_linear`, a
fake kernel giving its output's shape) and lets Int8Linear call it while the compiled step runs;
Inductor then compiles everything between the int8 layers and calls the kernel as an opaque op.
The eager step runs the layers unchanged.

Measured, in one process per call of this script:
* compile time per (mode, threads, batch): the first call of the compiled step (Dynamo's
  trace + Inductor's code generation and C++ builds), and one again after `torch._dynamo.reset()`
  with Inductor's on-disk caches warm (what a second start would pay);
* ms per step, eager and compiled, interleaved round by round (the machine is shared: only the
  ratio within a round means anything; the load average is printed);
* bit-identity: the compiled step's hidden states, c0 logits, c0 and codes and the slot caches it
  wrote, against the eager step's from the same state; and each row of a bucket of B against
  the same row stepped alone (bucket 1), for eager and compiled.
Inductor's C++ kernels specialize on torch.get_num_threads(), so each thread count compiles
its own step (the cache keys differ).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import statistics
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import torch
from frame_floor import cpu_model, load, load_average

from tts_core.models import native
from tts_core.models.qwen3_tts.sampling import SamplingParams, suppressed_ids
from tts_core.models.qwen3_tts.serving.static_step import (
    C0Rules,
    RowSampling,
    SlotCache,
    StepBuffers,
    predraw,
    static_step,
)
from tts_core.quant.linear import Int8Linear

RESULTS = Path(__file__).resolve().parent / "results"
MAX_LEN = 256  # slot positions: a few seconds of frames after a prompt
POSITIONS = (37, 151, 90, 203, 12, 240, 64, 128)  # each row's position in its slot
SAMPLED = SamplingParams(True, 0.9, 50, 0.8, 1.05)
GREEDY = SamplingParams(False, 1.0, 0, 1.0)
OUTPUTS = ("hidden", "logits", "c0", "codes")


# ---------------------------------------------------------------- the int8 kernel as a custom op
@torch.library.custom_op("compile_step::int8_linear", mutates_args=())
def int8_linear_op(
    rows: torch.Tensor,
    packed: torch.Tensor,
    sum128: torch.Tensor,
    scale: torch.Tensor,
    bias: torch.Tensor | None,
    out_features: int,
    isa: str,
) -> torch.Tensor:
    """rows (R, in) float32 -> (R, out) float32 by the native kernel, called as
    Int8Linear._native calls it."""
    rows, kernel = rows.contiguous(), native.int8_kernel(isa)
    out = torch.empty(rows.shape[0], out_features, dtype=torch.float32)
    status = kernel.function(
        rows.data_ptr(),
        rows.shape[0],
        rows.shape[1],
        out_features,
        packed.data_ptr(),
        sum128.data_ptr(),
        scale.data_ptr(),
        None if bias is None else bias.data_ptr(),
        out.data_ptr(),
        torch.get_num_threads(),
    )
    if status != 0:
        raise MemoryError("int8_linear: no memory for its scratch rows")
    return out


@int8_linear_op.register_fake
def _(rows, packed, sum128, scale, bias, out_features, isa):  # noqa: ANN001, ANN202
    return rows.new_empty(rows.shape[0], out_features)


def traceable_forward(self: Int8Linear, x: torch.Tensor) -> torch.Tensor:
    """Int8Linear.forward with the kernel behind the custom op (the torch path where unpacked)."""
    rows = x.reshape(-1, self.in_features).float()
    if not self.packed:
        return self._shaped(self._reference(rows), x)
    out = int8_linear_op(
        rows,
        self.weight_packed,
        self.weight_sum128,
        self.weight_scale,
        self.bias,
        self.out_features,
        self.kernel_isa,
    )
    return self._shaped(out, x)


@contextlib.contextmanager
def traceable_int8() -> Iterator[None]:
    original = Int8Linear.forward
    Int8Linear.forward = traceable_forward
    try:
        yield
    finally:
        Int8Linear.forward = original


# ---------------------------------------------------------------- the step and its state
class StepState:
    """A bucket's slot cache, buffers and code-predictor caches, filled as a server's would be:
    random keys/values, each row at its own slot and position, pre-drawn noise."""

    def __init__(self, model, rows: list[int], kv: SlotCache, buffers: StepBuffers) -> None:  # noqa: ANN001
        self.model, self.rows, self.kv, self.buffers = model, rows, kv, buffers
        self.predictor = model.talker.code_predictor.new_caches(len(rows))
        cfg = model.talker.cfg
        self.rules = C0Rules(
            cfg.codec_eos_token_id, suppressed_ids(cfg.vocab_size, cfg.codec_eos_token_id, "cpu")
        )

    def step(self) -> tuple[torch.Tensor, ...]:
        out = static_step(self.model.talker, self.kv, self.predictor, self.rules, self.buffers)
        return out.hidden, out.logits, out.c0, out.codes

    def clone(self) -> StepState:
        """The same state in new tensors (a compiled run next to an eager one)."""
        twin = copy.copy(self)
        twin.kv, twin.buffers = copy.deepcopy(self.kv), copy.deepcopy(self.buffers)
        twin.predictor = copy.deepcopy(self.predictor)
        return twin


def filled_state(model, max_batch: int, seed: int = 0) -> StepState:  # noqa: ANN001
    """max_batch real rows in one bucket; rows alternate greedy / sampled."""
    talker, cfg = model.talker, model.talker.cfg
    talker.ensure_rope(MAX_LEN)
    gen = torch.Generator().manual_seed(seed)
    kv = SlotCache(talker.model, max_batch, MAX_LEN, model.dtype, model.device)
    for tensor in (*kv.k, *kv.v):
        tensor.normal_(generator=gen)
    buffers = StepBuffers.empty(talker, max_batch, MAX_LEN, kv.scratch)
    groups = cfg.code_predictor.num_code_groups
    codes = torch.randint(0, cfg.code_predictor.vocab_size, (max_batch, groups), generator=gen)
    with torch.inference_mode():
        buffers.embeds.copy_(talker.frame_embed(codes)[:, None])
    buffers.slots.copy_(torch.arange(max_batch))
    buffers.positions.copy_(torch.tensor([p % MAX_LEN for p in POSITIONS[:max_batch]]))
    buffers.frames.copy_(torch.arange(max_batch) * 5)
    buffers.history.fill_(int(suppressed_ids(cfg.vocab_size, cfg.codec_eos_token_id, "cpu")[0]))
    buffers.history[:, :8] = torch.randint(0, 2048, (max_batch, 8), generator=gen)
    params = [SAMPLED if row % 2 else GREEDY for row in range(max_batch)]
    buffers.talker.copy_(RowSampling.of(params, "cpu"))
    buffers.subtalker.copy_(RowSampling.of(params, "cpu"))
    for row in range(max_batch):
        predraw(gen, SAMPLED, SAMPLED, buffers.noise_c0[row], buffers.noise_codes[row])
    return StepState(model, list(range(max_batch)), kv, buffers)


def row_alone(full: StepState, row: int) -> StepState:
    """Bucket 1 holding `row` of `full`, over (a copy of) the same slot cache."""
    b = full.buffers
    one = StepBuffers(
        embeds=b.embeds[row : row + 1].clone(),
        slots=b.slots[row : row + 1].clone(),
        positions=b.positions[row : row + 1].clone(),
        history=b.history[row : row + 1].clone(),
        frames=b.frames[row : row + 1].clone(),
        talker=RowSampling(
            *(getattr(b.talker, f)[row : row + 1].clone() for f in RowSampling.__dataclass_fields__)
        ),
        subtalker=RowSampling(
            *(
                getattr(b.subtalker, f)[row : row + 1].clone()
                for f in RowSampling.__dataclass_fields__
            )
        ),
        noise_c0=b.noise_c0[row : row + 1].clone(),
        noise_codes=b.noise_codes[row : row + 1].clone(),
    )
    return StepState(full.model, [row], copy.deepcopy(full.kv), one)


# ---------------------------------------------------------------- bit-identity
def first_difference(ours: tuple, theirs: tuple, names: tuple = OUTPUTS) -> str | None:
    """None when every tensor is equal bit for bit, else the first differing one and its max
    absolute difference."""
    for name, a, b in zip(names, ours, theirs, strict=True):
        if not torch.equal(a, b):
            diff = (a.double() - b.double()).abs().max() if a.is_floating_point() else "ids"
            return f"{name} (max |diff| {diff})"
    return None


def compare_runs(eager: StepState, compiled: StepState, run_compiled: Callable) -> dict:
    """One step each from equal states: outputs and the slot caches written."""
    with torch.inference_mode():
        ours = eager.step()
        theirs = run_compiled(compiled)
    caches = first_difference(
        tuple(eager.kv.k + eager.kv.v),
        tuple(compiled.kv.k + compiled.kv.v),
        tuple(f"slot cache {i}" for i in range(2 * len(eager.kv.k))),
    )
    diff = first_difference(ours, theirs) or caches
    return {"identical": diff is None, "first_difference": diff}


def across_batch(full: StepState, run: Callable) -> dict:
    """Each row of the bucket against the same row stepped alone (outputs only: its row)."""
    with torch.inference_mode():
        batched = run(full.clone())
        diffs = {}
        for row in full.rows:
            alone = run(row_alone(full, row))
            diff = first_difference(tuple(t[row : row + 1] for t in batched), alone)
            if diff:
                diffs[row] = diff
    return {"identical": not diffs, "rows_differing": diffs}


# ---------------------------------------------------------------- compile and time
def compiled_step(mode: str) -> Callable:
    """A compiled `StepState.step` for one mode; each bucket size specializes on first call."""

    def body(state: StepState) -> tuple[torch.Tensor, ...]:
        return state.step()

    fn = torch.compile(body, fullgraph=True, dynamic=False, mode=mode)

    def run(state: StepState) -> tuple[torch.Tensor, ...]:
        with traceable_int8():
            return fn(state)

    return run


def untraceable_error(state: StepState) -> str | None:
    """Whether the step as it is (int8 layers through ctypes) compiles with fullgraph=True:
    None if it does, else the first line of Dynamo's error (found at trace time, no codegen)."""
    torch._dynamo.reset()
    fn = torch.compile(lambda s: s.step(), fullgraph=True, dynamic=False, backend="eager")
    try:
        with torch.inference_mode():
            fn(state.clone())
    except Exception as error:  # noqa: BLE001 - any Dynamo failure is the answer
        return f"{type(error).__name__}: {str(error).strip().splitlines()[0]}"
    finally:
        torch._dynamo.reset()
    return None


def timed_call(run: Callable, state: StepState) -> float:
    with torch.inference_mode():
        start = time.perf_counter()
        run(state)
        return time.perf_counter() - start


def step_ms(run: Callable, state: StepState, steps: int) -> float:
    """Median ms of `steps` calls (one call re-does the same position: the same work)."""
    return 1000 * statistics.median(timed_call(run, state) for _ in range(steps))


def eager_run(state: StepState) -> tuple[torch.Tensor, ...]:
    return state.step()


def measure_threads(model, threads: int, args: argparse.Namespace) -> dict:  # noqa: ANN001
    """Compile, check and time every (mode, batch) at one thread count."""
    torch.set_num_threads(threads)
    torch._dynamo.reset()
    full = filled_state(model, max(args.batches))
    states = {
        b: (full if b == full.rows.__len__() else filled_state(model, b)) for b in args.batches
    }
    result = {"compile_s": {}, "recompile_s": {}, "vs_eager": {}, "across_batch": {}}
    runs = {"eager": eager_run}
    for mode in args.modes:
        run = compiled_step(mode)
        for batch, state in states.items():
            key = f"{mode}/b{batch}"
            result["compile_s"][key] = timed_call(run, state.clone())
            result["vs_eager"][key] = compare_runs(state.clone(), state.clone(), run)
        result["across_batch"][mode] = across_batch(full, run)
        runs[mode] = run
    result["across_batch"]["eager"] = across_batch(full, eager_run)
    if args.recompile:  # a second start: Dynamo traces again, Inductor reads its caches
        torch._dynamo.reset()
        for mode in args.modes:
            run = compiled_step(mode)
            for batch, state in states.items():
                result["recompile_s"][f"{mode}/b{batch}"] = timed_call(run, state.clone())
            runs[mode] = run
    result["rounds"] = interleaved(runs, states, args.rounds, args.steps)
    return result


def interleaved(
    runs: dict[str, Callable], states: dict[int, StepState], rounds: int, steps: int
) -> dict:
    """Per batch: each round times every variant once (median of `steps` calls), in turn."""
    out = {}
    for batch, state in states.items():
        per_round = []
        for _ in range(rounds):
            per_round.append({name: step_ms(run, state, steps) for name, run in runs.items()})
        out[batch] = per_round
    return out


def summary(rounds: list[dict]) -> dict:
    """Median ms per variant and the median over rounds of each variant / eager."""
    names = rounds[0].keys()
    return {
        name: {
            "ms": statistics.median(r[name] for r in rounds),
            "vs_eager": statistics.median(r[name] / r["eager"] for r in rounds),
        }
        for name in names
    }


def run(args: argparse.Namespace, model=None) -> dict:  # noqa: ANN001
    load_before = load_average()
    start = time.perf_counter()
    model = model or load(args.checkpoint, "int8", torch.float32, ())
    load_s = time.perf_counter() - start
    result = {
        "checkpoint": str(args.checkpoint),
        "cpu": cpu_model(),
        "torch": torch.__version__,
        "modes": args.modes,
        "batches": args.batches,
        "rounds": args.rounds,
        "steps": args.steps,
        "load_s": load_s,
        "int8_kernel": next(
            (m.kernel_isa for m in model.talker.modules() if isinstance(m, Int8Linear)), None
        ),
        "untraceable_as_is": untraceable_error(filled_state(model, 1)),
        "threads": {},
    }
    for threads in args.threads:
        measured = measure_threads(model, threads, args)
        measured["summary"] = {b: summary(r) for b, r in measured["rounds"].items()}
        result["threads"][threads] = measured
    result["load_average_before"], result["load_average_after"] = load_before, load_average()
    return result


# ---------------------------------------------------------------- report
def table(result: dict) -> str:
    lines = [
        "| threads | batch | variant | ms / step | / eager | compile s | 2nd start s | "
        "= eager | rows = alone |",
        "|--:|--:|---|--:|--:|--:|--:|---|---|",
    ]
    for threads, measured in result["threads"].items():
        for batch, rows in measured["summary"].items():
            for name, row in rows.items():
                key = f"{name}/b{batch}"
                same = measured["vs_eager"].get(key, {"identical": True})["identical"]
                alone = measured["across_batch"][name]["identical"]
                compile_s = measured["compile_s"].get(key)
                again = measured["recompile_s"].get(key)
                lines.append(
                    f"| {threads} | {batch} | {name} | {row['ms']:.2f} | {row['vs_eager']:.3f} | "
                    f"{'-' if compile_s is None else f'{compile_s:.1f}'} | "
                    f"{'-' if again is None else f'{again:.1f}'} | {'yes' if same else 'NO'} | "
                    f"{'yes' if alone else 'NO'} |"
                )
    return "\n".join(lines)


def report(result: dict) -> str:
    notes = [
        f"{result['checkpoint']} int8 ({result['int8_kernel']} kernel) on {result['cpu']}, "
        f"torch {result['torch']}; load average {result['load_average_before']} -> "
        f"{result['load_average_after']}",
        "step as it is under fullgraph=True: " + (result["untraceable_as_is"] or "compiles"),
    ]
    for threads, measured in result["threads"].items():
        for key, check in measured["vs_eager"].items():
            if not check["identical"]:
                notes.append(
                    f"{threads} threads {key}: differs from eager: {check['first_difference']}"
                )
        for name, check in measured["across_batch"].items():
            if not check["identical"]:
                notes.append(
                    f"{threads} threads {name}: rows in a batch differ from alone: "
                    f"{check['rows_differing']}"
                )
    return "\n".join([*notes, table(result)])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoint", type=Path, required=True)
    ap.add_argument("--modes", nargs="+", default=["default"])
    ap.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    ap.add_argument("--batches", nargs="+", type=int, default=[1, 4])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=5, help="calls per variant per round")
    ap.add_argument("--no-recompile", dest="recompile", action="store_false")
    ap.add_argument("--json", type=Path, default=RESULTS / "compile_step.json")
    args = ap.parse_args()
    result = run(args)
    print(report(result))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2, default=str) + "\n")
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
