"""The voice store under stress: replaces racing readers, crashes mid-write, full disks."""

from __future__ import annotations

import errno
import os
import shutil
import threading

import numpy as np
import pytest
import soundfile as sf

from tts_core.server.voices import VoiceNotFound, VoiceRegistry, VoiceStoreError

RATE = 24_000


@pytest.fixture()
def clips(speech_like):
    """Two clearly different clips, as (rate, samples) pairs: the registry takes either."""
    return {
        "A": (RATE, speech_like(2.0, RATE, f0=120.0)),
        "B": (RATE, speech_like(2.5, RATE, f0=210.0)),
    }


def hidden_entries(root) -> list[str]:  # noqa: ANN001
    return sorted(p.name for p in root.iterdir() if p.name.startswith("."))


def test_replace_racing_four_readers_never_shows_a_half_voice(tmp_path, clips):
    registry = VoiceRegistry(tmp_path)
    stored = {}
    for label in ("A", "B"):  # what each clip looks like once stored (int16-rounded)
        registry.register("v", clips[label], label, replace=True)
        stored[label] = registry.load("v")[1]
    done, failures, reads = threading.Event(), [], [0] * 4

    def replace_in_a_loop() -> None:
        try:
            for i in range(60):
                label = "AB"[i % 2]
                registry.register("v", clips[label], label, replace=True)
        finally:
            done.set()

    def read_in_a_loop(slot: int) -> None:
        while not done.is_set():
            try:
                assert registry.get("v").name == "v"
                voice, audio = registry.load("v")
                assert audio.dtype == np.float32 and audio.ndim == 1
                # the clip must belong to the transcript read with it: one voice, never a mix
                assert np.array_equal(audio, stored[voice.transcript]), voice.transcript
            except Exception as exc:  # noqa: BLE001 - every kind of failure counts
                failures.append(repr(exc))
            reads[slot] += 1

    threads = [threading.Thread(target=read_in_a_loop, args=(i,)) for i in range(4)]
    threads.append(threading.Thread(target=replace_in_a_loop))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not failures, f"{len(failures)} of {sum(reads)} reads failed: {failures[:3]}"
    assert min(reads) > 10
    assert hidden_entries(tmp_path) == []


