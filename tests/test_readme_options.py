"""The command line has one source (app.build_parser): `--help` says every option's default and
environment variable, the README's options table is the one app.options_table() makes from it,
and an environment variable sets an option's default (the option wins)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import app

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
REGENERATE = '.venv/bin/python -c "import app; print(app.options_table())"'


def options() -> list:
    return [action for action in app.build_parser()._actions if hasattr(action, "env")]


def test_the_readme_table_is_the_one_the_parser_makes():
    assert app.options_table() in README.read_text(), f"regenerate it with {REGENERATE}"


def test_help_says_every_options_default_and_environment_variable():
    text = subprocess.run(
        [sys.executable, str(ROOT / "app.py"), "--help"],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    ).stdout
    flat = " ".join(text.split())  # argparse wraps lines anywhere
    for action in options():
        flag = action.option_strings[0]
        assert flag in flat
        assert f"(default: {action.shown_default}; env {action.env})" in flat, flag


def test_the_table_names_the_scaling_options_and_every_model_family():
    table = app.options_table()
    for flag in ("--replicas", "--ray-address", "--min-replicas", "--max-replicas"):
        assert f"| `{flag}` |" in table
    for model in (
        "http(s)://HOST:PORT/v1",
        "ResembleAI/chatterbox-turbo",
        "ResembleAI/chatterbox)",
        "openbmb/VoxCPM2",
        "Qwen/Qwen3-TTS-12Hz-0.6B-Base",
        "'espeak'",
    ):
        assert model in table, model


def test_an_environment_variable_sets_a_default_and_the_option_wins(monkeypatch):
    monkeypatch.setenv("TTS_MAX_BATCH", "4")
    monkeypatch.setenv("TTS_WAIT_FOR_MODEL", "1")
    monkeypatch.setenv("GRADIO_SERVER_PORT", "8123")
    args = app.parse_args([])
    assert (args.max_batch, args.wait_for_model, args.port) == (4, True, 8123)
    assert app.parse_args(["--max-batch", "2"]).max_batch == 2


def test_an_environment_value_outside_the_choices_is_refused(monkeypatch, capsys):
    """argparse checks the choices of a value given on the command line only."""
    monkeypatch.setenv("TTS_DEVICE", "gpu")
    with pytest.raises(SystemExit):
        app.parse_args([])
    assert "TTS_DEVICE='gpu'" in capsys.readouterr().err
