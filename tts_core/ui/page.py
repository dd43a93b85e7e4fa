"""The Gradio Blocks page: text + voice in, two players out (low-latency Web Audio by default,
Gradio's streaming gr.Audio behind a toggle), one live stats panel, and the named API.

The page is built before the model has loaded (it loads in the background): what depends on
the model (the model line, the notice, which knobs show, "reference required") comes from
`slot.info()` on page load and from a 1 s timer that runs until loading ended.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gradio as gr
from starlette.middleware import Middleware

from ..engine import LANGUAGES, Engine, EngineSlot
from ..server import ApiConfig, VoiceRegistry, as_slot, make_router, open_voice_registry
from ..server.disk_guard import CachePolicy, DiskGuard
from ..server.gradio_guard import EventGuard
from . import handlers
from .formatting import notice_html, status_html
from .lowlatency import FIELDS as PLAYER_FIELDS
from .lowlatency import STANDARD, build_lowlatency_player
from .stats_panel import build_stats_panel
from .voice_library import UPLOAD, build_voice_library, wire_voice_library

CONCURRENCY_ID = "synthesis"  # one queue slot pool for the page and both API endpoints
FALLBACK_CONCURRENCY = 8  # before the model is known
KNOB_DEFAULTS = {"temperature": 0.9, "top_k": 50, "top_p": 1.0, "repetition_penalty": 1.05,
                 "cfg_value": 2.0, "inference_timesteps": 10}  # until the model says  # fmt: skip
EXAMPLES = [  # (label, text, language, clip in `assets`, its transcript): real recordings
    ("English, female (recorded)",
     "Hello! This voice is streamed to your browser while it is being synthesized.",
     "english", "voices/arctic_slt_a0009.wav",
     "He turned sharply, and faced Gregson across the table."),
    ("English, Scottish male (recorded)",
     "Good morning. The weather today is sunny, with a light breeze from the west.",
     "english", "voices/arctic_awb_a0007.wav",
     "And you always want to see it in the superlative degree."),
    ("French, female voice", "Bonjour tout le monde. Ceci est une démonstration de synthèse vocale.",
     "french", "voices/arctic_slt_a0009.wav", ""),
    ("German, male voice", "Guten Tag! Wie geht es Ihnen heute?", "german",
     "voices/arctic_awb_a0007.wav", ""),
]  # fmt: skip


class VoicePage(gr.Blocks):
    """The page; `launch()` also serves the HTTP routes it needs (the low-latency player's PCM
    route and the /v1 speech API) on the same server."""

    def __init__(self, slot: EngineSlot, voices: VoiceRegistry, api: ApiConfig | None) -> None:
        # no delete_cache: the disk guard added in launch() bounds Gradio's cache by bytes and
        # age and limits uploads per client (Gradio's sweep had neither limit, and would run
        # beside it); set `tts_cache_policy` before launch() for other limits
        super().__init__(title="Streaming voice demo")
        self.tts_slot, self.tts_voices, self.tts_api = slot, voices, api
        self.tts_cache_policy = CachePolicy()
        self.tts_disk_guard: DiskGuard | None = None

    def launch(self, *args: Any, **kwargs: Any) -> Any:
        # the routes are part of the app from its creation: served from the first request,
        # whatever launch does next (blocks, debug, share)
        app_kwargs = dict(kwargs.pop("app_kwargs", None) or {})
        router, _ = make_router(self.tts_slot, self.tts_voices, self.tts_api)
        app_kwargs["routes"] = [*app_kwargs.get("routes", []), *router.routes]
        guard = Middleware(EventGuard, blocks=self)  # the page's events by index only
        disk = self.disk_guard_middleware()
        app_kwargs["middleware"] = [*app_kwargs.get("middleware", []), guard, disk]
        return super().launch(*args, app_kwargs=app_kwargs, **kwargs)

    def disk_guard_middleware(self) -> Middleware:
        """The disk guard of whichever server serves the page (launch() or ui.serve_page): made
        before serving, so the page's own cache files (example clips) are pinned; it starts its
        janitor with the server's lifespan, and close() stops it."""
        self.tts_disk_guard = DiskGuard.for_blocks(self, self.tts_cache_policy)
        return self.tts_disk_guard.middleware()

    def close(self, verbose: bool = True) -> None:
        super().close(verbose)
        if self.tts_disk_guard is not None:  # also stopped by the lifespan's shutdown, if any
            self.tts_disk_guard.stop()


