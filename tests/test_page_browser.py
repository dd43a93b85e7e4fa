"""Headless Chromium on the real page (`build_demo(slot, voices).launch(...)`): the voice
library shared with /v1/audio/voices, the live stats panel filled by both players, and a page
that follows the model while it loads.

The browser is conftest's (`chromium_context`: Debian's chromium). Skips when it or Playwright
is missing, unless REQUIRE_BROWSER=1 (CI), where it fails.
"""

from __future__ import annotations

import re
import threading
from pathlib import Path

import httpx
import numpy as np
import pytest
from conftest import BROWSER_HANG_MS, chromium_context, wait_for_toast
from test_openai_api import RecordingEngine, free_port

from tts_core.audio.ffmpeg import ensure_ffmpeg_on_path
from tts_core.engine import Engine, EngineConfig, EngineSlot
from tts_core.engine.backend import Notice
from tts_core.server import VoiceRegistry
from tts_core.ui import build_demo

pytestmark = pytest.mark.browser

FIXTURES = Path(__file__).resolve().parent / "fixtures"
QWEN3_TINY = FIXTURES / "qwen3-tiny-a"
FEMALE_CLIP = Path(__file__).resolve().parents[1] / "assets" / "reference_female_en.wav"
FEMALE_TRANSCRIPT = "This is a short sample of a calm, clear voice."
TEXT = "The page speaks with the voice you picked, and the stats panel fills as it goes."
UPLOAD_LABEL = "Upload or record a clip"


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    """A Chromium context (one browser: its pages share localStorage, so the owner key)."""
    with chromium_context(tmp_path_factory.mktemp("chromium-profile")) as context:
        yield context


def serve_page(slot: EngineSlot, voices: VoiceRegistry):  # noqa: ANN201 - (demo, url)
    ensure_ffmpeg_on_path()  # the standard gr.Audio player encodes AAC with ffmpeg
    demo = build_demo(slot, voices).queue()
    _, url, _ = demo.launch(
        prevent_thread_lock=True, server_name="127.0.0.1", server_port=free_port(), quiet=True
    )
    return demo, url.rstrip("/")


@pytest.fixture(scope="module")
def site(espeak_backend, tmp_path_factory):
    """(url, engine, voices): the page on an eSpeak engine that records its runs."""
    engine = RecordingEngine(espeak_backend, EngineConfig(max_concurrent=2))
    voices = VoiceRegistry(tmp_path_factory.mktemp("voices"))
    demo, url = serve_page(EngineSlot.holding(engine), voices)
    try:
        yield url, engine, voices
    finally:
        demo.close()


def open_page(browser, url: str):  # noqa: ANN001, ANN201 - a playwright Page
    page = browser.new_page()
    page.goto(url)
    page.wait_for_function(
        "() => window.__ttsLowLatency && window.__ttsStats", timeout=BROWSER_HANG_MS
    )
    page.fill("#text textarea", TEXT)
    # these tests start from the upload entry (the page starts on a recording: issue 36)
    pick_voice(page, UPLOAD_LABEL)
    return page


def stat(page, name: str) -> str:  # noqa: ANN001
    return page.text_content(f"#live-stats [data-s='{name}']")


def generate(page, engine: RecordingEngine) -> dict:  # noqa: ANN001
    """Click Generate; wait until the stats panel says Done; the engine's final stats."""
    runs = len(engine.runs)
    # clear the last run's "Done", so the wait below is for this click's run
    page.evaluate(
        "() => { document.querySelector(\"#live-stats [data-s='state']\").textContent = ''; }"
    )
    page.click("#generate")
    page.wait_for_function(
        "() => document.querySelector(\"#live-stats [data-s='state']\").textContent === 'Done'"
        " && window.__ttsStats.last.heardMs !== null",
        timeout=BROWSER_HANG_MS,
    )
    assert len(engine.runs) == runs + 1
    return engine.runs[-1]["stats"]


