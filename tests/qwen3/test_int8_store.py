"""The int8 model saved once (quant/store.py): the first int8 / auto load calibrates and saves,
later loads read the file: no calibration, no speed check, no float projection read, and a
model bit-identical to the freshly quantized one. A damaged or mismatched file, or a changed
checkpoint, is never used; TTS_CORE_INT8_CACHE=0 turns saving off.

Every test has its own cache folder ($TTS_CORE_CACHE = a temp folder): nothing is read from
or written to the user's cache."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from tts_core.models import native
from tts_core.models.qwen3_tts import quantize as quantize_module
from tts_core.models.qwen3_tts.checkpoint import SafetensorsFile
from tts_core.models.qwen3_tts.model import load_model
from tts_core.models.qwen3_tts.quantize import Qwen3Int8
from tts_core.quant import quantize as toolkit
from tts_core.quant import speed
from tts_core.quant import store as int8_store
from tts_core.quant.linear import Int8Linear
from tts_core.quant.speed import SpeedCheck

from .conftest import fixture_path, golden_voice, load_goldens, needs_int8

TINY = fixture_path("qwen3-tiny-a")
HANG_S = 120  # what a broken path never does (a paused writer that is never released)
REPLACED = (
    "q_proj",
    "k_proj",
    "v_proj",
    "o_proj",
    "gate_proj",
    "up_proj",
    "down_proj",
    "lm_head",
    "small_to_mtp_projection",
)

pytestmark = needs_int8("the saved int8 model is")


@pytest.fixture
def cache(monkeypatch, tmp_path) -> Path:
    """An empty cache of this test's own; the folder the int8 files go to."""
    monkeypatch.setenv("TTS_CORE_CACHE", str(tmp_path))
    monkeypatch.delenv(int8_store.ENV, raising=False)
    return tmp_path / int8_store.FOLDER


@pytest.fixture
def calibrations(monkeypatch) -> list[int]:
    """Counts the calibration runs (the real one runs)."""
    calls: list[int] = []
    real = quantize_module.calibrate

    def counted(model):  # noqa: ANN001, ANN202
        calls.append(1)
        return real(model)

    monkeypatch.setattr(quantize_module, "calibrate", counted)
    return calls


QUANTIZING = (
    (quantize_module, "calibrate"),
    (toolkit, "quantize"),
    (speed, "speed_check"),
    (speed, "measure_speed"),
)
REAL = {(module, name): getattr(module, name) for module, name in QUANTIZING}