def test_a_crash_at_any_step_of_a_replace_leaves_the_old_or_the_new_voice(
    tmp_path, clips, monkeypatch
):
    root = tmp_path / "voices"
    registry = VoiceRegistry(root)
    registry.register("v", clips["A"], "A")
    stored = {"A": registry.load("v")[1]}
    snapshots = []
    real_rename, real_rmtree = os.rename, shutil.rmtree

    def crash_point() -> None:
        # a copy of the store as it is now is what a process killed here leaves on disk
        copy = tmp_path / f"crash-{len(snapshots)}"
        shutil.copytree(root, copy, symlinks=True)
        snapshots.append(copy)

    def rename(src, dst, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        crash_point()
        return real_rename(src, dst, *args, **kwargs)

    def rmtree(path, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        crash_point()
        return real_rmtree(path, *args, **kwargs)

    monkeypatch.setattr(os, "rename", rename)
    monkeypatch.setattr(shutil, "rmtree", rmtree)
    registry.register("v", clips["B"], "B", replace=True)
    crash_point()  # after the last step
    monkeypatch.undo()
    stored["B"] = registry.load("v")[1]

    assert len(snapshots) >= 3  # at least: before the renames and after the replace
    found = {}
    for copy in snapshots:
        try:
            voice, audio = VoiceRegistry(copy).load("v")  # the next start on what was left
            found[copy.name] = voice.transcript
            assert np.array_equal(audio, stored[voice.transcript])
        except VoiceNotFound:
            found[copy.name] = "neither"
    assert set(found.values()) <= {"A", "B"}, found
    assert found[snapshots[0].name] == "A" and found[snapshots[-1].name] == "B"
    assert {copy.name: hidden_entries(copy) for copy in snapshots if hidden_entries(copy)} == {}


def test_a_failed_swap_puts_the_old_voice_back_at_once(tmp_path, clips, monkeypatch):
    registry = VoiceRegistry(tmp_path)
    registry.register("v", clips["A"], "A")
    real_rename, calls_into_v = os.rename, []

    def rename(src, dst, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        if str(dst).endswith(os.sep + "v"):
            calls_into_v.append(src)
            if len(calls_into_v) == 1:  # moving the new copy in; putting the old back works
                raise OSError(errno.EIO, "Input/output error")
        return real_rename(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "rename", rename)
    with pytest.raises(OSError):
        registry.register("v", clips["B"], "B", replace=True)
    monkeypatch.undo()
    assert registry.load("v")[0].transcript == "A"  # no restart needed
    assert hidden_entries(tmp_path) == []


@pytest.mark.parametrize(
    ("failing", "code", "status"),
    [
        ("soundfile.write", errno.ENOSPC, 507),
        ("os.rename", errno.ENOSPC, 507),
        ("os.rename", errno.EDQUOT, 507),
        ("os.rename", errno.EROFS, 503),
        ("os.rename", errno.EACCES, 503),
    ],
)
def test_a_failed_write_cleans_up_and_says_why(tmp_path, clips, monkeypatch, failing, code, status):
    root = tmp_path / "store"
    registry = VoiceRegistry(root)
    registry.register("old", clips["A"], "A")

    def fail(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        raise OSError(code, os.strerror(code), str(root / "x"))

    module, attribute = failing.split(".")
    monkeypatch.setattr(sf if module == "soundfile" else os, attribute, fail)
    for name, replace in (("new", False), ("old", True)):
        with pytest.raises(VoiceStoreError) as caught:
            registry.register(name, clips["B"], "B", replace=replace)
        assert caught.value.status == status
        assert str(caught.value) == caught.value.message and str(tmp_path) not in str(caught.value)
        assert hidden_entries(root) == []  # no staging folder left to keep the disk full
    monkeypatch.undo()
    assert registry.load("old")[0].transcript == "A"  # the failed replace kept it
    assert registry.register("new", clips["B"], "B").status == "ok"  # the next one works
    assert [v.name for v in registry.list() if v.kind == "custom"] == ["new", "old"]


def test_other_os_errors_pass_through_unchanged(tmp_path, clips, monkeypatch):
    def fail(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(sf, "write", fail)
    with pytest.raises(OSError) as caught:
        VoiceRegistry(tmp_path).register("v", clips["A"], None)
    assert caught.value.errno == errno.EIO and not isinstance(caught.value, VoiceStoreError)
    assert hidden_entries(tmp_path) == []


def test_start_up_puts_back_interrupted_replaces_and_sweeps_leftovers(tmp_path, clips):
    VoiceRegistry(tmp_path).register("v", clips["A"], "A")
    VoiceRegistry(tmp_path).register("kept", clips["B"], "B")
    shutil.copytree(tmp_path / "kept", tmp_path / ".old~kept")  # its swap finished: garbage
    os.rename(tmp_path / "v", tmp_path / ".old~v")  # killed between the two renames
    (tmp_path / ".new~v~k2j4abcd").mkdir()  # its half-written replacement
    (tmp_path / ".new~v~k2j4abcd" / "reference.wav").write_bytes(b"RIFF")
    (tmp_path / ".del~gone~0123abcd").mkdir()  # a delete killed before its rmtree
    (tmp_path / ".w-ab_cd9xz").mkdir()  # staging of the code before the swap (mkdtemp name)
    (tmp_path / ".new~probe~1234abcd").write_text("")
    registry = VoiceRegistry(tmp_path)
    assert registry.load("v")[0].transcript == "A"
    assert registry.load("kept")[0].transcript == "B"
    assert hidden_entries(tmp_path) == []
    assert [v.name for v in registry.list() if v.kind == "custom"] == ["kept", "v"]


def test_store_problem_names_an_unwritable_or_uncreatable_store(tmp_path, monkeypatch):
    created = tmp_path / "new" / "voices"
    assert VoiceRegistry(created).store_problem() is None
    assert created.is_dir() and hidden_entries(created) == []  # the probe cleans up
    (tmp_path / "file").write_text("not a folder")
    problem = VoiceRegistry(tmp_path / "file" / "voices").store_problem()
    assert problem == f"the folder cannot be created ({os.strerror(errno.ENOTDIR)})"

    def read_only(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        raise OSError(errno.EROFS, os.strerror(errno.EROFS))

    monkeypatch.setattr("tempfile.mkdtemp", read_only)  # chmod does not stop root
    problem = VoiceRegistry(tmp_path).store_problem()
    assert problem == f"the folder is not writable ({os.strerror(errno.EROFS)})"


def test_load_gives_24k_mono_float32_for_stored_and_builtin_voices(tmp_path, speech_like):
    stereo_44k = np.stack([speech_like(2.0, 44_100), speech_like(2.0, 44_100, f0=200.0)], axis=1)
    registry = VoiceRegistry(tmp_path)
    registry.register("mine", (44_100, stereo_44k), None)
    voice, audio = registry.load("mine")
    assert audio.dtype == np.float32 and audio.ndim == 1 and abs(audio.size - 2 * RATE) <= 2
    on_disk, rate = sf.read(voice.reference, dtype="float32")
    assert rate == RATE and np.array_equal(audio, on_disk)
    voice, audio = registry.load("alloy")
    assert voice.kind == "builtin" and audio.dtype == np.float32 and audio.ndim == 1
    assert np.array_equal(audio, sf.read(voice.reference, dtype="float32")[0])


def test_a_replace_and_a_load_do_not_wait_on_each_others_disk_writes(tmp_path, clips, monkeypatch):
    """The slow part of a registration (writing the clip) runs outside the lock readers take."""
    registry = VoiceRegistry(tmp_path)
    registry.register("v", clips["A"], "A")
    started, release = threading.Event(), threading.Event()
    real_fsync = os.fsync

    def slow_fsync(fd: int) -> None:
        started.set()
        release.wait(10)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", slow_fsync)
    writer = threading.Thread(target=registry.register, args=("v", clips["B"], "B", None, True))
    writer.start()
    assert started.wait(10)
    assert registry.load("v")[0].transcript == "A"  # served while the new clip is written
    release.set()
    writer.join(10)
    assert registry.load("v")[0].transcript == "B"
