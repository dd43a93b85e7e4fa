"""The page on the Qwen3-TTS CustomVoice and VoiceDesign checkpoints (#41), in headless
Chromium: on qwen3-tiny-cv the preset picker lists the checkpoint's own presets (from
/v1/models, never a table of ours) and Generate speaks one with an instruction; on
qwen3-tiny-vd Generate speaks from a description and "Save this voice" stores the result and
its text in the voice store. The low-latency player's audio is the /v1 route's for the same
preset, instruction, text and seed (one engine, one seed: the same samples, give or take one
int16 step: SAME_RUN_LSB).
The tiny checkpoints are random: the path is tested, not the voice.
"""

from __future__ import annotations

import base64
from pathlib import Path

import httpx
import numpy as np
import pytest
from conftest import BROWSER_HANG_MS, chromium_context, start_app, stop_app

pytestmark = [pytest.mark.browser, pytest.mark.slow]

FIXTURES = Path(__file__).resolve().parent / "fixtures"
TEXT = "Hello from the family page."
SEED = 3
WAV_HEADER = 44  # the page's WAV (lowlatency_player.js): a plain 44-byte PCM16 header
# Two runs of one request in one server: the same codes (a code of its own changes whole
# frames, thousands of steps), the codec's float32 sums maybe not in the same order (seen once
# on this loaded box: one sample 0 vs 1); int16 rounding turns a gap of a few float32 ulps
# into at most one step
SAME_RUN_LSB = 1


def same_audio(a: bytes, b: bytes) -> bool:
    x, y = np.frombuffer(a, "<i2"), np.frombuffer(b, "<i2")
    return x.size == y.size and int(np.abs(x.astype(int) - y).max(initial=0)) <= SAME_RUN_LSB


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    with chromium_context(tmp_path_factory.mktemp("chromium-profile")) as context:
        yield context


def serve(name: str, tmp_path_factory):  # noqa: ANN201
    if not (FIXTURES / name).is_dir():
        pytest.skip(f"tests/fixtures/{name} is not there")
    folder = tmp_path_factory.mktemp(name)
    url, process, _ = start_app(folder, "--model", str(FIXTURES / name), "--no-fallback")
    return url, process, folder / "voices"  # start_app's TTS_VOICES_DIR


@pytest.fixture(scope="module")
def custom_voice(tmp_path_factory):
    url, process, _ = serve("qwen3-tiny-cv", tmp_path_factory)
    yield url
    stop_app(process)


@pytest.fixture(scope="module")
def voice_design(tmp_path_factory):
    url, process, store = serve("qwen3-tiny-vd", tmp_path_factory)
    yield url, store
    stop_app(process)


def open_page(browser, url: str):  # noqa: ANN001, ANN201
    page = browser.new_page()
    page.goto(url)
    page.wait_for_selector("#instructions textarea", state="visible", timeout=BROWSER_HANG_MS)
    page.fill("#text textarea", TEXT)
    page.click("#advanced")  # the seed box is under Advanced
    page.fill("#knob-seed input", str(SEED))
    return page


def generate(page) -> bytes:  # noqa: ANN001 - a Playwright Page
    """Click Generate; wait for the low-latency run to end; its WAV's samples (int16 LE)."""
    page.evaluate("() => { window.__ttsLowLatency.last = null; }")
    page.click("#generate")
    page.wait_for_function(
        "() => { const m = window.__ttsLowLatency.last; return m && (m.done || m.error); }",
        timeout=BROWSER_HANG_MS,
    )
    run = page.evaluate("() => window.__ttsLowLatency.last")
    assert run.get("done") and not run.get("error"), run
    page.wait_for_selector('#lowlatency-player [data-ll="download"]:not([hidden])')
    data_url = page.evaluate("""async () => {
      const link = document.querySelector('#lowlatency-player [data-ll="download"]');
      const blob = await (await fetch(link.href)).blob();
      return await new Promise((done) => {
        const reader = new FileReader(); reader.onload = () => done(reader.result);
        reader.readAsDataURL(blob);
      });
    }""")
    return base64.b64decode(data_url.split(",", 1)[1])[WAV_HEADER:]


def v1_pcm(url: str, **body) -> bytes:  # noqa: ANN003
    body = {"model": "tts-1", "input": TEXT, "seed": SEED, "response_format": "pcm", **body}
    response = httpx.post(f"{url}/v1/audio/speech", json=body, timeout=300)
    assert response.status_code == 200, response.text
    return response.content


def test_the_picker_lists_the_presets_and_speaks_one_with_an_instruction(browser, custom_voice):
    info = httpx.get(f"{custom_voice}/v1/models", timeout=30).json()["data"][-1]["info"]
    assert info["task_type"] == "CustomVoice" and info["instruct_supported"]
    page = open_page(browser, custom_voice)
    assert not page.locator("#voice").is_visible()  # no clone voice library on this model
    assert not page.locator("#examples").is_visible()  # nor its clip voices' examples
    page.click("#speaker input")
    offered = [o.strip("✓ ") for o in page.get_by_role("option").all_text_contents()]
    assert offered == info["speakers"]  # the checkpoint's own presets, in its order
    page.get_by_role("option", name="dylan", exact=True).click()
    page.wait_for_function("() => document.querySelector('#speaker input').value === 'dylan'")
    instruction = "Speak slowly and calmly."
    page.fill("#instructions textarea", instruction)
    heard = generate(page)
    assert len(heard) > 0
    assert same_audio(heard, v1_pcm(custom_voice, voice="dylan", instructions=instruction))
    # the instruction made a difference the route can tell: not the plain preset's samples
    assert not same_audio(heard, v1_pcm(custom_voice, voice="dylan"))


def test_a_description_speaks_and_its_result_saves_as_a_clone_voice(browser, voice_design):
    from tts_core.server import VoiceRegistry

    voice_design, store = voice_design
    page = open_page(browser, voice_design)
    assert not page.locator("#speaker").is_visible()  # VoiceDesign has no presets
    page.locator("#instruction-examples").get_by_text("A warm, deep male voice").click()
    # an example fills the box through a server round trip: wait for it (the event), not a time
    page.wait_for_function(
        "() => document.querySelector('#instructions textarea').value"
        ".startsWith('A warm, deep male voice')"
    )
    description = page.input_value("#instructions textarea")
    heard = generate(page)
    assert same_audio(
        heard, v1_pcm(voice_design, task_type="VoiceDesign", instructions=description)
    )
    page.fill("#design-name input, #design-name textarea", "designed-narrator")
    page.click("#save-design")
    page.locator("#design-result").get_by_text("Saved the voice 'designed-narrator'").wait_for()
    saved, clip = VoiceRegistry(store).load("designed-narrator")
    assert saved.transcript == TEXT  # the text the result speaks: a Base model's ICL prompt
    assert clip.size == len(heard) // 2  # the whole result (int16: 2 bytes a sample)
