"""The Gradio Blocks page: text + voice in, two players out (low-latency Web Audio by default,
Gradio's streaming gr.Audio behind a toggle), one live stats panel, and the named API.

The page is built before the model has loaded (it loads in the background), so it has a control
for every knob a known backend declares (and for the served backend's, when the engine is there
at build time), each made from its declaration (engine/knobs.py). What depends on the model
(the model line, the notice, which knobs show and their defaults, "reference required") comes
from the slot on page load and from a 1 s timer that runs until loading ended.

Layout: the text and Generate / Stop come first, so they are in view without scrolling on a
desktop (1280 x 1000) and on a phone (390 x 844); the language, the voice and the Advanced
knobs follow; the players and the stats panel are in the second column (below, on a phone).
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import gradio as gr
from starlette.middleware import Middleware

from ..engine import LANGUAGES, SHARED_KNOBS, Engine, EngineSlot, Knob
from ..engine.backend import reads_transcript, reference_needs
from ..engine.knobs import knob_defaults, served_knobs
from ..server import ApiConfig, VoiceRegistry, as_slot, make_router, open_voice_registry
from ..server.disk_guard import CachePolicy, DiskGuard
from ..server.gradio_guard import EventGuard
from ..server.route_utils import served_engine
from ..server.voice_fit import fits
from ..server.voices import VoiceNotFound
from . import handlers
from .formatting import notice_html, status_html
from .lowlatency import STANDARD, build_lowlatency_player
from .stats_panel import build_stats_panel
from .voice_library import (
    UPLOAD,
    UPLOAD_LABEL,
    ModelVoiceInputs,
    build_model_voice,
    build_voice_library,
    model_voice_state,
    wire_model_voice,
    wire_voice_library,
)

API_ENDPOINTS = ("synthesize", "synthesize_full")
FIRST_RELEASE = len(handlers.FIRST_RELEASE_ORDER)  # values every positional caller has sent
CONCURRENCY_ID = "synthesis"  # one queue slot pool for the page and both API endpoints
FALLBACK_CONCURRENCY = 8  # before the model is known
SHARED_NAMES = frozenset(knob.name for knob in SHARED_KNOBS)  # shown where the model reads them
# page.js / stats_panel.js write into it: Generating…, Done, Error: …
RUN_STATUS = '<p class="run-status" data-state="idle" role="status" aria-live="polite"></p>'
GREETING = "Hello! This is a streaming voice demo. The audio plays while it is being generated."
EXAMPLES = [  # (label, text, language, built-in voice): real recordings (assets/voices)
    (
        "English, female (recorded)",
        "Hello! This voice is streamed to your browser while it is being synthesized.",
        "english",
        "arctic-slt",
    ),
    (
        "English, Scottish male (recorded)",
        "Good morning. The weather today is sunny, with a light breeze from the west.",
        "english",
        "arctic-awb",
    ),
    (
        "French, female voice",
        "Bonjour tout le monde. Ceci est une démonstration de synthèse vocale.",
        "french",
        "arctic-slt",
    ),
    ("German, male voice", "Guten Tag! Wie geht es Ihnen heute?", "german", "arctic-awb"),
]


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

    def validate_inputs(self, block_fn: Any, inputs: list[Any]) -> None:
        """Too few values for an event (a plain-HTTP caller of /gradio_api/call/NAME): an error
        that says what the endpoint takes, in place of Gradio's, which lists the components'
        Python reprs and logs a traceback (issue 36). New parameters are only ever appended, so
        a caller of an earlier release sends a prefix of today's order: an API call with at
        least the first release's values gets the defaults of those it leaves out at the end."""
        missing = len(block_fn.inputs) - len(inputs)
        if missing > 0 and block_fn.api_name in API_ENDPOINTS and len(inputs) >= FIRST_RELEASE:
            inputs.extend([None] * missing)  # e.g. a caller from before `speaker` or TADA's knobs
        elif missing > 0:
            raise gr.Error(too_few_values(block_fn, len(inputs)), print_exception=False)
        super().validate_inputs(block_fn, inputs)

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
    engine = served_engine(slot)  # None while the model loads
    if concurrency is None:
        concurrency = engine.max_concurrent if engine is not None else FALLBACK_CONCURRENCY
    info = slot.info()
    max_input_chars = (api or ApiConfig()).max_input_chars  # the deployment's text limit
    parameters = handlers.ApiParameters.for_engine(engine, max_input_chars)
    backend = engine.backend if engine is not None else None
    with VoicePage(slot, voices, api) as demo:
        gr.Markdown(
            "# Streaming voice demo\nType some text and pick or upload a voice: you "
            "hear it while it is being generated."
        )
        parts: dict[str, Any] = {
            "status": gr.HTML(
                status_html(info), elem_id="model-status", css_template=_static("page.css")
            ),
            "notice": gr.HTML(
                notice_html(info),
                elem_id="fallback-notice",
                css_template=_static("page.css"),
                visible=bool(info.get("notice")),
            ),
        }
        with gr.Row():
            with gr.Column(scale=1):
                # the text and Generate first: in view without scrolling on a desktop or a
                # phone screen; the voice and the knobs below them
                # no max_length: Gradio's cuts a paste silently; the count below says the limit
                parts["text"] = gr.Textbox(label="Text", lines=3, elem_id="text", value=GREETING)
                controls = {"text": parts["text"]}
                # the count against the deployment's one text limit, said before the cut
                gr.HTML(
                    count_html(max_input_chars),
                    elem_id="text-count",
                    js_on_load=_static("page.js"),
                    css_template=_static("page.css"),
                )
                with gr.Row():  # side by side on a phone too (a small min_width)
                    generate = gr.Button(
                        "Generate", variant="primary", elem_id="generate", min_width=80
                    )
                    stop = gr.Button("Stop", variant="stop", elem_id="stop", min_width=80)
                # what Generate is doing, next to it (on a phone the player is far below)
                gr.HTML(RUN_STATUS, elem_id="run-status")
                library = _voice_inputs(
                    info, parts, controls, voices, backend, editable=_page_may_write(api)
                )
                # a checkpoint that makes its own voices (CustomVoice / VoiceDesign): a
                # preset picker and an instruction box, or a description box, in its place
                model_voice = build_model_voice(info)
                controls.update(speaker=model_voice.speaker, instructions=model_voice.instructions)
                # a model that clones from the clip alone (Chatterbox) does not read its words
                library.transcript.visible = reads_transcript(engine and engine.backend)
                parts["transcript"] = library.transcript
                with gr.Accordion("Advanced", open=False, elem_id="advanced"):
                    knob_controls = _knob_controls(parameters.knobs, engine, info, parts)
                controls.update(knob_controls)
            with gr.Column(scale=1):
                fields = {name: controls[name] for name in parameters.names}
                # the browser's owner key: which saved voices it may use (private voices)
                fields[handlers.OWNER_KEY] = library.owner
                player = build_lowlatency_player(fields, generate, stop)
                # Gradio's streaming player and its full clip: shown when the toggle says
                # "Standard" (the low-latency player has its own replay + download)
                with gr.Column(visible=False) as standard_outputs:
                    outputs = _standard_outputs()
                player.mode.change(
                    lambda mode: gr.update(visible=mode == STANDARD),
                    player.mode,
                    standard_outputs,
                    queue=False,
                    api_visibility="private",
                )
                outputs.append(build_stats_panel())
        if assets is not None:
            parts["examples"] = _examples(controls, voices, backend)
        inputs = [controls[name] for name in parameters.names]
        _wire_synthesis(
            slot, voices, parameters, inputs, outputs, player, stop, concurrency, library.owner
        )
        parts["timer"] = gr.Timer(1.0, active=_loading(info))
        wire_voice_library(
            demo, library, slot, voices, editable=_page_may_write(api), model_line=parts["status"]
        )
        wire_model_voice(
            model_voice,
            slot,
            voices,
            controls["text"],
            library.owner,
            outputs[1],
            editable=_page_may_write(api),
        )
        model_knobs = {knob: knob_controls[knob.name] for knob in parameters.knobs}
        model_voice_parts = model_voice_state(model_voice, info, set_values=False)
        refresh = {
            "fn": lambda: page_state(slot, parts, model_knobs, voices, model_voice),
            "outputs": {*parts.values(), *model_knobs.values(), *model_voice_parts},
            "queue": False,
            "show_progress": "hidden",
            "api_visibility": "private",
        }
        demo.load(**refresh)
        parts["timer"].tick(**refresh)
    return demo


