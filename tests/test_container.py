"""The container's entrypoint and Dockerfile: persistent storage under /data when it exists,
the app exec'd as PID 1 (its own SIGTERM handling: tests/test_http_server.py), one Dockerfile
for the CPU and the GPU image. (Building the images needs podman or docker and a registry:
not in the suite; the resolve note of the Space issue says what was built where.)"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENTRYPOINT = ROOT / "docker" / "entrypoint.sh"
DOCKERFILE = ROOT / "Dockerfile"
NAMES = ("TTS_VOICES_DIR", "TTS_CORE_CACHE", "HF_HOME")


def run_entrypoint(tmp_path: Path, data: Path, **env: str) -> tuple[dict[str, str], str]:
    """The environment the entrypoint hands to its command (`env`), and what it logged."""
    base = {k: v for k, v in os.environ.items() if k not in NAMES}
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    done = subprocess.run(
        [str(ENTRYPOINT), "env"], capture_output=True, text=True, timeout=60,
        env={**base, "HOME": str(home), "TTS_DATA_DIR": str(data), **env},
    )  # fmt: skip
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


def test_the_app_is_execed_as_the_container_command() -> None:
    """`exec "$@"`: the app replaces the shell, so SIGTERM reaches it (no shell in between)."""
    text = ENTRYPOINT.read_text()
    assert text.rstrip().endswith('exec "$@"')
    assert os.access(ENTRYPOINT, os.X_OK)
    dockerfile = DOCKERFILE.read_text()
    assert 'ENTRYPOINT ["./docker/entrypoint.sh"]' in dockerfile
    assert 'CMD ["python", "app.py"]' in dockerfile


def test_one_dockerfile_builds_the_cpu_and_the_gpu_image() -> None:
    dockerfile = DOCKERFILE.read_text()
    assert "ARG TORCH=cpu" in dockerfile  # the default image has no CUDA libraries
    assert 'pip install --no-cache-dir --user torch==2.13.0 --index-url "$TORCH_CPU_INDEX"' in (
        dockerfile
    )
    assert "cuda) pip install --no-cache-dir --user torch==2.13.0 ;;" in dockerfile