def build_demo(
    source: Engine | EngineSlot,
    voices: VoiceRegistry | None = None,
    assets: Path | None = None,
    api: ApiConfig | None = None,
    concurrency: int | None = None,
) -> VoicePage:
    """The page for an engine, or for the slot it is loading into. `voices`: the registry
    shared with /v1/audio/voices (default: `open_voice_registry()`); `assets`: where the
    example clips are (none: no examples); `api`: the routes' config; `concurrency`: Gradio's
    limit on the synthesis events (default: the engine's, or 8 while it loads)."""
    slot = as_slot(source)
    voices = voices if voices is not None else open_voice_registry()
    if concurrency is None:
        concurrency = slot.engine.max_concurrent if slot.ready else FALLBACK_CONCURRENCY
    info = slot.info()
    with VoicePage(slot, voices, api) as demo:
        gr.Markdown("# Streaming voice demo\nType some text and pick or upload a voice: you "
                    "hear it while it is being generated.")  # fmt: skip
        parts: dict[str, Any] = {
            "status": gr.HTML(status_html(info), elem_id="model-status",
                              css_template=_css("page.css")),  # fmt: skip
            "notice": gr.HTML(notice_html(info), elem_id="fallback-notice",
                              css_template=_css("page.css"), visible=bool(info.get("notice"))),
        }  # fmt: skip
        with gr.Row():
            with gr.Column(scale=1):
                inputs, library = _inputs(info, parts, editable=_page_may_write(api))
                with gr.Row():
                    generate = gr.Button("Generate", variant="primary", elem_id="generate")
                    stop = gr.Button("Stop", variant="stop", elem_id="stop")
            with gr.Column(scale=1):
                fields = dict(zip(PLAYER_FIELDS, inputs, strict=True))
                player = build_lowlatency_player(fields, generate, stop)
                # Gradio's streaming player and its full clip: shown when the toggle says
                # "Standard" (the low-latency player has its own replay + download)
                with gr.Column(visible=False) as standard_outputs:
                    outputs = _standard_outputs()
                player.mode.change(lambda mode: gr.update(visible=mode == STANDARD), player.mode,
                                   standard_outputs, queue=False, api_visibility="private")  # fmt: skip
                outputs.append(build_stats_panel())
        if assets is not None:
            _examples(inputs, library, assets)
        _wire_synthesis(slot, voices, inputs, outputs, player, stop, concurrency)
        wire_voice_library(demo, library, slot, voices, editable=_page_may_write(api))
        parts["timer"] = gr.Timer(1.0, active=_loading(info))
        refresh = {"fn": lambda: page_state(slot.info(), parts), "outputs": set(parts.values()),
                   "queue": False, "show_progress": "hidden", "api_visibility": "private"}  # fmt: skip
        demo.load(**refresh)
        parts["timer"].tick(**refresh)
    return demo


def _page_may_write(api: ApiConfig | None) -> bool:
    """Save and Delete in the page write the voice store without a key: only on a server
    whose API needs none (with --api-key, voices are managed through /v1/audio/voices)."""
    return not (api and api.access.api_key)


def page_state(info: dict[str, Any], parts: dict[str, Any]) -> dict:
    """What depends on the model, from slot.info(): {component: update}."""
    model = model_dependent(info)
    updates = {
        "status": status_html(info),
        "notice": gr.update(value=notice_html(info), visible=bool(info.get("notice"))),
        "text": gr.update(label=model["text"], max_length=info.get("max_chars")),
        "reference": gr.update(label=model["reference"]),
        "sampling": gr.update(visible=model["sampling"]),
        "guided": gr.update(visible=model["guided"]),
        "frames": model["frames"],
        "timer": gr.Timer(active=_loading(info)),  # polls until loading ended
    }
    if not _loading(info):  # the model's defaults, once known (never over a user's edits
        updates.update(model["knobs"])  # while the timer polls)
    return {parts[name]: value for name, value in updates.items()}


def _loading(info: dict[str, Any]) -> bool:
    return info["status"]["status"] not in ("ready", "failed")


def model_dependent(info: dict[str, Any]) -> dict[str, Any]:
    """Labels, knob visibility and knob defaults for slot.info() (loading: generic ones)."""
    knobs = info.get("sampling_defaults", {})
    needed = {True: " (required)", False: " (optional for this model)"}.get(
        info.get("needs_reference"),
        "",  # None while loading
    )
    return {
        "text": f"Text (up to {info['max_chars']} characters)" if "max_chars" in info else "Text",
        "reference": f"Reference clip: 3-10 s of speech{needed}",
        "sampling": "temperature" in knobs,
        "guided": "cfg_value" in knobs,
        "frames": f"**Streaming** (1 frame = {info.get('frame_ms', 80):g} ms of audio)",
        "knobs": {**KNOB_DEFAULTS, **{k: v for k, v in knobs.items() if k in KNOB_DEFAULTS}},
    }