def _forbidden(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
    raise AssertionError("quantized again although a saved model exists")


def _forbid_quantizing(monkeypatch) -> None:
    for module, name in QUANTIZING:
        monkeypatch.setattr(module, name, _forbidden)


def _assert_same_model(fresh, loaded) -> None:
    """Every tensor of the talker equal (dtype and bits), the same modules in the same places."""
    a, b = fresh.talker.state_dict(), loaded.talker.state_dict()
    assert sorted(a) == sorted(b)
    for key, value in a.items():
        assert value.dtype == b[key].dtype and torch.equal(value, b[key]), key
    types = {name: type(m).__name__ for name, m in fresh.talker.named_modules()}
    assert types == {name: type(m).__name__ for name, m in loaded.talker.named_modules()}
    for stack in ("model", "code_predictor.model"):
        for x, y in zip(
            fresh.talker.get_submodule(stack).layers,
            loaded.talker.get_submodule(stack).layers,
            strict=True,
        ):
            assert x.self_attn.qkv_proj.out_features == y.self_attn.qkv_proj.out_features
            assert not hasattr(y.self_attn, "q_proj") and not hasattr(y.mlp, "gate_proj")


def _speech(model, goldens) -> tuple[torch.Tensor, np.ndarray]:  # noqa: ANN001
    """Sampled (not greedy) codes and audio for a seed: any differing bit shows."""
    result = model.generate(
        "Hello there, how are you?", golden_voice(goldens, "icl"), seed=7, max_new_tokens=16
    )
    return result.codes, result.audio


def test_the_second_load_reads_the_saved_model_bit_for_bit(
    tiny_checkpoint: Path, goldens, cache, calibrations, monkeypatch, caplog
):
    fresh = load_model(tiny_checkpoint, quantize="int8")
    assert calibrations == [1] and fresh.quantization.saved_in is None
    (path,) = int8_store.saved_files(cache)
    _forbid_quantizing(monkeypatch)
    caplog.set_level(logging.INFO, logger=int8_store.__name__)
    loaded = load_model(tiny_checkpoint, quantize="int8")
    report = loaded.quantization
    assert loaded.weight_format == "int8" and report.saved_in == str(path)
    assert report.to_json() == fresh.quantization.to_json()  # SQNR, decision: from the file
    assert report.layer_sqnr_db == fresh.quantization.layer_sqnr_db and report.applied
    assert f"quantize: {report.decision} (saved in {path}" in caplog.text
    assert loaded.format_decision == f"int8: asked for (saved in {path} at an earlier load)"
    _assert_same_model(fresh, loaded)
    codes, audio = _speech(fresh, goldens)
    again_codes, again_audio = _speech(loaded, goldens)
    assert torch.equal(codes, again_codes) and np.array_equal(audio, again_audio)
    # a standard safetensors file: the int8 weights unpacked, the report in the metadata
    with safe_open(str(path), framework="pt") as f:
        assert json.loads(f.metadata()["report"]) == fresh.quantization.to_json()
        name = "model.layers.0.self_attn.qkv_proj"
        layer = fresh.talker.get_submodule(name)
        assert torch.equal(f.get_tensor(f"{name}.weight_q"), layer.int8_weight())
        assert torch.equal(f.get_tensor(f"{name}.weight_scale"), layer.weight_scale)


def test_a_bfloat16_model_keeps_its_folded_norms_in_bfloat16(cache, monkeypatch):
    fresh = load_model(TINY, dtype=torch.bfloat16, quantize="int8")
    _forbid_quantizing(monkeypatch)
    loaded = load_model(TINY, dtype=torch.bfloat16, quantize="int8")
    assert loaded.quantization.saved_in is not None
    _assert_same_model(fresh, loaded)
    assert loaded.talker.model.layers[0].input_layernorm.weight.dtype == torch.bfloat16
    (path,) = int8_store.saved_files(cache)
    assert "-bfloat16-int8-" in path.name


def test_no_float_projection_of_a_quantized_layer_is_read(cache, monkeypatch):
    """The second load takes the replaced float layers out before anything is allocated: none
    of their checkpoint tensors is read (the first load reads them all), the rest all are."""
    read: list[str] = []
    real = SafetensorsFile.copy_into

    def spy(self, key, target):  # noqa: ANN001, ANN202
        read.append(key)
        return real(self, key, target)

    monkeypatch.setattr(SafetensorsFile, "copy_into", spy)
    fresh = load_model(TINY, quantize="int8")
    first = [k for k in read if k.startswith("talker.")]
    replaced = {k for k in first if any(f".{part}." in k for part in REPLACED)}
    assert replaced and any(".mlp.down_proj." in k for k in replaced)
    read.clear()
    loaded = load_model(TINY, quantize="int8")
    second = [k for k in read if k.startswith("talker.")]
    assert set(second) == set(first) - replaced
    assert loaded.quantization.saved_in is not None
    _assert_same_model(fresh, loaded)


@pytest.mark.parametrize("why", ["sqnr", "speed"])
def test_a_float_decision_of_auto_is_remembered(why, cache, calibrations, monkeypatch, caplog):
    """`auto` keeping float (a layer below the SQNR bound, or int8 slower here) is saved too:
    the next load neither calibrates nor times, and says what the first load decided."""
    if why == "sqnr":
        monkeypatch.setattr(quantize_module, "MIN_SQNR_DB", 200.0)
    else:
        monkeypatch.setattr(speed, "MIN_TIMED_BYTES", 0)  # the tiny model timed
        slower = SpeedCheck("native test", "float32", {1: 3.0, 8: 5.0}, {1: 2.0, 8: 4.0})
        monkeypatch.setattr(speed, "measure_speed", lambda model, repeats=5: slower)
    first = load_model(TINY, quantize="auto")
    assert first.quantization is None and first.weight_format == "float32"
    assert first.format_decision.startswith("kept float32: ")
    assert calibrations == ([1] if why == "sqnr" else [])
    (path,) = int8_store.saved_files(cache)
    _forbid_quantizing(monkeypatch)
    caplog.set_level(logging.INFO, logger=int8_store.__name__)
    second = load_model(TINY, quantize="auto")
    assert second.quantization is None and second.weight_format == "float32"
    assert second.format_decision == (
        f"{first.format_decision} (saved in {path} at an earlier load)"
    )
    assert not any(isinstance(m, Int8Linear) for m in second.talker.modules())
    assert f"quantize: {first.format_decision} (saved in {path}" in caplog.text
    # `int8` is another request: its own file, quantized whatever auto decided
    for (module, name), function in REAL.items():
        monkeypatch.setattr(module, name, function)
    assert load_model(TINY, quantize="int8").quantization.saved_in is None
    assert len(int8_store.saved_files(cache)) == 2


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:-100])


