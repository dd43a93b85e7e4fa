"""The Gradio Blocks page: inputs, live audio + stats + plot, full clip, and the named API."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import gradio as gr

from ..engine import LANGUAGES, Engine
from . import handlers
from .formatting import PLOT_COLUMNS, empty_timeline
from .lowlatency import FIELDS as PLAYER_FIELDS
from .lowlatency import STANDARD, build_lowlatency_player

CONCURRENCY_ID = "synthesis"  # one queue slot pool for the page and both API endpoints
EXAMPLES = [
    ["Hello! This voice is streamed to your browser while it is being synthesized.",
     "english", "reference_female_en.wav", "This is a short sample of a calm, clear voice."],
    ["Good morning. The weather today is sunny, with a light breeze from the west.",
     "auto", "reference_male_en.wav", "Here is another voice, a little lower and slower."],
    ["Bonjour tout le monde. Ceci est une démonstration de synthèse vocale.",
     "french", "reference_female_en.wav", ""],
    ["Guten Tag! Wie geht es Ihnen heute?", "german", "reference_male_en.wav", ""],
]  # fmt: skip


def build_demo(engine: Engine, assets: Path | None = None) -> gr.Blocks:
    """The page for `engine`; `assets` holds the example reference clips (none: no examples)."""
    info = engine.info()
    defaults = engine.backend.sampling_defaults()
    with gr.Blocks(title="Streaming voice demo") as demo:
        _header(info)
        with gr.Row():
            with gr.Column(scale=1):
                inputs = _inputs(info, defaults)
                with gr.Row():
                    generate = gr.Button("Generate", variant="primary", elem_id="generate")
                    stop = gr.Button("Stop", variant="stop", elem_id="stop")
            with gr.Column(scale=1):
                fields = dict(zip(PLAYER_FIELDS, inputs, strict=True))
                player = build_lowlatency_player(fields, generate, stop,
                                                  sample_rate=engine.sample_rate)  # fmt: skip
                # Gradio's streaming player, its live stats, plot and full clip: shown when the
                # player toggle says "Standard" (the low-latency panel has its own readout)
                with gr.Column(visible=False) as standard_outputs:
                    outputs = _outputs()
                player.mode.change(lambda mode: gr.update(visible=mode == STANDARD), player.mode,
                                   standard_outputs, queue=False, api_visibility="private")  # fmt: skip
        if assets is not None:
            _examples(inputs, assets)
        api_outputs = _api_outputs()

        wire = partial(_wire, engine=engine, inputs=inputs)
        # Generate runs the low-latency player in the browser; the page clicks this hidden
        # trigger instead when the player toggle says "Standard" (one synthesis per click).
        generating = wire(player.standard_trigger.click, handlers.stream_to_page, outputs,
                          "generate", visibility="undocumented")  # fmt: skip
        stop.click(None, None, None, cancels=[generating])
        # API-only endpoints: a hidden button that no one clicks, so they run only when called
        api_only = gr.Button(visible=False)
        wire(api_only.click, handlers.stream_to_api, api_outputs[:2], "synthesize")
        wire(api_only.click, handlers.synthesize_full, api_outputs[2:], "synthesize_full")
    return demo


def _wire(trigger, fn, outputs, api_name, *, engine, inputs, visibility="public"):  # noqa: ANN001
    """One event on the shared concurrency pool, sized like the engine's own limit."""
    return trigger(
        handlers.bind(fn, engine),
        inputs=inputs,
        outputs=outputs,
        api_name=api_name,
        api_visibility=visibility,
        concurrency_id=CONCURRENCY_ID,
        concurrency_limit=engine.max_concurrent,
        show_progress="minimal",
    )


def _header(info: dict) -> None:
    gr.Markdown(
        "# Streaming voice demo\nGive a reference voice and some text: the audio plays while "
        f"it is being generated. Voice: **{info['backend']}** (`{info['model']}`, "
        f"{info['device']})."
    )
    gr.Markdown(f"ℹ️ {info['description']}", elem_id="backend-description")
    if info.get("notice"):
        gr.Markdown(f"⚠️ **{info['notice']}**", elem_id="fallback-notice")