def _inputs(info: dict[str, Any], parts: dict[str, Any], editable: bool) -> tuple[list, Any]:
    """The inputs in make_request's order, and the voice library; fills `parts` with what
    page_state updates."""
    model = model_dependent(info)
    parts["text"] = gr.Textbox(
        label=model["text"], lines=4, max_length=info.get("max_chars"), elem_id="text",
        value="Hello! This is a streaming voice demo. The audio plays while it is being generated.",
    )  # fmt: skip
    choices = [("Auto-detect", "auto")] + [(name.capitalize(), name) for name in LANGUAGES]
    language = gr.Dropdown(choices, value="auto", label="Language", allow_custom_value=True)
    library = build_voice_library(model["reference"], editable)
    parts["reference"] = library.reference
    with gr.Accordion("Advanced", open=False, elem_id="advanced"):
        knobs = _knobs(model, parts)
    inputs = [parts["text"], language, library.reference, library.transcript, *knobs,
              library.voice]  # fmt: skip
    return inputs, library


def _knobs(model: dict[str, Any], parts: dict[str, Any]) -> list:
    """Each backend's own knobs (sampling_defaults names them) show, the others stay hidden, so
    the API's parameter list is the same whichever model is served. Order: make_request's."""
    v = model["knobs"]
    with gr.Group(visible=model["sampling"]) as parts["sampling"]:
        parts["temperature"] = gr.Slider(0.1, 2.0, v["temperature"], step=0.05,
                                         label="Temperature")  # fmt: skip
        parts["top_k"] = gr.Slider(0, 200, v["top_k"], step=1, label="Top-k (0: off)")
        parts["top_p"] = gr.Slider(0.05, 1.0, v["top_p"], step=0.05, label="Top-p")
        parts["repetition_penalty"] = gr.Slider(1.0, 2.0, v["repetition_penalty"], step=0.01,
                                                label="Repetition penalty")  # fmt: skip
    with gr.Group(visible=model["guided"]) as parts["guided"]:
        parts["cfg_value"] = gr.Slider(0.0, 5.0, v["cfg_value"], step=0.1,
                                       label="Guidance (CFG value)")  # fmt: skip
        parts["inference_timesteps"] = gr.Slider(1, 50, v["inference_timesteps"], step=1,
                                                 label="Diffusion steps")  # fmt: skip
    seed = gr.Number(value=-1, precision=0, label="Seed (-1: random)")
    parts["frames"] = gr.Markdown(model["frames"])
    first = gr.Slider(1, 25, value=2, step=1, label="First chunk (frames)", elem_id="first-chunk")
    steady = gr.Slider(1, 50, value=6, step=1, label="Later chunks (frames)", elem_id="chunk-size")
    return [parts["temperature"], parts["top_k"], parts["top_p"], parts["repetition_penalty"],
            seed, first, steady, parts["cfg_value"], parts["inference_timesteps"]]  # fmt: skip


def _standard_outputs() -> list:
    live = gr.Audio(label="Live audio", streaming=True, autoplay=True, interactive=False,
                    elem_id="live-audio")  # fmt: skip
    full = gr.Audio(label="Full clip (download)", type="numpy", interactive=False,
                    elem_id="full-audio")  # fmt: skip
    return [live, full]


def _wire_synthesis(slot: EngineSlot, voices: VoiceRegistry, inputs: list, outputs: list,
                    player: Any, stop: gr.Button, concurrency: int) -> None:  # fmt: skip
    """The standard player's event and the API-only endpoints, on one concurrency pool."""

    def wire(trigger: Any, fn: Any, outs: list, api_name: str, visibility: str = "public") -> Any:
        return trigger(handlers.bind(fn, slot, voices), inputs=inputs, outputs=outs,
                       api_name=api_name, api_visibility=visibility, concurrency_id=CONCURRENCY_ID,
                       concurrency_limit=concurrency, show_progress="minimal")  # fmt: skip

    # Generate runs the low-latency player in the browser; the page clicks this hidden
    # trigger instead when the player toggle says "Standard" (one synthesis per click).
    generating = wire(player.standard_trigger.click, handlers.stream_to_page, outputs,
                      "generate", visibility="private")  # fmt: skip
    stop.click(None, None, None, cancels=[generating])
    # API-only endpoints: a hidden button that no one clicks, so they run only when called
    api_only = gr.Button(visible=False)
    for fn, audio_label, api_name in (
        (handlers.stream_to_api, "chunk", "synthesize"),
        (handlers.synthesize_full, "audio", "synthesize_full"),
    ):
        outs = [gr.Audio(type="numpy", visible=False, label=audio_label),
                gr.JSON(visible=False, label="stats")]  # fmt: skip
        wire(api_only.click, fn, outs, api_name)


def _examples(inputs: list, library: Any, assets: Path) -> None:
    rows, labels = [], []
    for label, text, language, clip, transcript in EXAMPLES:
        if (assets / clip).is_file():
            rows.append([text, language, str(assets / clip), transcript, UPLOAD])
            labels.append(label)
    if rows:
        targets = [inputs[0], inputs[1], library.reference, library.transcript, library.voice]
        gr.Examples(rows, inputs=targets, label="Examples", example_labels=labels,
                    cache_examples=False, api_visibility="private")  # fmt: skip


def _css(name: str) -> str:
    return (Path(__file__).resolve().parent / "static" / name).read_text()