def pick_voice(page, label: str) -> None:  # noqa: ANN001
    page.click("#voice input")
    page.get_by_role("option", name=label, exact=True).click()
    page.wait_for_function(f"() => document.querySelector('#voice input').value === {label!r}")


def api_voices(url: str) -> dict[str, dict]:
    listed = httpx.get(f"{url}/v1/audio/voices", timeout=10).json()["data"]
    return {voice["id"]: voice for voice in listed}


def note(page, text: str) -> None:  # noqa: ANN001
    """Wait until the line under the voice picker says `text` (what a save or delete did)."""
    page.locator("#voice-note").get_by_text(text).wait_for(timeout=BROWSER_HANG_MS)


def on_top(page, selector: str) -> bool:  # noqa: ANN001
    """Whether the middle of `selector` is the element itself, not something over it."""
    return page.evaluate(
        """(selector) => {
        const node = document.querySelector(selector);
        const b = node.getBoundingClientRect();
        const hit = document.elementFromPoint(b.x + b.width / 2, b.y + b.height / 2);
        return !!hit && (hit === node || node.contains(hit));
    }""",
        selector,
    )


PLAYER_STATUS = "#lowlatency-player [data-ll='status']"


def test_voice_library_saves_uses_and_deletes_a_voice(browser, site):
    url, engine, _ = site
    page = open_page(browser, url)
    bodies = []
    page.on(
        "request", lambda r: bodies.append(r.post_data_json) if "/tts_stream/pcm" in r.url else None
    )
    page.set_input_files("#reference input[type=file]", str(FEMALE_CLIP))
    page.wait_for_selector("#reference audio", state="attached", timeout=BROWSER_HANG_MS)
    page.fill("#reference-text textarea, #reference-text input", FEMALE_TRANSCRIPT)
    page.fill("#voice-name input, #voice-name textarea", "my-voice")
    page.click("#save-voice")
    page.wait_for_function(
        "() => document.querySelector('#voice input').value === 'my-voice (saved by you)'",
        timeout=BROWSER_HANG_MS,
    )
    page.wait_for_selector("#reference", state="hidden")  # a named voice needs no clip
    # Issue #24: "Saved the voice" was a toast that lingered over the player's status: it is
    # said under the picker, and nothing covers the status
    note(page, "Saved the voice 'my-voice': it is selected now, and the API knows it too.")
    assert page.locator("[data-testid='toast-body']").count() == 0
    assert on_top(page, PLAYER_STATUS)
    listed = api_voices(url)
    assert listed["my-voice"]["kind"] == "custom"
    assert listed["my-voice"]["transcript"] == FEMALE_TRANSCRIPT

    low_latency = generate(page, engine)  # the low-latency player sends the voice's name
    assert bodies[-1]["voice"] == "my-voice"
    assert low_latency["voice"]["variant"].startswith("+f")  # the saved female clip
    page.get_by_label("Standard (gr.Audio, HLS)").check()
    standard = generate(page, engine)  # so does the standard player's handler
    assert standard["voice"] == low_latency["voice"]

    page = open_page(browser, url)  # a later visit of this browser: still its voice
    pick_voice(page, "my-voice (saved by you)")
    page.click("#delete-voice")
    page.wait_for_function(
        f"() => document.querySelector('#voice input').value === {UPLOAD_LABEL!r}",
        timeout=BROWSER_HANG_MS,
    )
    assert "my-voice" not in api_voices(url)
    page.wait_for_selector("#reference", state="visible")
    note(page, "Deleted the voice 'my-voice'.")
    assert page.locator("[data-testid='toast-body']").count() == 0
    pick_voice(page, "alloy (built-in)")  # picking a voice clears the note
    page.wait_for_selector("#voice-note", state="hidden")


