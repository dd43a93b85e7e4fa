"""The live stats panel that both players fill on every chunk (static/stats_panel.js draws it:
tiles of numbers, the audio-vs-time plot and per-chunk compute bars)."""

from __future__ import annotations

from pathlib import Path

import gradio as gr

STATIC = Path(__file__).resolve().parent / "static"
TILES = [  # (label, data-s of the value, hint below it: text, or ("data-s",) when live)
    ("Heard after", "heard", "click → first sound"),
    ("First audio (engine)", "engine", "request → first chunk"),
    ("Real-time factor", "rtf", ("rtf-hint",)),
    ("Audio", "audio", ("chunks",)),
    ("Last chunk", "chunk", "compute for audio"),
    ("Queue wait", "queue", "before synthesis began"),
    ("Batch size", "batch", "streams decoded together"),
    ("Underruns", "underruns", "low-latency player"),
]


def _tile(label: str, name: str, hint: str | tuple[str]) -> str:
    hint = (
        f'<div class="hint" data-s="{hint[0]}"></div>'
        if isinstance(hint, tuple)
        else (f'<div class="hint">{hint}</div>')
    )
    return (
        f'<div class="tile"><div class="label">{label}</div>'
        f'<div class="value" data-s="{name}">–</div>{hint}</div>'
    )


MARKUP = f"""<div class="tts-stats">
<div class="head"><span class="title">Live stats <span class="state" data-s="mode"></span></span>
<span class="state" data-s="state">Press Generate to start.</span></div>
<div class="tiles">{"".join(_tile(*tile) for tile in TILES)}</div>
<div class="text-stream" data-s="text-stream" hidden><b>Text in, audio out:</b>
<span data-s="text-in"></span> · <span data-s="text-first"></span> ·
<span data-s="text-audio"></span></div>
<div class="chart-title">Seconds of audio produced vs wall-clock seconds<span class="legend">
<i style="background:#f97316"></i>generated<i style="background:#3b82f6"></i>playback
(from the first chunk: while generated stays above it, playback never waits)</span></div>
<div data-s="plot"></div>
<div class="chart-title">Compute per chunk ÷ its audio length (below the line: faster than
real time)</div>
<div data-s="bars"></div>
<div class="notices" data-s="notices"></div>
<div class="foot" data-s="model"></div>
</div>"""


def build_stats_panel() -> gr.JSON:
    """The panel, and the hidden gr.JSON through which the standard player's handler feeds it
    (the low-latency player feeds it in the browser). Returns that gr.JSON."""
    gr.HTML(
        MARKUP,
        css_template=(STATIC / "stats_panel.css").read_text(),
        js_on_load=(STATIC / "stats_panel.js").read_text(),
        elem_id="live-stats",
    )
    stats = gr.JSON(visible=False, elem_id="stats-json", label="stats")
    show = "(stats) => { window.__ttsStats && window.__ttsStats.update(stats); }"
    stats.change(None, stats, None, js=show, queue=False, api_visibility="private")
    return stats