def too_few_values(block_fn: Any, got: int) -> str:
    """ "/synthesize_full takes 20 values in this order: text, language, ...; got 11." (the
    names from the handler's signature, which tts_core.ui.handlers.bind gives each endpoint)."""
    wanted = len(block_fn.inputs)
    try:
        names = list(inspect.signature(block_fn.fn).parameters)[:wanted]
    except (TypeError, ValueError):  # no signature: the count alone
        names = []
    order = f" in this order: {', '.join(names)}" if len(names) == wanted else ""
    return (
        f"/{block_fn.api_name or block_fn.name} takes {wanted} values{order} (null: the "
        f"default); got {got}."
    )


def _page_may_write(api: ApiConfig | None) -> bool:
    """Save and Delete in the page write the voice store without a key: only on a server
    whose API needs none (with --api-key, voices are managed through /v1/audio/voices)."""
    return not (api and api.access.api_key)


def page_state(
    slot: EngineSlot,
    parts: dict[str, Any],
    model_knobs: dict[Knob, Any],
    voices: VoiceRegistry | None = None,
    model_voice: ModelVoiceInputs | None = None,
) -> dict:
    """What depends on the model, from the slot: {component: update}. `model_knobs`: each
    knob's control (shown: `offered_knobs`); `voices`: for the examples that fit the model;
    `model_voice`: the preset / instruction inputs (CustomVoice, VoiceDesign)."""
    info = slot.info()
    engine = served_engine(slot)
    backend = engine.backend if engine is not None else None
    model = model_dependent(info, backend)
    updates = {
        parts["status"]: status_html(info),
        parts["notice"]: gr.update(value=notice_html(info), visible=bool(info.get("notice"))),
        parts["reference"]: gr.update(label=model["reference"]),
        # a model whose language follows the text (VoxCPM2) has no use for the dropdown
        parts["language"]: gr.update(visible=info.get("reads_language", True)),
        parts["frames"]: model["frames"],
        parts["timer"]: gr.Timer(active=_loading(info)),  # polls until loading ended
    }
    updates[parts["transcript"]] = gr.update(visible=reads_transcript(backend))
    updates[parts["clone_voice"]] = gr.update(visible=_clones(info))
    if model_voice is not None:
        updates.update(model_voice_state(model_voice, info, set_values=not _loading(info)))
    if "examples" in parts and voices is not None and backend is not None:
        updates[parts["examples"]] = examples_update(voices, backend)
    served = knob_defaults(engine.backend) if engine is not None else {}
    offered = offered_knobs(engine)
    for knob, control in model_knobs.items():
        update: dict[str, Any] = {"visible": knob.name in offered}
        default = served.get(knob.name)
        # the model's default, once known (never over a user's edits while the timer polls)
        if default is not None and not _loading(info):
            update.update(_control_values(knob, default))
        updates[control] = gr.update(**update)
    return updates