def test_a_voice_registered_through_the_api_cannot_be_deleted_from_the_page(browser, site):
    url, engine, voices = site
    with open(FEMALE_CLIP, "rb") as clip:
        answer = httpx.post(
            f"{url}/v1/audio/voices",
            data={"name": "api-voice"},
            files={"file": ("clip.wav", clip, "audio/wav")},
            timeout=30,
        )
    assert answer.status_code == 201, answer.text
    page = open_page(browser, url)  # loaded after the registration: it lists the voice
    pick_voice(page, "api-voice")  # not "(saved by you)"
    page.get_by_text("you can use it, not delete it").wait_for(timeout=BROWSER_HANG_MS)
    assert not page.is_visible("#delete-voice")  # the server refuses it too (test_page_handlers)
    assert generate(page, engine)["voice"]["variant"].startswith("+f")
    assert "api-voice" in api_voices(url) and "api-voice" in voices.names()


def test_save_errors_are_shown_and_the_page_keeps_working(browser, site):
    url, engine, _ = site
    page = open_page(browser, url)
    page.fill("#voice-name input, #voice-name textarea", "no-clip")
    page.click("#save-voice")
    note(page, "Not saved: Upload or record a clip first")
    page.set_input_files("#reference input[type=file]", str(FEMALE_CLIP))
    page.wait_for_selector("#reference audio", state="attached", timeout=BROWSER_HANG_MS)
    page.fill("#voice-name input, #voice-name textarea", "alloy")
    page.click("#save-voice")
    note(page, "Not saved: 'alloy' is a built-in voice")
    page.fill("#voice-name input, #voice-name textarea", "bad name!")
    page.click("#save-voice")
    note(page, "Not saved: Voice names are 1-64 characters")
    assert page.locator("[data-testid='toast-body']").count() == 0
    assert page.input_value("#voice input") == UPLOAD_LABEL
    assert generate(page, engine)["done"]


def assert_panel_filled(page, stats: dict, mode: str) -> None:  # noqa: ANN001
    """Every tile holds a number, and the plot and the chunk bars are drawn."""
    assert stat(page, "mode") == mode
    assert re.fullmatch(r"\d+ ms", stat(page, "heard")), stat(page, "heard")
    assert re.fullmatch(r"\d+ ms", stat(page, "engine"))
    assert re.fullmatch(r"\d+\.\d{2,3}×", stat(page, "rtf"))
    assert stat(page, "audio") == f"{stats['audio_s']:.2f} s"
    assert stat(page, "chunks") == f"{stats['chunks']} chunks"
    assert re.fullmatch(r"\d+ ms for \d+ ms", stat(page, "chunk"))
    assert re.fullmatch(r"\d+ ms", stat(page, "queue"))
    assert stat(page, "batch") == "not batched"  # eSpeak decodes one stream at a time
    assert "espeak" in stat(page, "model") and "cpu" in stat(page, "model")
    generated = page.get_attribute("#live-stats path.generated", "d")
    assert generated.count("L") == stats["chunks"]  # the origin, then one point per chunk
    assert page.get_attribute("#live-stats path.playback", "d").count("L") >= 1
    assert page.locator("#live-stats [data-s='bars'] rect").count() == min(stats["chunks"], 60)


def test_the_stats_panel_is_filled_by_both_players(browser, site):
    url, engine, _ = site
    page = open_page(browser, url)
    stats = generate(page, engine)
    assert_panel_filled(page, stats, "Low-latency player")
    assert stat(page, "underruns") == "0"
    heard_ll = page.evaluate("() => window.__ttsLowLatency.last.firstSoundMs")
    assert stat(page, "heard") == f"{round(heard_ll)} ms"

    page.get_by_label("Standard (gr.Audio, HLS)").check()
    assert not page.is_visible("#lowlatency-player") and page.is_visible("#live-stats")
    stats = generate(page, engine)
    assert_panel_filled(page, stats, "Standard player")
    assert stat(page, "underruns") == "–"  # counted by the low-latency player only
    page.wait_for_selector(
        "#full-audio audio, #full-audio [data-testid^='waveform']", state="attached"
    )


