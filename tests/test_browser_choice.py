"""Issue #24 item 8: the browser tests drove Playwright's own cached Chromium on a machine that
had one and Debian's otherwise. Every browser test now drives one browser, chosen in one place
(conftest.chromium_context): Debian's /usr/bin/chromium, or $CHROMIUM_PATH."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from conftest import CHROMIUM_PATH, DEBIAN_CHROMIUM, chromium_context

TESTS = Path(__file__).resolve().parent


@pytest.mark.browser
def test_the_browser_tests_drive_the_chosen_chromium(tmp_path):
    """The running browser says which executable it is (chrome://version): the chosen one's
    build, never a download of Playwright's (~/.cache/ms-playwright)."""
    with chromium_context(tmp_path / "profile") as context:
        page = context.new_page()
        page.goto("chrome://version")
        executable = page.text_content("#executable_path").strip()
        version = " ".join(page.text_content("#version").split())
    installed = subprocess.run(
        [CHROMIUM_PATH, "--version"], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    number = re.search(r"\d+(?:\.\d+){3}", installed).group(0)
    assert "ms-playwright" not in executable, executable
    assert version.startswith(number), (version, installed)
    if CHROMIUM_PATH == DEBIAN_CHROMIUM:  # the wrapper script runs Debian's build
        assert executable == "/usr/lib/chromium/chromium" and "built on Debian" in version


def test_every_browser_test_starts_its_browser_through_conftest():
    """No test module launches a browser of its own (it could pick another build)."""
    launching = re.compile(
        r"(chromium|firefox|webkit)\.(launch|connect)|launch_persistent_context|"
        r"connect_over_cdp|(sync|async)_playwright\(\)"
    )
    offenders = [
        path.name
        for path in sorted(TESTS.glob("test_*.py"))
        if path.name != Path(__file__).name  # (its pattern names them)
        and launching.search(path.read_text(encoding="utf-8"))
    ]
    assert offenders == []
    assert launching.search((TESTS / "conftest.py").read_text(encoding="utf-8"))