def offered_knobs(engine: Engine | None) -> set[str]:
    """The knobs the page shows: those the served model reads (engine/knobs.py served_knobs);
    while it loads, the shared ones."""
    if engine is None:
        return set(SHARED_NAMES)
    return {knob.name for knob in served_knobs(engine.backend)}


def _clones(info: dict[str, Any]) -> bool:
    """The served checkpoint speaks from a clip (or it is still loading): the voice library."""
    return info.get("task_type", "Base") == "Base"


def _loading(info: dict[str, Any]) -> bool:
    return info["status"]["status"] not in ("ready", "failed")


def model_dependent(info: dict[str, Any], backend: object | None = None) -> dict[str, Any]:
    """Labels for slot.info() and the served backend (loading: generic ones); the reference's
    from the backend's declared needs (engine/backend.py ReferenceNeeds)."""
    needed = {True: " (required)", False: " (optional for this model)"}.get(
        info.get("needs_reference"),
        "",  # None while loading
    )
    frame_ms = info.get("frame_ms", 80)
    reads_frames = backend is None or "chunk_frames" in backend.capabilities.shared_knobs
    frames = f", and the chunk sizes in frames (1 frame = {frame_ms:g} ms of audio)"
    return {
        "reference": f"Reference clip: {reference_needs(backend).length_text()}{needed}",
        "frames": f"**Every model:** the seed{frames if reads_frames else ''}",
    }