@pytest.mark.parametrize(("width", "height"), [(1280, 800), (390, 844)])
def test_text_and_generate_are_in_view_without_scrolling(browser, site, width, height):
    """Issue #24: Generate was below the fold on a 1000 px desktop screen (upload, transcript,
    the save row and Advanced came first) and halfway down a phone's page."""
    url, _, _ = site
    page = browser.new_page()
    page.set_viewport_size({"width": width, "height": height})
    page.goto(url)
    page.wait_for_function(
        "() => window.__ttsLowLatency && window.__ttsStats", timeout=BROWSER_HANG_MS
    )
    # the model line is filled in (its description is the tallest part above the text)
    page.locator("#model-status").get_by_text("Voice model").wait_for(timeout=BROWSER_HANG_MS)
    assert page.evaluate("() => window.scrollY") == 0
    for selector in ("#text textarea", "#generate", "#stop"):
        box = page.locator(selector).bounding_box()
        assert box is not None, selector
        inside = (
            0 <= box["x"]
            and box["x"] + box["width"] <= width
            and 0 <= box["y"]
            and box["y"] + box["height"] <= height
        )
        assert inside, (selector, box, (width, height))
    # in view and on top: the point at its centre is the button itself, once the page settles
    # (under load a start-up overlay, e.g. a pending event's, may still cover it for a moment);
    # if it never is, the failure names what covers it
    on_top = """() => {
        const b = document.querySelector('#generate').getBoundingClientRect();
        const el = document.elementFromPoint(b.x + b.width / 2, b.y + b.height / 2);
        return !!el && !!el.closest('#generate');
    }"""
    from playwright.sync_api import TimeoutError as PageTimeout

    try:
        page.wait_for_function(on_top, timeout=BROWSER_HANG_MS)
    except PageTimeout:
        cover = page.evaluate("""() => {
            const b = document.querySelector('#generate').getBoundingClientRect();
            const el = document.elementFromPoint(b.x + b.width / 2, b.y + b.height / 2);
            return el ? el.outerHTML.slice(0, 300) : null;
        }""")
        pytest.fail(f"#generate is covered at its centre by {cover}")
    page.close()


