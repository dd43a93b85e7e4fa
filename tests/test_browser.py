"""A real browser: headless Debian chromium loads the page (`python app.py`), uploads a clip,
clicks Generate, and the live audio must actually play while the stats panel updates.

How playback is asserted: Debian's chromium decodes AAC (it uses the system FFmpeg; the test
checks `MediaSource.isTypeSupported` first and fails with that reason otherwise), so the test
waits for the live <audio> element's own `playing` event and for its `currentTime` to advance,
and it also records the HLS responses (playlist.m3u8 and .aac segments) the page fetched. The
time from the click to `playing` is the time to first audio as a listener hears it.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ASSETS = Path(__file__).resolve().parents[1] / "assets"
FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip
RECORDER = """
window.__media = [];
for (const type of ['play', 'playing', 'timeupdate', 'error']) {
  document.addEventListener(type, (e) => {
    const owner = e.target.closest && e.target.closest('[id]');
    if (e.target.tagName === 'AUDIO' && owner)
      window.__media.push([type, performance.now(), e.target.currentTime, owner.id]);
  }, true);
}
window.__stats = [];
new MutationObserver(() => {
  const node = document.querySelector('#live-stats .tts-stats');
  if (node && window.__stats[window.__stats.length - 1] !== node.innerText)
    window.__stats.push(node.innerText);
}).observe(document, {subtree: true, childList: true, characterData: true});
document.addEventListener('click', (e) => {
  if (e.target.closest && e.target.closest('#generate')) window.__media.push(['click', performance.now(), 0, '']);
}, true);
"""

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def browser_context(tmp_path_factory):
    if CHROMIUM is None:
        if os.environ.get("REQUIRE_BROWSER"):
            pytest.fail("chromium is not installed (REQUIRE_BROWSER is set)")
        pytest.skip("chromium is not installed")
    from playwright.sync_api import sync_playwright

    profile = tmp_path_factory.mktemp("chromium-profile")  # fresh --user-data-dir
    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(profile), executable_path=CHROMIUM, headless=True, args=FLAGS,
            viewport={"width": 1280, "height": 1000},
        )  # fmt: skip
        yield context
        context.close()


def open_with_standard_player(page, url: str) -> None:
    """These tests exercise Gradio's own streaming gr.Audio (HLS); the page's default is the
    low-latency Web Audio player (tested in test_lowlatency_browser.py)."""
    page.goto(url)
    page.wait_for_selector("#generate")
    page.get_by_label("Standard (gr.Audio, HLS)").check()


def stat(page, name: str) -> str:
    """A value of the live stats panel (data-s=name)."""
    return page.text_content(f"#live-stats [data-s='{name}']")


def wait_for_state(page, state: str) -> None:
    page.wait_for_function(
        f"() => document.querySelector(\"#live-stats [data-s='state']\")?.textContent === '{state}'",
        timeout=30_000,
    )


def live_audio_events(page) -> list[list]:
    return [e for e in page.evaluate("window.__media") if e[3] == "live-audio" or e[0] == "click"]


def test_page_streams_audio_that_plays_and_stats_update(app_server, browser_context, tmp_path):
    url, _ = app_server
    page = browser_context.new_page()
    page.add_init_script(RECORDER)
    streamed = []
    page.on(
        "response", lambda r: streamed.append(r.url) if "/gradio_api/stream/" in r.url else None
    )
    open_with_standard_player(page, url)
    assert page.evaluate("MediaSource.isTypeSupported('audio/mp4; codecs=\"mp4a.40.2\"')"), (
        "this chromium cannot decode AAC, so HLS playback cannot be observed"
    )
    page.locator("#reference input[type=file]").set_input_files(
        str(ASSETS / "reference_male_en.wav")
    )
    page.wait_for_selector("#reference audio", state="attached", timeout=20_000)
    page.fill(
        "#text textarea",
        "The browser test is speaking now. It should play while it streams. "
        "The stats next to the player change with every chunk.",
    )
    page.click("#generate")
    wait_for_state(page, "Done")
    page.wait_for_function(
        "() => { const a = document.querySelector('#live-audio audio');"
        " return a && a.currentTime > 1.0; }",
        timeout=30_000,
    )
    page.screenshot(path=str(tmp_path / "page.png"), full_page=True)
    if os.environ.get("SCREENSHOT_PATH"):
        shutil.copy(tmp_path / "page.png", os.environ["SCREENSHOT_PATH"])

    events = live_audio_events(page)
    kinds = [e[0] for e in events]
    assert "playing" in kinds and "error" not in kinds, kinds
    click = next(e[1] for e in events if e[0] == "click")
    playing = next(e[1] for e in events if e[0] == "playing")
    audible_s = (playing - click) / 1000
    print(f"time to first audio: engine {stat(page, 'engine')} (request -> first chunk), "
          f"browser {audible_s:.3f} s (click -> <audio> 'playing'), "
          f"panel {stat(page, 'heard')}")  # fmt: skip
    assert 0 < audible_s < 10
    heard_ms = int(re.fullmatch(r"(\d+) ms", stat(page, "heard")).group(1))
    assert abs(heard_ms - audible_s * 1000) < 100  # the panel's heard = click -> 'playing'
    assert re.fullmatch(r"\d+ ms", stat(page, "engine"))
    assert any(u.endswith("playlist.m3u8") for u in streamed)
    assert any(u.endswith(".aac") for u in streamed)

    seen = page.evaluate("window.__stats")  # every text the stats panel showed, in order
    generating = [s for s in seen if "Generating" in s and "chunks" in s]
    assert len(set(generating)) >= 2, seen  # updated on chunks while the stream was running
    full = page.locator(
        "#full-audio audio, #full-audio [data-testid='waveform-Full clip (download)']"
    )
    assert full.count() >= 1


def test_bad_input_shows_a_clear_error_in_the_page(app_server, browser_context):
    url, _ = app_server
    page = browser_context.new_page()
    open_with_standard_player(page, url)
    page.fill("#text textarea", "   ")
    page.click("#generate")
    toast = page.get_by_text("Please enter some text to speak.")
    toast.first.wait_for(timeout=20_000)
    assert "Traceback" not in page.content()
    # the page still works afterwards
    page.fill("#text textarea", "Working again.")
    page.click("#generate")
    wait_for_state(page, "Done")


def set_chunk_frames(page, first: int, steady: int) -> None:
    page.locator("#advanced").get_by_text("Advanced").first.click()
    for elem_id, value in (("first-chunk", first), ("chunk-size", steady)):
        box = page.locator(f"#{elem_id} input[type=number]")
        box.fill(str(value))
        box.press("Enter")


def test_stop_ends_the_stream(app_server, browser_context):
    url, _ = app_server
    page = browser_context.new_page()
    open_with_standard_player(page, url)
    page.fill("#text textarea", " ".join(["This is a long text that will be stopped."] * 23))
    set_chunk_frames(page, first=1, steady=1)  # ~700 chunks of 80 ms: a stream of many seconds
    page.click("#generate")
    page.wait_for_function(
        "() => /\\d+ chunks/.test(document.querySelector(\"#live-stats [data-s='chunks']\").textContent)",
        timeout=30_000,
    )
    page.click("#stop")
    page.wait_for_timeout(2000)
    at_stop = stat(page, "chunks")
    page.wait_for_timeout(2000)
    assert stat(page, "chunks") == at_stop  # no more chunks arrive
    assert stat(page, "state") == "Stopped"
    chunks = int(re.fullmatch(r"(\d+) chunks", at_stop).group(1))
    assert chunks < 500  # stopped well before the ~700 chunks of the whole text


def test_real_page_defaults_to_the_low_latency_player(app_server, browser_context):
    """app.py installs the PCM route and the page's Generate plays through Web Audio."""
    url, _ = app_server
    page = browser_context.new_page()
    page.goto(url)
    page.wait_for_function("() => window.__ttsLowLatency !== undefined", timeout=30_000)
    page.fill("#text textarea", "The default player of the real page speaks now.")
    page.click("#generate")
    page.wait_for_function(
        "() => { const m = window.__ttsLowLatency.last; return m && (m.done || m.error); }",
        timeout=30_000,
    )
    run = page.evaluate("() => window.__ttsLowLatency.last")
    assert run["error"] is None, run["error"]
    assert run["samples"] > 24_000 and run["firstSoundMs"] > 0
    print(f"real page, low-latency player: click -> first sound {run['firstSoundMs']:.0f} ms, "
          f"engine {run['engineTtfaMs']:.0f} ms")  # fmt: skip
    page.wait_for_selector("#lowlatency-player [data-ll='download']:not([hidden])")
    wait_for_state(page, "Done")  # the same stats panel, filled by the low-latency player
    assert re.fullmatch(r"\d+ ms", stat(page, "heard")) and stat(page, "underruns") == "0"