def _flip_a_data_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-50] ^= 0x01  # inside an int8 weight: only the checksum can tell
    path.write_bytes(bytes(data))


def _garble_the_header(path: Path) -> None:
    path.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json at all" + path.read_bytes()[24:])


def _empty(path: Path) -> None:
    path.write_bytes(b"")


def _another_checkpoints_file(path: Path) -> None:
    """The file tiny-b's int8 load saves, under tiny-a's name: a whole, valid file, but the
    key in it is another checkpoint's."""
    before = set(int8_store.saved_files(path.parent))
    load_model(fixture_path("qwen3-tiny-b"), quantize="int8")
    (other,) = set(int8_store.saved_files(path.parent)) - before
    os.replace(other, path)


def _a_tensor_missing(path: Path) -> None:
    """Right key and checksum, one tensor less: the tensors must match the model."""
    with safe_open(str(path), framework="pt") as f:
        metadata = f.metadata()
        tensors = {  # copies: the file is rewritten below, and get_tensor maps it
            k: f.get_tensor(k).clone() for k in f.keys() if not k.endswith("down_proj.weight_q")
        }
    items = [(k, t.dtype, tuple(t.shape), t.detach) for k, t in tensors.items()]
    del metadata["checksum"]
    with open(path, "wb") as f:
        int8_store._write_safetensors(f, items, metadata)


DAMAGES = {
    "truncated": (_truncate, "truncated"),
    "a flipped data bit": (_flip_a_data_byte, "checksum mismatch"),
    "a garbled header": (_garble_the_header, "garbled header"),
    "empty": (_empty, "truncated"),
    "another checkpoint's": (_another_checkpoints_file, "saved for another checkpoint"),
    "a tensor missing": (_a_tensor_missing, "missing code_predictor.model.layers.0.mlp.down_proj"),
}


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_a_damaged_or_mismatched_file_is_ignored_and_made_again(
    damage, cache, calibrations, monkeypatch, caplog
):
    fresh = load_model(TINY, quantize="int8")
    (path,) = int8_store.saved_files(cache)
    damage_file, why = DAMAGES[damage]
    damage_file(path)
    calibrations.clear()
    caplog.set_level(logging.INFO, logger=int8_store.__name__)
    rebuilt = load_model(TINY, quantize="int8")
    assert calibrations == [1] and rebuilt.quantization.saved_in is None
    assert f"ignoring the saved int8 model {path} (" in caplog.text and why in caplog.text
    _assert_same_model(fresh, rebuilt)
    _forbid_quantizing(monkeypatch)  # made again: the next load reads it
    assert load_model(TINY, quantize="int8").quantization.saved_in == str(path)