def test_the_page_follows_the_model_while_it_loads(browser, espeak_backend, tmp_path):
    if not (QWEN3_TINY / "config.json").is_file():
        pytest.skip("tests/fixtures/qwen3-tiny-a is not there")
    from tts_core.backends.qwen3 import Qwen3Backend

    slot = EngineSlot(str(QWEN3_TINY))
    slot.report("downloading", done=0.6e9, total=2.4e9)
    demo, url = serve_page(slot, VoiceRegistry(tmp_path / "voices"))
    try:
        page = open_page(browser, url)
        status = "#model-status"
        assert "The model is loading: downloading 0.60 of 2.40 GB (25 %)" in page.text_content(
            status
        )
        page.click("#generate")  # low-latency player: the route answers 503 with the message
        page.wait_for_function(
            "() => document.querySelector(\"#live-stats [data-s='state']\").textContent"
            ".includes('still loading')",
            timeout=BROWSER_HANG_MS,
        )
        slot.report("loading")  # the page polls while the model loads
        page.wait_for_function(
            f"() => document.querySelector('{status}').textContent"
            ".includes('The model is loading: loading the model into memory (step 2 of 3)')",
            timeout=BROWSER_HANG_MS,
        )
        assert page.locator(f"{status} progress").count() == 0  # no full bar for minutes
        # and no Gradio progress timer shown over the line while it polls (issue 36: it
        # flickered in front of the bar): Gradio adds its timer text on every poll, inside a
        # wrap it keeps hidden ("hide", opacity 0) for a hidden-progress event; a shown one
        # (no "hide") is recorded
        page.evaluate(
            """(selector) => {
            window.__overlays = [];
            new MutationObserver((records) => { for (const r of records) for (const n of
                r.addedNodes) { if (n.nodeType !== 1) continue;
                  const wrap = n.closest('.wrap');
                  if (/progress-text|eta-bar/.test(n.className || '') && wrap
                      && !wrap.classList.contains('hide')) window.__overlays.push(n.className); } })
              .observe(document.querySelector(selector), {subtree: true, childList: true});
        }""",
            status,
        )
        ticks = []
        page.on("request", lambda r: ticks.append(r.url) if "/run/predict" in r.url else None)
        while len(ticks) < 3:  # three polls
            page.wait_for_event("request", timeout=BROWSER_HANG_MS)
        assert page.evaluate("() => window.__overlays") == []
        page.locator("#advanced").get_by_text("Advanced").first.click()
        assert not page.get_by_text(
            "Temperature", exact=True
        ).is_visible()  # which knobs: not known yet

        slot.set(Engine(Qwen3Backend.load(str(QWEN3_TINY), "cpu")))
        page.wait_for_function(
            f"() => document.querySelector('{status}').textContent.includes('Voice model: qwen3')",
            timeout=BROWSER_HANG_MS,
        )
        page.get_by_text("Temperature", exact=True).wait_for(
            timeout=BROWSER_HANG_MS
        )  # Qwen3: sampling
        polls = []
        page.on("request", lambda r: polls.append(r.url) if "/run/predict" in r.url else None)
        page.wait_for_timeout(2_500)
        assert polls == []  # the timer stopped once the model was ready
        assert not page.get_by_text(
            "Diffusion steps", exact=True
        ).is_visible()  # VoxCPM2's stay hidden
        assert "(required)" in page.text_content("#reference")
        page.set_input_files("#reference input[type=file]", str(FEMALE_CLIP))
        page.wait_for_selector("#reference audio", state="attached", timeout=BROWSER_HANG_MS)
        # forget the run of the click during loading: wait for this click's own run
        page.evaluate("() => { window.__ttsLowLatency.last = null; }")
        page.click("#generate")
        page.wait_for_function(
            "() => { const m = window.__ttsLowLatency.last; return m && (m.done || m.error); }",
            timeout=BROWSER_HANG_MS,
        )
        run = page.evaluate("() => window.__ttsLowLatency.last")
        assert run["error"] is None and run["samples"] > 0, {
            k: run[k] for k in ("stats", "chunks", "stopped", "done")
        }

        fallback = Notice(
            "The model could not be loaded, so you hear the offline eSpeak voice instead.",
            "RuntimeError: weights missing",
        )
        slot.set(Engine(espeak_backend, notice=fallback))
        page.reload()
        notice = page.locator("#fallback-notice")
        notice.get_by_text("you hear the offline eSpeak voice").wait_for(timeout=BROWSER_HANG_MS)
        assert not notice.get_by_text("RuntimeError: weights missing").is_visible()  # folded
        notice.get_by_text("Details", exact=True).click()
        assert notice.get_by_text("RuntimeError: weights missing").is_visible()
        assert not page.get_by_text("Temperature", exact=True).is_visible()
    finally:
        demo.close()


def played_at(timeline: list[list[float]], t: float) -> float:
    """The reference model of the plot's playback line: a player that starts at the first
    chunk, plays at real time and waits whenever it has played all it received. At wall time
    t it has played min(audio received by t, min over the chunks i received by t of (audio
    before chunk i + t - chunk i's arrival)): each term is "played straight on since chunk i
    came", which it cannot be past, and the first, t - first arrival, is real time."""
    before = [0.0] + [audio for _, audio in timeline[:-1]]  # audio received before chunk i
    arrived = [(at, b) for (at, _), b in zip(timeline, before, strict=True) if at <= t]
    if not arrived:
        return 0.0
    received = max(audio for at, audio in timeline if at <= t)
    return min(received, *(before + t - at for at, before in arrived))


def generated_at(timeline: list[list[float]], t: float) -> float:
    return max([0.0] + [audio for at, audio in timeline if at <= t])