def _inputs(info: dict, defaults: dict) -> list:
    limit = info["max_chars"]
    text = gr.Textbox(label=f"Text (up to {limit} characters)", lines=4, max_length=limit,
                      value="Hello! This is a streaming voice demo. The audio plays while it is "
                      "being generated.", elem_id="text")  # fmt: skip
    choices = [("Auto-detect", "auto")] + [(name.capitalize(), name) for name in LANGUAGES]
    language = gr.Dropdown(choices, value="auto", label="Language", allow_custom_value=True)
    needed = "required" if info["needs_reference"] else "optional for this voice"
    reference = gr.Audio(None, sources=["upload", "microphone"], type="filepath", elem_id="reference",
                         label=f"Reference voice: 3-10 s of speech ({needed})")  # fmt: skip
    ref_text = gr.Textbox("", label="Transcript of the reference (optional)", lines=1)
    with gr.Accordion("Advanced", open=False, elem_id="advanced"):
        # each backend's own knobs (sampling_defaults names them); the others stay hidden,
        # so the API's parameter list is the same whichever model is served
        sampling = "temperature" in defaults
        gr.Markdown("**Sampling**" if sampling or "cfg_value" in defaults else "**Seed**")
        temperature = gr.Slider(0.1, 2.0, value=defaults.get("temperature", 0.9), step=0.05,
                                label="Temperature", visible=sampling)  # fmt: skip
        top_k = gr.Slider(0, 200, value=defaults.get("top_k", 50), step=1, label="Top-k (0: off)",
                          visible=sampling)  # fmt: skip
        top_p = gr.Slider(0.05, 1.0, value=defaults.get("top_p", 1.0), step=0.05, label="Top-p",
                          visible=sampling)  # fmt: skip
        penalty = gr.Slider(1.0, 2.0, value=defaults.get("repetition_penalty", 1.05), step=0.01,
                            label="Repetition penalty", visible=sampling)  # fmt: skip
        guided = "cfg_value" in defaults
        cfg = gr.Slider(0.0, 5.0, value=defaults.get("cfg_value", 2.0), step=0.1,
                        label="Guidance (CFG value)", visible=guided)  # fmt: skip
        steps = gr.Slider(1, 50, value=defaults.get("inference_timesteps", 10), step=1,
                          label="Diffusion steps", visible=guided)  # fmt: skip
        seed = gr.Number(value=-1, precision=0, label="Seed (-1: random)")
        gr.Markdown(f"**Streaming** (1 frame = {info['frame_ms']:g} ms of audio)")
        first = gr.Slider(1, 25, value=2, step=1, label="First chunk (frames)",
                          elem_id="first-chunk")  # fmt: skip
        steady = gr.Slider(1, 50, value=6, step=1, label="Later chunks (frames)",
                           elem_id="chunk-size")  # fmt: skip
    return [text, language, reference, ref_text, temperature, top_k, top_p, penalty, seed,
            first, steady, cfg, steps]  # fmt: skip


def _outputs() -> list:
    live = gr.Audio(label="Live audio", streaming=True, autoplay=True, interactive=False,
                    elem_id="live-audio")  # fmt: skip
    stats = gr.Markdown("Press **Generate** to start.", elem_id="live-stats")
    plot = gr.LinePlot(empty_timeline(), x=PLOT_COLUMNS[0], y=PLOT_COLUMNS[1],
                       color=PLOT_COLUMNS[2], title="Audio produced vs wall-clock time",
                       height=220, elem_id="timeline")  # fmt: skip
    full = gr.Audio(label="Full clip (download)", type="numpy", interactive=False,
                    elem_id="full-audio")  # fmt: skip
    with gr.Accordion("Raw stats (JSON)", open=False):
        stats_json = gr.JSON(elem_id="stats-json")
    return [live, stats, plot, full, stats_json]


def _api_outputs() -> list:
    chunk = gr.Audio(type="numpy", visible=False, label="chunk")
    chunk_stats = gr.JSON(visible=False, label="stats")
    full = gr.Audio(type="numpy", visible=False, label="audio")
    full_stats = gr.JSON(visible=False, label="stats")
    return [chunk, chunk_stats, full, full_stats]


def _examples(inputs: list, assets: Path) -> None:
    rows = [[text, lang, str(assets / clip), ref] for text, lang, clip, ref in EXAMPLES]
    rows = [row for row in rows if Path(row[2]).is_file()]
    if rows:
        gr.Examples(rows, inputs=inputs[:4], label="Examples", cache_examples=False)