def _voice_inputs(
    info: dict[str, Any],
    parts: dict[str, Any],
    controls: dict[str, Any],
    voices: VoiceRegistry,
    backend: object | None,
    editable: bool,
) -> Any:
    """Language and the voice library; adds their controls (by API name) to `controls`."""
    choices = [("Auto-detect", "auto")] + [(name.capitalize(), name) for name in LANGUAGES]
    controls["language"] = gr.Dropdown(
        choices,
        value="auto",
        label="Language",
        allow_custom_value=True,
        elem_id="language",
        visible=info.get("reads_language", True),
    )
    parts["language"] = controls["language"]
    with gr.Column(elem_id="clone-voice", visible=_clones(info)) as parts["clone_voice"]:
        library = build_voice_library(
            model_dependent(info, backend)["reference"], editable, voices.private, voices, backend
        )
    parts["reference"] = library.reference
    controls.update(
        reference=library.reference, reference_text=library.transcript, voice=library.voice
    )
    return library


def _knob_controls(
    knobs: tuple[Knob, ...], engine: Engine | None, info: dict[str, Any], parts: dict[str, Any]
) -> dict[str, Any]:
    """A control per knob, by name, made from its declaration: the backends' own first, then
    the shared ones; only those the served model reads show (while it loads: the shared)."""
    served = knob_defaults(engine.backend) if engine is not None else {}
    offered = offered_knobs(engine)
    controls = {}
    for knob in knobs:
        if knob.name not in SHARED_NAMES:
            controls[knob.name] = _control(knob, served.get(knob.name), knob.name in offered)
    backend = engine.backend if engine is not None else None
    parts["frames"] = gr.Markdown(model_dependent(info, backend)["frames"])
    for knob in knobs:
        if knob.name in SHARED_NAMES:
            controls[knob.name] = _control(knob, None, knob.name in offered)
    return controls


def _control(knob: Knob, default: Any, visible: bool) -> gr.components.Component:
    """A slider (or a number box) for `knob`: its label, help text, range and step."""
    common = {
        "label": knob.label or knob.name,
        "info": knob.help or None,
        "visible": visible,
        "elem_id": "knob-" + knob.name.replace("_", "-"),
    }
    if knob.control == "number":
        return gr.Number(knob.initial(default), precision=0 if knob.kind is int else None, **common)
    values = _control_values(knob, default)
    return gr.Slider(
        values["minimum"], values["maximum"], values["value"], step=knob.slider_step(), **common
    )


def _control_values(knob: Knob, default: Any) -> dict[str, Any]:
    """A slider's value and range: the slider's declared range, widened to hold a default
    (the model's own) that lies outside it, or Gradio would refuse every request."""
    value = knob.initial(default)
    low, high = knob.slider_range()
    if knob.control == "number":
        return {"value": value}
    return {"value": value, "minimum": min(low, value), "maximum": max(high, value)}


def _standard_outputs() -> list:
    live = gr.Audio(
        label="Live audio", streaming=True, autoplay=True, interactive=False, elem_id="live-audio"
    )
    full = gr.Audio(
        label="Full clip (download)", type="numpy", interactive=False, elem_id="full-audio"
    )
    return [live, full]