def test_the_playback_line_waits_for_audio_it_has_not_received(browser, site):
    """Issue #24: with generation slower than real time the dashed "playback" line climbed to
    91.9 s for 3.2 s of audio. A player that starts at the first chunk plays at real time and
    waits when it reaches the end of what has arrived: never ahead of "generated"."""
    url, _, _ = site
    page = open_page(browser, url)
    slow = [[0.5, 0.16], [1.5, 0.64], [3.0, 1.12]]  # (wall s, audio s so far): 2-3x slower
    curve = page.evaluate("(t) => window.__ttsStats.playbackCurve(t)", slow)
    expected = [[0.5, 0], [0.66, 0.16], [1.5, 0.16], [1.98, 0.64], [3.0, 0.64], [3.48, 1.12]]
    assert len(curve) == len(expected)
    for (t, played), (t_want, played_want) in zip(curve, expected, strict=True):
        assert abs(t - t_want) < 1e-9 and abs(played - played_want) < 1e-9
    fast = [[0.2, 0.16], [0.3, 0.64], [0.4, 1.12]]  # faster than real time: no wait
    curve = page.evaluate("(t) => window.__ttsStats.playbackCurve(t)", fast)
    assert abs(curve[-1][0] - 1.32) < 1e-9 and curve[-1][1] == 1.12
    assert all(abs((t - 0.2) - played) < 1e-9 for t, played in curve)  # one straight line


def test_the_playback_line_is_the_waiting_players_position_at_every_moment(browser, site):
    """playbackCurve against the reference model (played_at) on random timelines, fast, slow
    and mixed: equal at every breakpoint and between them, never above "generated", rising at
    real time or flat (a wait), ending when all the audio has played."""
    import random

    url, _, _ = site
    page = open_page(browser, url)
    rng = random.Random(24)
    timelines = []
    for speed in (0.3, 0.9, 1.0, 1.1, 4.0, None):  # audio s per wall s; None: bursts and stalls
        t, audio, timeline = rng.uniform(0.05, 2.0), 0.0, []
        for _ in range(rng.randint(1, 25)):
            chunk = rng.choice([0.08, 0.16, 0.48, 1.2])
            audio += chunk
            timeline.append([t, audio])
            rate = speed or rng.choice([0.2, 5.0])
            t += chunk / rate * rng.uniform(0.8, 1.2)
        timelines.append(timeline)
    curves = page.evaluate("(ts) => ts.map((t) => window.__ttsStats.playbackCurve(t))", timelines)
    for timeline, curve in zip(timelines, curves, strict=True):
        xs, ys = [x for x, _ in curve], [y for _, y in curve]
        assert xs == sorted(xs) and curve[0] == [timeline[0][0], 0]
        assert abs(ys[-1] - timeline[-1][1]) < 1e-9  # it ends having played everything
        for (x0, y0), (x1, y1) in zip(curve, curve[1:], strict=False):
            assert abs(y1 - y0) < 1e-9 or abs((y1 - y0) - (x1 - x0)) < 1e-9  # wait or play
        end = xs[-1] + 1.0
        probes = xs + [rng.uniform(xs[0], end) for _ in range(200)] + [at for at, _ in timeline]
        for t in probes:
            shown = float(np.interp(t, xs, ys))
            assert abs(shown - played_at(timeline, t)) < 1e-9, (timeline, t)
            assert shown <= generated_at(timeline, t) + 1e-9  # never ahead of "generated"


def test_the_plot_of_a_slow_run_tops_out_at_the_audio_made(browser, site):
    """The issue's run: 3.2 s of audio over 91.9 s of wall time. The plot's audio axis ends
    at 3.2 s (it ran to 91.9 s before), and the dashed line ends level with "generated"."""
    url, _, _ = site
    page = open_page(browser, url)
    timeline = [[1.0, 0.16], [30.0, 1.2], [60.0, 2.2], [91.9, 3.2]]
    page.evaluate(
        "(timeline) => window.__ttsStats.update({chunks: 4, timeline, audio_s: 3.2})", timeline
    )
    plot = page.locator("#live-stats [data-s='plot'] svg")
    labels = plot.locator("text[text-anchor='end']").all_text_contents()  # the audio axis
    assert max(float(label) for label in labels) == 3.2

    def heights(path: str) -> list[float]:  # SVG y of each point: smaller is higher
        d = plot.locator(f"path.{path}").get_attribute("d")
        return [float(y) for y in re.findall(r"[ML][\d.]+,([\d.]+)", d)]

    assert min(heights("playback")) == min(heights("generated"))


