"""Every README snippet runs as written, only the port changed, against a real server of each
model family: the offline voice (`--model espeak`) and a tiny checkpoint of Qwen3-TTS, VoxCPM2,
Chatterbox Turbo and Chatterbox English. A snippet runs as a user on a fresh clone runs it
after `make run`: bash snippets with `bash -eo pipefail`, Python ones saved to a file and run
with `.venv/bin/python`, both from a folder that has the clone's `.venv` and `assets`; what
they save must be audio that reads right (a WAV's header agreeing with its size)."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
import wave
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from conftest import start_app, stop_app

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
FIXTURES = ROOT / "tests" / "fixtures"
SETUP = "make run     # creates .venv"  # the set-up block: not run here (make test runs this)
FIRST_AUDIO_WITHIN_LINES = 40  # issue 36: the first command that makes audio, near the top
# a hang guard, not a speed bound: a snippet on the random tiny Qwen3-TTS speaks to its length
# cap twice (25-55 s at load 10; one took over 60 s in a busy full run at load 17)
SNIPPET_HANG_S = 600.0
MODELS = {
    "espeak": "espeak",
    "qwen3": str(FIXTURES / "qwen3-tiny-a"),
    "voxcpm2": str(FIXTURES / "voxcpm2-tiny"),
    "chatterbox-turbo": str(FIXTURES / "chatterbox-turbo-tiny-a"),
    "chatterbox-english": str(FIXTURES / "chatterbox-english-tiny-a"),
}


@dataclass(frozen=True)
class Snippet:
    line: int  # of its first code line in README.md
    language: str  # bash | python
    code: str

    def __str__(self) -> str:
        return f"README.md:{self.line}"


def readme_snippets() -> list[Snippet]:
    """The README's ```bash and ```python blocks, but the set-up one."""
    text = README.read_text()
    found = []
    for match in re.finditer(r"(?ms)^```(bash|python)\n(.*?)^```", text):
        line = text.count("\n", 0, match.start(2)) + 1
        found.append(Snippet(line, match.group(1), match.group(2)))
    return [snippet for snippet in found if not snippet.code.startswith(SETUP)]


SNIPPETS = readme_snippets()


def voices_named(code: str) -> list[str]:
    """The built-in voices a snippet names (as a quoted string)."""
    builtin = json.loads((ROOT / "assets" / "voices" / "voices.json").read_text())
    return [name for name in builtin if f'"{name}"' in code]


def unfit_voices(port: int, code: str) -> dict[str, str]:
    """The built-in voices `code` names that the served model cannot take, with the server's
    reason (GET /v1/audio/voices: `fits_model`, `unfit_reason`): e.g. the tiny VoxCPM2
    checkpoint's caches hold 2.9 s of reference, less than any built-in clip (the released
    model takes them all)."""
    listed = httpx.get(f"http://127.0.0.1:{port}/v1/audio/voices", timeout=SNIPPET_HANG_S)
    voices = {voice["id"]: voice for voice in listed.json()["data"]}
    named = [name for name in voices_named(code) if name in voices]
    return {
        name: voices[name].get("unfit_reason", "does not fit")
        for name in named
        if voices[name].get("fits_model") is False
    }


@pytest.fixture(scope="module", params=list(MODELS))
def server(request, tmp_path_factory):
    """(model name, port) of `app.py --model ...` with the model loaded."""
    model = request.param
    url, process, _log = start_app(
        tmp_path_factory.mktemp(f"readme-{model}"), "--model", MODELS[model], "--no-fallback"
    )
    yield model, int(url.rsplit(":", 1)[1])
    stop_app(process)


def clone_like_folder(tmp_path: Path) -> Path:
    """A folder where the README's relative paths mean what they mean in a clone after `make
    run`: `.venv` (this interpreter's environment) and `assets`."""
    venv = Path(sys.prefix) if sys.prefix != sys.base_prefix else ROOT / ".venv"
    (tmp_path / ".venv").symlink_to(venv, target_is_directory=True)
    (tmp_path / "assets").symlink_to(ROOT / "assets", target_is_directory=True)
    return tmp_path


def run_snippet(snippet: Snippet, port: int, folder: Path) -> subprocess.CompletedProcess:
    code = snippet.code.replace("127.0.0.1:7860", f"127.0.0.1:{port}")
    if snippet.language == "bash":
        command = ["bash", "-eo", "pipefail", "-c", code]
    else:
        (folder / "snippet.py").write_text(code)
        command = [str(folder / ".venv" / "bin" / "python"), "snippet.py"]
    return subprocess.run(
        command, cwd=folder, capture_output=True, text=True, timeout=SNIPPET_HANG_S
    )


def assert_audio_files_read_right(folder: Path) -> list[str]:
    """Every WAV saved: its header's frame count agrees with the bytes there (a streamed WAV's
    placeholder size reads as 24 h 51 min) and it holds some audio (a tiny random checkpoint
    may stop after one frame); every raw PCM file: whole 16-bit samples. Returns the audio
    files' names."""
    saved = []
    for path in sorted(folder.glob("*.wav")):
        with wave.open(str(path)) as clip:
            frames = clip.getnframes()
            data_bytes = frames * clip.getsampwidth() * clip.getnchannels()
        assert data_bytes <= path.stat().st_size, f"{path.name}: its header claims more audio"
        assert frames > 0, f"{path.name}: no audio"
        saved.append(path.name)
    for path in sorted(folder.glob("*.pcm")):
        size = path.stat().st_size
        assert size > 0 and size % 2 == 0, f"{path.name}: {size} bytes"
        saved.append(path.name)
    return saved


def test_the_readme_has_its_set_up_commands_and_makes_audio_early():
    text = README.read_text()
    setup = text.split("## Set up and run", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    assert [line.split("#")[0].strip() for line in setup.splitlines()] == ["make run", "make test"]
    first = SNIPPETS[0]
    assert first.line <= FIRST_AUDIO_WITHIN_LINES and "-o hello.wav" in first.code, first
    assert text.startswith("---\ntitle: ") and "\nsdk: docker\napp_port: 7860\n" in text


def test_the_plain_http_order_the_readme_gives_is_the_endpoints():
    """The README lists /synthesize_full's values in order for plain-HTTP callers, and its
    plain-HTTP snippet sends one value for each."""
    from tts_core.ui.handlers import ApiParameters

    names = ApiParameters.for_engine().names
    assert f"order: `{', '.join(names)}`" in " ".join(README.read_text().split())
    body = next(s.code for s in SNIPPETS if "/gradio_api/call/synthesize_full" in s.code)
    data = json.loads(body.split("BODY='", 1)[1].split("'", 1)[0])["data"]
    assert len(data) == len(names)


@pytest.mark.slow
@pytest.mark.parametrize("snippet", SNIPPETS, ids=str)
def test_the_readme_snippet_runs_as_written(server, snippet, tmp_path):
    model, port = server
    if "from openai import" in snippet.code and importlib.util.find_spec("openai") is None:
        pytest.skip("the openai package is not installed (the dev extra has it)")
    if unfit := unfit_voices(port, snippet.code):
        pytest.skip(f"{model} cannot take the snippet's voice: {unfit}")
    folder = clone_like_folder(tmp_path)
    done = run_snippet(snippet, port, folder)
    assert done.returncode == 0, (
        f"{model}, {snippet}:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    )
    saved = assert_audio_files_read_right(folder)
    counted = re.search(r"^(\d+) samples$", done.stdout, re.M)  # the WebSocket example's print
    assert saved or (counted and int(counted.group(1)) > 0), f"{model}, {snippet}: no audio"