def _wire_synthesis(
    slot: EngineSlot,
    voices: VoiceRegistry,
    parameters: handlers.ApiParameters,
    inputs: list,
    outputs: list,
    player: Any,
    stop: gr.Button,
    concurrency: int,
    owner: gr.BrowserState,
) -> None:
    """The standard player's event and the API-only endpoints, on one concurrency pool;
    `inputs`: the controls of `parameters.names`, in that order; `owner`: the browser's key
    (the page's own event uses the voices it may see; the API's have no key)."""

    pool = {
        "concurrency_id": CONCURRENCY_ID,
        "concurrency_limit": concurrency,
        "show_progress": "minimal",
    }

    # Generate runs the low-latency player in the browser; the page clicks this hidden
    # trigger instead when the player toggle says "Standard" (one synthesis per click).
    # "always_last": a click while the last run is still pending (its clip shown, its
    # completion not yet received) runs after it; Gradio's default "once" dropped it.
    generating = player.standard_trigger.click(
        handlers.bind_page(slot, voices, parameters),
        inputs=[*inputs, owner],
        outputs=outputs,
        api_name="generate",
        api_visibility="private",
        trigger_mode="always_last",
        **pool,
    )
    stop.click(None, None, None, cancels=[generating])
    # API-only endpoints: a hidden button that no one clicks, so they run only when called;
    # their knobs are inputs of their own (`_api_knob_input`), the other fields the page's
    api_only = gr.Button(visible=False)
    declared = {knob.name: knob for knob in parameters.knobs}
    api_inputs = [
        _api_knob_input(declared[name])
        if name in declared
        else _api_voice_input()
        if name == "voice"
        else _api_text_input(name)
        if name in handlers.MODEL_VOICE_FIELDS
        else control
        for name, control in zip(parameters.names, inputs, strict=True)
    ]
    for fn, audio_label, api_name in (
        (handlers.stream_to_api, "chunk", "synthesize"),
        (handlers.synthesize_full, "audio", "synthesize_full"),
    ):
        api_only.click(
            handlers.bind(fn, slot, voices, parameters),
            inputs=api_inputs,
            outputs=[
                gr.Audio(type="numpy", visible=False, label=audio_label),
                gr.JSON(visible=False, label="stats"),
            ],
            api_name=api_name,
            api_visibility="public",
            **pool,
        )


def _api_voice_input() -> gr.Dropdown:
    """The API-only endpoints' `voice`: none unless the caller names one (the page's picker
    starts on a built-in voice, which would replace a caller's reference clip)."""
    return gr.Dropdown(
        [(UPLOAD_LABEL, UPLOAD)],
        value=UPLOAD,
        label="Voice",
        visible=False,
        allow_custom_value=True,
    )


def _api_text_input(name: str) -> gr.Textbox:
    """The API-only endpoints' `speaker` / `instructions`: none unless the caller gives one
    (the page's picker starts on the checkpoint's first preset)."""
    return gr.Textbox(None, label=name, visible=False)


def _api_knob_input(knob: Knob) -> gr.Number:
    """A knob's parameter of the API-only endpoints: no value (left out: the served backend's
    default, not what a slider showed) and no slider bounds (Knob.parse checks the range)."""
    return gr.Number(None, label=knob.label or knob.name, visible=False)


def example_rows(voices: VoiceRegistry, backend: object | None) -> tuple[list, list[str]]:
    """(rows [text, language, voice], labels) of the EXAMPLES whose built-in voice exists and
    fits `backend` (None: not loaded yet, all do); none on a checkpoint that makes its own
    voices (its instruction box has examples of its own)."""
    rows, labels = [], []
    if getattr(backend, "task_type", "Base") != "Base":
        return rows, labels
    for label, text, language, name in EXAMPLES:
        try:
            voice = voices.get(name)
        except VoiceNotFound:
            continue
        if voice.kind == "builtin" and fits(voice, backend):
            rows.append([text, language, name])
            labels.append(label)
    return rows, labels


def examples_update(voices: VoiceRegistry, backend: object | None) -> gr.Dataset:
    rows, labels = example_rows(voices, backend)
    return gr.Dataset(samples=rows, sample_labels=labels, visible=bool(rows))


def _examples(
    controls: dict[str, Any], voices: VoiceRegistry, backend: object | None
) -> gr.Dataset:
    """The examples: a text, its language and a built-in voice each (only those that fit the
    served model; page_state follows the model once it has loaded). A click fills them in."""
    rows, labels = example_rows(voices, backend)
    names = ("text", "language", "voice")
    dataset = gr.Dataset(
        components=[controls[name] for name in names],
        samples=rows,
        sample_labels=labels,
        label="Examples",
        elem_id="examples",
        visible=bool(rows),
        type="values",
    )

    def load_example(row: list) -> tuple:  # the page's own event (private), by index
        return tuple(row)

    dataset.click(
        load_example,
        dataset,
        [controls[name] for name in names],
        queue=False,
        show_progress="hidden",
        api_visibility="private",
    )
    return dataset


def count_html(max_chars: int) -> str:
    """The text count line (page.js fills in the count as the visitor types)."""
    return f'<p class="text-count" data-max="{max_chars}">Up to {max_chars} characters</p>'


def _static(name: str) -> str:
    return (Path(__file__).resolve().parent / "static" / name).read_text()