def test_a_new_error_leaves_no_clip_of_the_last_run_beside_it(browser, site):
    """Issue #24: a stale replay control stayed next to a new error. Both players drop the
    last run's clip when a new one starts, and the stats panel says what went wrong."""
    url, engine, _ = site
    page = open_page(browser, url)
    replay, download = (f"#lowlatency-player [data-ll='{n}']" for n in ("replay", "download"))
    generate(page, engine)
    page.wait_for_selector(f"{replay}:not([hidden])")
    page.fill("#text textarea", "   ")
    page.click("#generate")
    page.wait_for_function(
        f"() => document.querySelector(\"{PLAYER_STATUS}\").textContent.startsWith('Error: ')",
        timeout=BROWSER_HANG_MS,
    )
    assert page.is_hidden(replay) and page.is_hidden(download)
    assert stat(page, "state").startswith("Error: ") and "enter some text" in stat(page, "state")

    page.get_by_label("Standard (gr.Audio, HLS)").check()
    page.fill("#text textarea", TEXT)
    generate(page, engine)
    full = "#full-audio audio, #full-audio [data-testid^='waveform']"
    page.wait_for_selector(full, state="attached")
    page.fill("#text textarea", "   ")
    page.click("#generate")
    wait_for_toast(page, "Please enter some text to speak.")  # recorded: it closes itself
    page.wait_for_function(
        "() => document.querySelector(\"#live-stats [data-s='state']\").textContent"
        ".startsWith('Error: ')",
        timeout=BROWSER_HANG_MS,
    )  # not "Generating…" for ever
    page.wait_for_selector(full, state="detached")


def test_a_click_while_the_last_standard_run_is_pending_still_runs(browser, site, monkeypatch):
    """A flaky failure of the test above: Generate clicked after the standard player showed
    the last clip but before Gradio had the run's completion was dropped (the hidden trigger's
    default trigger_mode "once"), so the new run's error never came. The last run is held
    pending here until the new click has been made: the click runs once the last run ends."""
    url, engine, _ = site
    reached, release = threading.Event(), threading.Event()
    stream = engine.stream

    def held(request, cancel=None):  # noqa: ANN001, ANN202
        def events():  # noqa: ANN202
            yield from stream(request, cancel)
            reached.set()
            release.wait(BROWSER_HANG_MS / 1000)

        return events()

    monkeypatch.setattr(engine, "stream", held)
    page = open_page(browser, url)
    page.get_by_label("Standard (gr.Audio, HLS)").check()
    page.click("#generate")
    assert reached.wait(BROWSER_HANG_MS / 1000)
    page.fill("#text textarea", "   ")
    page.evaluate("() => { window.__toasts.length = 0; window.__ttsStats.last.held = true; }")
    page.click("#generate")
    page.wait_for_function("() => !window.__ttsStats.last.held", timeout=BROWSER_HANG_MS)
    release.set()
    wait_for_toast(page, "Please enter some text to speak.")


@pytest.fixture(scope="module")
def private_site(espeak_backend, tmp_path_factory):
    """(url, engine, voices): the page with private voices (`--private-voices`)."""
    engine = RecordingEngine(espeak_backend, EngineConfig(max_concurrent=2))
    voices = VoiceRegistry(tmp_path_factory.mktemp("private-voices"), private=True)
    demo, url = serve_page(EngineSlot.holding(engine), voices)
    try:
        yield url, engine, voices
    finally:
        demo.close()


