"""The container's entrypoint and Dockerfile: persistent storage under /data when it exists,
the app exec'd as PID 1 (its own SIGTERM handling: tests/test_http_server.py), one Dockerfile
for the CPU and the GPU image, two stages so the final image has no compiler but the 8-bit
kernels prebuilt for every instruction set (docker/native_kernels.py, run here as the image
runs it). (Building the images needs podman or docker and a registry: not in the suite; the
resolve note of the Space issue says what was built where, and how large.)"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tts_core.models import native

ROOT = Path(__file__).resolve().parents[1]
ENTRYPOINT = ROOT / "docker" / "entrypoint.sh"
DOCKERFILE = ROOT / "Dockerfile"
KERNELS = ROOT / "docker" / "native_kernels.py"
NAMES = ("TTS_VOICES_DIR", "TTS_CORE_CACHE", "HF_HOME")
PREBUILT = "TTS_CORE_NATIVE_PREBUILT=/home/user/.local/lib/tts_core-native"


def stages() -> list[str]:
    """The Dockerfile's stages, each from its FROM line to the next (comments dropped, line
    continuations joined)."""
    lines = [ln for ln in DOCKERFILE.read_text().splitlines() if not ln.lstrip().startswith("#")]
    text = re.sub(r"\\\n", " ", "\n".join(lines))
    return ["FROM" + part for part in re.split(r"^FROM", text, flags=re.M)[1:]]


def run_entrypoint(tmp_path: Path, data: Path, **env: str) -> tuple[dict[str, str], str]:
    """The environment the entrypoint hands to its command (`env`), and what it logged."""
    base = {k: v for k, v in os.environ.items() if k not in NAMES}
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    done = subprocess.run(
        [str(ENTRYPOINT), "env"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**base, "HOME": str(home), "TTS_DATA_DIR": str(data), **env},
    )
    assert done.returncode == 0, done.stderr
    pairs = (line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)
    return dict(pairs), done.stderr


def test_a_writable_data_directory_holds_voices_caches_and_downloads(tmp_path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    env, log = run_entrypoint(tmp_path, data)
    assert env["TTS_VOICES_DIR"] == f"{data}/voices"
    assert env["TTS_CORE_CACHE"] == f"{data}/tts_core"
    assert env["HF_HOME"] == f"{data}/huggingface"
    assert "persistent storage" in log


def test_settings_given_and_a_preloaded_hub_cache_are_kept(tmp_path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (tmp_path / "home" / ".cache" / "huggingface" / "hub").mkdir(parents=True)
    env, _ = run_entrypoint(tmp_path, data, TTS_VOICES_DIR="/srv/voices")
    assert env["TTS_VOICES_DIR"] == "/srv/voices"  # the operator's choice wins
    assert "HF_HOME" not in env  # the image's preloaded model stays where it was put


def test_without_a_data_directory_nothing_is_redirected(tmp_path) -> None:
    env, log = run_entrypoint(tmp_path, tmp_path / "absent")
    assert not set(NAMES) & set(env)
    assert "no writable" in log


def instructions(stage: str) -> list[tuple[str, str]]:
    """A stage's instructions as (KEYWORD, the rest of its line)."""
    return [(line.split(None, 1) + [""])[:2] for line in stage.splitlines() if line.strip()]


def exec_form(keyword: str) -> list[str]:
    """The final stage's ENTRYPOINT or CMD, in exec form (a JSON list)."""
    (args,) = [rest for word, rest in instructions(stages()[-1]) if word == keyword]
    return json.loads(args)


def test_the_entrypoint_execs_its_command_in_its_own_place(tmp_path) -> None:
    """`exec "$@"`: the command replaces the shell (same process id), so the container's
    SIGTERM reaches the app itself, with no shell in between."""
    home = tmp_path / "home"
    home.mkdir()
    process = subprocess.Popen(
        [str(ENTRYPOINT), "sh", "-c", "echo $$"],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "HOME": str(home), "TTS_DATA_DIR": str(tmp_path / "absent")},
    )
    out, _ = process.communicate(timeout=60)
    assert process.returncode == 0 and int(out) == process.pid


