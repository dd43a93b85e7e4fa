"""The page's low-latency player: raw PCM over a streamed fetch, played with the Web Audio API.

Inside a `gr.Blocks`, after the input components and the Generate/Stop buttons,

    player = build_lowlatency_player(fields, generate, stop)

renders a player-mode toggle, the player and a hidden "standard" button, and binds a
front-end-only handler to Generate (its click is the user gesture that starts the AudioContext)
and to Stop. `fields` maps the PCM route's request names (the Gradio API's parameter names) to
the components holding them. When the toggle says "Standard" the handler clicks
`player.standard_trigger` instead: bind the gr.Audio handler to that button, not to Generate,
so exactly one player synthesizes per click. With "Speak while the text arrives" Generate opens
the page's text-stream WebSocket (TEXT_ROUTE) instead and feeds the text box word by word at
the chosen rate. Both routes come with `tts_core.server.install_routes`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import gradio as gr

STATIC = Path(__file__).resolve().parent / "static"
LOW_LATENCY = "Low latency (Web Audio)"
STANDARD = "Standard (gr.Audio, HLS)"
DEFAULT_ROUTE = "/tts_stream/pcm"
TEXT_ROUTE = "/tts_stream/text"  # tts_core.server.page_text_ws.ROUTE
TEXT_STREAM_ID = "text-stream-options"
WORDS_PER_S = (0.5, 20.0, 3.0)  # the rate slider: min, max, default (~ a chat LLM's pace)
STANDARD_TRIGGER_ID = "standard-player-trigger"

_MARKUP = """<div class="ll-player">
<span class="ll-title">Low-latency player</span>
<span class="ll-status" data-ll="status">Press Generate to start.</span>
<div class="ll-download"><audio data-ll="replay" controls hidden></audio>
<a data-ll="download" download="speech.wav" hidden>Download WAV</a></div>
</div>"""


@dataclass
class LowLatencyPlayer:
    mode: gr.Radio  # LOW_LATENCY (default) or STANDARD
    html: gr.HTML
    standard_trigger: gr.Button  # hidden; clicked by the page when the toggle says STANDARD
    text_stream: gr.Checkbox  # "Speak while the text arrives"
    words_per_s: gr.Slider  # its feed rate


def player_script(
    fields: list[str],
    generate_id: str,
    route: str = DEFAULT_ROUTE,
    start_lead_s: float = 0.02,
    max_lead_s: float = 1.0,
    text_route: str = TEXT_ROUTE,
) -> str:
    config = {
        "route": route,
        "textRoute": text_route,
        "textStreamId": TEXT_STREAM_ID,
        "fields": fields,
        "mode": LOW_LATENCY,
        "generateId": generate_id,
        "standardTriggerId": STANDARD_TRIGGER_ID,
        "startLeadS": start_lead_s,
        "maxLeadS": max_lead_s,
    }
    source = (STATIC / "lowlatency_player.js").read_text()
    return source.replace("__CONFIG__", json.dumps(config))


def build_lowlatency_player(
    fields: dict[str, gr.components.Component],
    generate: gr.Button,
    stop: gr.Button | None = None,
    route: str = DEFAULT_ROUTE,
    start_lead_s: float = 0.02,
) -> LowLatencyPlayer:
    """Render the toggle + player and bind it to Generate/Stop (see the module docstring)."""
    if not generate.elem_id:
        raise ValueError("the Generate button needs an elem_id (click -> first sound timing)")
    mode = gr.Radio(
        [LOW_LATENCY, STANDARD], value=LOW_LATENCY, label="Player", elem_id="player-mode"
    )
    text_stream, words_per_s = _text_stream_controls()
    html = gr.HTML(
        _MARKUP,
        css_template=(STATIC / "lowlatency_player.css").read_text(),
        js_on_load=player_script(list(fields), generate.elem_id, route, start_lead_s),
        elem_id="lowlatency-player",
    )
    trigger = gr.Button("Standard player", visible="hidden", elem_id=STANDARD_TRIGGER_ID)
    start = "(...values) => { window.__ttsLowLatency && window.__ttsLowLatency.start(values); }"
    inputs = [mode, text_stream, words_per_s, *fields.values()]  # the order start() reads
    generate.click(None, inputs, None, js=start, queue=False)
    if stop is not None:
        halt = (
            "() => { window.__ttsLowLatency && window.__ttsLowLatency.stop();"
            " window.__ttsStats && window.__ttsStats.stopped(); }"
        )
        stop.click(None, None, None, js=halt, queue=False)
    # its own controls show in low-latency mode only (set_mode hides the block)
    set_mode = "(mode) => { window.__ttsLowLatency && window.__ttsLowLatency.setMode(mode); }"
    mode.change(None, mode, None, js=set_mode, queue=False)
    return LowLatencyPlayer(mode, html, trigger, text_stream, words_per_s)


def _text_stream_controls() -> tuple[gr.Checkbox, gr.Slider]:
    """The "speak while the text arrives" checkbox and its rate (shown in low-latency mode)."""
    low, high, default = WORDS_PER_S
    with gr.Row(elem_id=TEXT_STREAM_ID):
        checkbox = gr.Checkbox(
            False,
            label="Speak while the text arrives",
            info="feed the text word by word, as a chat model writes it",
            elem_id="text-stream",
        )
        rate = gr.Slider(
            low, high, default, step=0.5, label="Words per second", elem_id="text-stream-rate"
        )
    return checkbox, rate