def test_with_private_voices_a_browser_sees_and_uses_only_its_own(browser, private_site):
    """Issue #24: every visitor's saved voices were listed to everyone. With private voices a
    browser lists and speaks with the built-in voices and its own; another browser (its own
    key) neither sees nor can use them, even by typing the name; GET /v1/audio/voices without
    a key lists none of them."""
    url, engine, voices = private_site
    page = open_page(browser, url)
    bodies = []
    page.on(
        "request", lambda r: bodies.append(r.post_data_json) if "/tts_stream/pcm" in r.url else None
    )
    assert "Only this browser will see the voices it saves." in page.text_content("#upload-box")
    page.set_input_files("#reference input[type=file]", str(FEMALE_CLIP))
    page.wait_for_selector("#reference audio", state="attached", timeout=BROWSER_HANG_MS)
    page.fill("#voice-name input, #voice-name textarea", "mine-only")
    page.click("#save-voice")
    note(page, "Saved the voice 'mine-only': it is selected now.")
    assert page.input_value("#voice input") == "mine-only (saved by you)"
    assert "mine-only" in voices.names() and "mine-only" not in api_voices(url)
    spoken = generate(page, engine)  # the low-latency player sends the browser's key
    assert bodies[-1]["voice"] == "mine-only" and len(bodies[-1]["owner_key"]) >= 16
    assert spoken["voice"]["variant"].startswith("+f")
    page.get_by_label("Standard (gr.Audio, HLS)").check()
    assert generate(page, engine)["voice"] == spoken["voice"]  # so does the standard player

    stranger_context = browser.browser.new_context()  # another browser: its own storage, key
    stranger_context.set_default_timeout(BROWSER_HANG_MS)
    try:
        stranger = open_page(stranger_context, url)
        stranger.click("#voice input")
        # the page's load event fills the list after the page is up (seen late at load ~30)
        stranger.get_by_role("option", name="alloy (built-in)").wait_for()
        offered = [o.strip("✓ ") for o in stranger.get_by_role("option").all_text_contents()]
        assert "alloy (built-in)" in offered and not any("mine-only" in o for o in offered)
        stranger.keyboard.press("Escape")
        stranger.fill("#voice input", "mine-only")  # the dropdown takes a typed name
        stranger.press("#voice input", "Enter")
        missing = stranger.locator("#voice-about").get_by_text("There is no voice named")
        missing.wait_for(timeout=BROWSER_HANG_MS)
        assert missing.text_content() == "There is no voice named 'mine-only'."
        assert not stranger.is_visible("#delete-voice")
        stranger.click("#generate")
        stranger.wait_for_function(
            f"() => document.querySelector(\"{PLAYER_STATUS}\").textContent.startsWith('Error: ')",
            timeout=BROWSER_HANG_MS,
        )
        assert "Unknown voice 'mine-only'" in stranger.text_content(PLAYER_STATUS)
    finally:
        stranger_context.close()
    assert "mine-only" in voices.names()


def test_a_clip_that_is_not_audio_is_refused_when_it_is_uploaded(browser, site, tmp_path):
    """Issue 36: a non-audio upload was taken silently (an empty 0:00 player) until Generate
    or Save; now it is refused at once, said in the line under the voice picker."""
    url, engine, _ = site
    page = open_page(browser, url)
    junk = tmp_path / "notes.wav"
    junk.write_bytes(b"these are my notes, not a recording " * 40)
    page.set_input_files("#reference input[type=file]", str(junk))
    page.locator("#voice-note").get_by_text("This clip was not taken").wait_for(
        timeout=BROWSER_HANG_MS
    )
    assert "not audio" in page.text_content("#voice-note")
    page.wait_for_selector("#reference audio", state="detached", timeout=BROWSER_HANG_MS)
    page.set_input_files("#reference input[type=file]", str(FEMALE_CLIP))  # a good one is kept
    page.wait_for_selector("#reference audio", state="attached", timeout=BROWSER_HANG_MS)
    page.wait_for_selector("#voice-note", state="hidden", timeout=BROWSER_HANG_MS)
    page.close()