def test_the_images_command_line_starts_the_app(tmp_path) -> None:
    """The final stage's ENTRYPOINT and CMD, run as the container runs them from its WORKDIR
    (the checkout's layout: ./docker/entrypoint.sh, app.py), with the image's `python` on
    PATH: the entrypoint applies its storage rule and hands over to the app (`--help` so it
    answers and ends)."""
    home = tmp_path / "home"
    home.mkdir()
    python_dir = str(Path(sys.executable).parent)  # `python` there, as in the image
    done = subprocess.run(
        [*exec_form("ENTRYPOINT"), *exec_form("CMD"), "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={
            **os.environ,
            "HOME": str(home),
            "TTS_DATA_DIR": str(tmp_path / "absent"),
            "PATH": f"{python_dir}:{os.environ['PATH']}",
        },
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: app.py")
    assert "no writable" in done.stderr  # the entrypoint ran first


def run_torch_install(tmp_path: Path, **build_args: str) -> tuple[int, str, list[list[str]]]:
    """The build stage's torch RUN as `docker build` runs it (`/bin/sh -c`, the stage's ARG
    defaults overridden by `build_args`) with a `pip` that records its arguments: (exit code,
    stderr, the pip calls)."""
    build = instructions(stages()[0])
    args = dict(rest.split("=", 1) for word, rest in build if word == "ARG" and "=" in rest)
    (command,) = [rest for word, rest in build if word == "RUN" and "torch==" in rest]
    bin_dir, log = tmp_path / "bin", tmp_path / "pip.log"
    bin_dir.mkdir(parents=True)
    pip = bin_dir / "pip"
    pip.write_text('#!/bin/sh\necho "$@" >> "$PIP_LOG"\n')
    pip.chmod(0o755)
    env = {**args, **build_args, "PIP_LOG": str(log), "PATH": f"{bin_dir}:/usr/bin:/bin"}
    done = subprocess.run(
        ["/bin/sh", "-c", command], env=env, capture_output=True, text=True, timeout=60
    )
    calls = [line.split() for line in log.read_text().splitlines()] if log.exists() else []
    return done.returncode, done.stderr, calls


def makefile_torch() -> str:
    """The torch `make install` pins (the one the suite runs on)."""
    return re.search(r"pip install --quiet torch==(\S+)", (ROOT / "Makefile").read_text())[1]


def test_one_dockerfile_builds_the_cpu_and_the_gpu_image(tmp_path) -> None:
    """The default build installs torch's CPU-only wheel (no CUDA libraries, from the CPU
    index), `--build-arg TORCH=cuda` PyPI's wheel (with CUDA); both the torch the suite runs
    on; any other value fails the build before installing anything."""
    pinned = f"torch=={makefile_torch()}"
    code, _, (cpu,) = run_torch_install(tmp_path / "cpu")
    assert code == 0 and pinned in cpu
    assert cpu[cpu.index("--index-url") + 1].endswith("/whl/cpu")
    code, _, (mirror,) = run_torch_install(tmp_path / "mirror", TORCH_CPU_INDEX="http://m/cpu")
    assert mirror[mirror.index("--index-url") + 1] == "http://m/cpu"
    code, _, (cuda,) = run_torch_install(tmp_path / "cuda", TORCH="cuda")
    assert code == 0 and pinned in cuda and "--index-url" not in cuda
    code, stderr, calls = run_torch_install(tmp_path / "rocm", TORCH="rocm")
    assert code != 0 and "TORCH must be cpu or cuda" in stderr and calls == []


# What only a built image could show (no compiler in the final image, its user, what the build
# context holds) is checked in the Dockerfile's text: building needs a container daemon and a
# registry, neither of which the suite has (docker here is a client without a daemon).
def test_the_compiler_stays_in_the_build_stage() -> None:
    build, final = stages()
    assert build.startswith("FROM python:3.11-slim AS build")
    assert re.search(r"apt-get install [^\n]*\bgcc\b", build)
    assert final.startswith("FROM python:3.11-slim\n")
    for word in ("apt-get", "gcc", "cc ", "clang", "build-essential", "pip install"):
        assert word not in final, word  # nothing is installed in the final stage
    # what it takes from the build stage: the packages and, under ~/.local, the kernels
    assert final.count("COPY --from=build") == 1
    assert "COPY --from=build --chown=user /home/user/.local /home/user/.local" in final
    assert PREBUILT in build and PREBUILT in final  # built where the app looks for them
    assert "RUN python docker/native_kernels.py build" in build
    assert "python docker/native_kernels.py check" in final  # the build fails without them


def test_the_final_image_runs_as_user_1000_from_the_app_source() -> None:
    final = stages()[-1]
    assert "RUN useradd -m -u 1000 user\nUSER user" in final
    assert "COPY --chown=user tts_core ./tts_core" in final  # assets/voices is found beside it
    assert "pip uninstall --yes tts-core" in stages()[0]  # no second, shadowed copy


def test_the_build_context_keeps_what_the_dockerfile_copies() -> None:
    ignored = [p.strip() for p in (ROOT / ".dockerignore").read_text().splitlines() if p.strip()]

    def is_ignored(path: str) -> bool:
        return any(fnmatch.fnmatch(path, pattern) for pattern in ignored)

    copied = re.findall(r"^COPY --chown=user (.+) \S+$", DOCKERFILE.read_text(), flags=re.M)
    sources = [src for line in copied for src in line.split()]
    assert {"tts_core", "app.py", "assets", "docker/entrypoint.sh"} <= set(sources)
    assert not [src for src in sources if is_ignored(src)]
    for heavy in (".venv", ".oracle-venv", ".git", "tests"):  # GBs of context otherwise
        assert is_ignored(heavy), heavy


def run_kernels(step: str, tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k not in ("CC", native.PREBUILT_ENV)}
    return subprocess.run(
        [sys.executable, str(KERNELS), step],
        capture_output=True,
        text=True,
        timeout=300,
        env={**base, "TTS_CORE_CACHE": str(tmp_path / "cache"), **env},
    )


@pytest.mark.skipif(native.compiler() is None, reason="no C compiler to prebuild with")
@pytest.mark.skipif(not native.int8_isas_here(), reason="no native kernel for this architecture")
def test_the_kernels_prebuilt_in_one_stage_are_found_in_the_other(tmp_path) -> None:
    """As in the image: `build` with a compiler, then `check` without one (CC pointing nowhere)
    finds every kernel of the architecture in the prebuilt folder and loads it."""
    prebuilt = str(tmp_path / "prebuilt")
    built = run_kernels("build", tmp_path, **{native.PREBUILT_ENV: prebuilt})
    assert built.returncode == 0, built.stderr
    assert len(built.stdout.split()) == len(native.kernels_here())
    checked = run_kernels(
        "check", tmp_path, CC="/nonexistent/cc", **{native.PREBUILT_ENV: prebuilt}
    )
    assert checked.returncode == 0, checked.stderr
    assert [line.split(":")[0] for line in checked.stdout.split("\n") if line] == [
        name for name, _ in native.kernels_here()
    ]
    assert not (tmp_path / "cache").exists()  # nothing compiled at check time
    # the check fails the image build where the kernels are missing or a compiler came along
    empty = run_kernels(
        "check", tmp_path, CC="/nonexistent/cc", **{native.PREBUILT_ENV: str(tmp_path / "empty")}
    )
    assert empty.returncode != 0 and "no prebuilt" in empty.stderr
    with_cc = run_kernels("check", tmp_path, **{native.PREBUILT_ENV: prebuilt})
    assert with_cc.returncode != 0 and "a C compiler is in this image" in with_cc.stderr