def _copy_checkpoint(tmp_path: Path) -> Path:
    folder = tmp_path / "ckpt"
    shutil.copytree(TINY, folder)
    return folder


def test_a_changed_checkpoint_is_quantized_anew(tmp_path, cache, calibrations, monkeypatch):
    """Same names, shapes, sizes and even mtime, other values: not the saved model. The
    checkpoint's hash is remembered (here for every file) and used while the file is
    unchanged; a rewrite changes its ctime, and the file is hashed again."""
    monkeypatch.setattr(int8_store, "HASH_MEMO_BYTES", 0)
    hashed: list[str] = []
    real_hash = int8_store._hash_file

    def counted(path: Path) -> str:
        hashed.append(path.name)
        return real_hash(path)

    monkeypatch.setattr(int8_store, "_hash_file", counted)
    folder = _copy_checkpoint(tmp_path)
    weights = folder / "model.safetensors"
    first = load_model(folder, quantize="int8")
    assert calibrations == [1] and hashed.count("model.safetensors") == 1
    assert load_model(folder, quantize="int8").quantization.saved_in is not None
    assert calibrations == [1] and hashed.count("model.safetensors") == 1  # remembered

    name = "talker.model.layers.0.mlp.down_proj.weight"
    state = load_file(str(weights))
    state[name] = state[name] * 1.5
    stat = weights.stat()
    with safe_open(str(weights), framework="pt") as f:
        metadata = f.metadata()
    save_file(state, str(tmp_path / "edited.safetensors"), metadata=metadata)
    with open(weights, "r+b") as f:  # rewritten in place: the same inode
        f.write((tmp_path / "edited.safetensors").read_bytes())
    os.utime(weights, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # the mtime as it was
    now = weights.stat()
    assert (now.st_size, now.st_mtime_ns, now.st_ino) == (
        stat.st_size,
        stat.st_mtime_ns,
        stat.st_ino,
    )

    second = load_model(folder, quantize="int8")
    assert calibrations == [1, 1] and second.quantization.saved_in is None
    assert hashed.count("model.safetensors") == 2
    layer = "model.layers.0.mlp.down_proj"
    assert not torch.equal(
        first.talker.get_submodule(layer).int8_weight(),
        second.talker.get_submodule(layer).int8_weight(),
    )
    assert len(int8_store.saved_files(cache)) == 2  # one per checkpoint


def test_the_key_names_what_the_result_depends_on(cache, monkeypatch):
    """A constant of the calibration, the dtype, the thread count or `auto` each give a file
    of their own (the model is quantized again); the same request finds the same file."""
    paths = set()
    for change in ("none", "dtype", "constant", "threads", "auto"):
        with monkeypatch.context() as m:
            if change == "constant":
                m.setattr(quantize_module, "CALIBRATION_FRAMES", 3)
            if change == "threads":
                m.setattr(torch, "get_num_threads", lambda: 7)
            store = int8_store.Int8Store.open(
                Qwen3Int8,
                TINY,
                torch.bfloat16 if change == "dtype" else torch.float32,
                min_sqnr_db=30.0 if change == "auto" else None,
                check_speed=change == "auto",
            )
        paths.add(store.path)
    assert len(paths) == 5
    again = int8_store.Int8Store.open(
        Qwen3Int8, TINY, torch.float32, min_sqnr_db=None, check_speed=False
    )
    assert again.path in paths and again.key["checkpoint"]["model.safetensors"] == (
        int8_store._hash_file(TINY / "model.safetensors")
    )


def test_files_of_another_version_go_and_at_most_two_stay(cache, monkeypatch):
    """Per checkpoint, dtype and request: files of two machines (thread counts, CPUs) stay, a
    third removes the least recently used, and a file of another version of our code is
    removed as soon as the current one is saved (it would never be read again)."""

    def load(cpu: str | None = None, code: str | None = None) -> Path:
        with monkeypatch.context() as m:
            if cpu is not None:
                m.setattr(speed, "cpu_model", lambda: cpu)
            if code is not None:
                m.setattr(int8_store, "code_digest", lambda paths: code)
            return Path(load_model(TINY, quantize="int8").quantization.saved_in or "").name

    load()
    (here,) = int8_store.saved_files(cache)
    load(cpu="CPU 2")
    (two,) = set(int8_store.saved_files(cache)) - {here}
    assert load() == here.name  # read: now the most recently used
    load(cpu="CPU 3")
    (three,) = set(int8_store.saved_files(cache)) - {here}
    assert int8_store.saved_files(cache) == sorted([here, three])  # CPU 2's was the oldest
    load(code="the next release")
    (new,) = int8_store.saved_files(cache)  # both others were made by this version
    assert new not in (here, two, three)
    load()  # and back: the next release's file goes
    assert int8_store.saved_files(cache) == [here]


def test_saving_can_be_turned_off(cache, calibrations, monkeypatch):
    monkeypatch.setenv(int8_store.ENV, "0")
    load_model(TINY, quantize="int8")
    assert load_model(TINY, quantize="int8").quantization.saved_in is None
    assert calibrations == [1, 1] and not cache.exists()


def test_an_unwritable_cache_still_loads(monkeypatch, calibrations):
    monkeypatch.setenv("TTS_CORE_CACHE", "/dev/null/cache")
    monkeypatch.delenv(int8_store.ENV, raising=False)
    assert load_model(TINY, quantize="int8").weight_format == "int8"
    assert load_model(TINY, quantize="int8").weight_format == "int8" and calibrations == [1, 1]


def test_the_file_serves_every_kernel(cache, monkeypatch):
    """Saved unpacked: loaded where another kernel runs (here the torch._int_mm path), the
    layers hold the same int8 weights and give the same codes."""
    fresh = load_model(TINY, quantize="int8")
    goldens = load_goldens("qwen3-tiny-a")
    _forbid_quantizing(monkeypatch)
    with monkeypatch.context() as m:
        m.setattr(native, "int8_linear", lambda: None)  # as TTS_CORE_NATIVE_ISA=torch chooses
        loaded = load_model(TINY, quantize="int8")
    assert loaded.quantization.saved_in is not None
    for name, module in fresh.talker.named_modules():
        if isinstance(module, Int8Linear):
            other = loaded.talker.get_submodule(name)
            assert not other.packed and torch.equal(other.weight_q, module.int8_weight()), name
            assert torch.equal(other.weight_scale, module.weight_scale)
    assert torch.equal(_speech(fresh, goldens)[0], _speech(loaded, goldens)[0])


def test_writers_at_once_never_leave_a_partial_file(cache, monkeypatch):
    """Writer A is stopped halfway through its file while B loads, quantizes and saves: B's
    whole file is there and read; then A finishes and renames its own whole file over it.
    Neither half file is ever seen under the final name (both write a temp file, renamed)."""
    reached, release = threading.Event(), threading.Event()
    real = int8_store._write_safetensors
    writer_a: list[threading.Thread] = []

    class Pausing:
        def __init__(self, f) -> None:  # noqa: ANN001
            self.f, self.writes = f, 0

        def write(self, data) -> int:  # noqa: ANN001
            written = self.f.write(data)
            self.writes += 1
            if self.writes == 2:  # the header and a first tensor are on disk
                self.f.flush()
                reached.set()
                assert release.wait(HANG_S)
            return written

        def seek(self, *args) -> int:  # noqa: ANN002
            return self.f.seek(*args)

    def write(f, items, metadata):  # noqa: ANN001, ANN202
        real(Pausing(f) if threading.current_thread() in writer_a else f, items, metadata)

    monkeypatch.setattr(int8_store, "_write_safetensors", write)
    results: dict[str, object] = {}
    threads = torch.get_num_threads()  # a thread's own (OpenMP): part of the key

    def load_a() -> None:
        torch.set_num_threads(threads)
        try:
            results["a"] = load_model(TINY, quantize="int8")
        except BaseException as error:  # reported by the main thread
            results["a"] = error
            reached.set()

    writer_a.append(threading.Thread(target=load_a))
    writer_a[0].start()
    try:
        assert reached.wait(HANG_S) and "a" not in results
        assert int8_store.saved_files(cache) == []  # A's half file is only a temp file
        assert len(list(cache.glob("*.tmp"))) == 1
        b = load_model(TINY, quantize="int8")  # B: quantizes, saves, renames
        (path,) = int8_store.saved_files(cache)
        assert b.quantization.saved_in is None
        c = load_model(TINY, quantize="int8")
        assert c.quantization.saved_in == str(path)
    finally:
        release.set()
        writer_a[0].join(HANG_S)
    assert not isinstance(results["a"], BaseException), results["a"]
    assert int8_store.saved_files(cache) == [path] and list(cache.glob("*.tmp")) == []
    _forbid_quantizing(monkeypatch)
    d = load_model(TINY, quantize="int8")
    assert d.quantization.saved_in == str(path)
    _assert_same_model(b, d)


# ------------------------------------------------------------------------------ peak memory
MEASURE = r"""
import json, sys, torch
torch.set_num_threads(1)
import tts_core

def status():
    values = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                values[key] = int(rest.split()[0]) * 1024
    return values

folder, warmup, quantize = sys.argv[1], sys.argv[2], sys.argv[3]
tts_core.load_model(warmup, quantize=quantize)  # imports, kernels, allocator arenas
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")
before = status()
model = tts_core.load_model(folder, quantize=quantize)
after = status()
report = model.quantization
print(json.dumps({"peak": after["VmHWM"] - before["VmRSS"],
                  "resident": after["VmRSS"] - before["VmRSS"],
                  "format": model.weight_format,
                  "saved_in": None if report is None else report.saved_in}))
"""


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="needs Linux /proc")
def test_a_saved_int8_load_peaks_below_the_float_model(tmp_path):
    """On the 0.39 GB random checkpoint of test_load_memory (layers and heads ~100 MB of its
    float32 weights): an int8 load read from the file never holds the float projections, so
    its peak stays below the resident size of the float32 model (what a load that quantizes
    after loading cannot do); each load in a fresh process (see test_load_memory)."""
    from .test_load_memory import build_random_checkpoint

    folder = tmp_path / "ckpt"
    build_random_checkpoint(folder)
    env = {
        **os.environ,
        "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
        "OMP_NUM_THREADS": "1",
        "TTS_CORE_CACHE": str(tmp_path / "cache"),
    }
    env.pop(int8_store.ENV, None)

    def measure(quantize: str) -> dict:
        done = subprocess.run(
            [sys.executable, "-c", MEASURE, str(folder), str(TINY), quantize],
            capture_output=True,
            text=True,
            env=env,
            timeout=600,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads(done.stdout.strip().splitlines()[-1])

    first = measure("int8")  # quantizes and saves
    second = measure("int8")
    plain = measure("none")
    print(
        f"peak / resident growth, MiB: int8 first {first['peak'] >> 20} / "
        f"{first['resident'] >> 20}, int8 from the file {second['peak'] >> 20} / "
        f"{second['resident'] >> 20}, float32 {plain['peak'] >> 20} / {plain['resident'] >> 20}"
    )
    assert first["saved_in"] is None and second["saved_in"] is not None
    assert second["format"] == "int8" and plain["format"] == "float32"
    assert second["peak"] < plain["resident"], (second, plain)
    # the float projections were there before quantizing: the first load peaks above the one
    # from the file by at least half their float32 bytes (~100 MB, int8 a quarter of them).
    # Not against the float model's resident size: every load's codec decoder now keeps its
    # linears laid out once (models/laid_out.py, ~40 MB here), made after the first load's peak
    assert first["peak"] > second["peak"] + (50 << 20), (first, second)
