"""The page's voice library: pick a built-in or saved voice, save the current clip as a voice,
delete a voice this browser saved.

The same VoiceRegistry as /v1/audio/voices. A browser is known by its owner key, a random
secret kept in its localStorage (gr.BrowserState; the registry stores its digest); voices
registered through the API have no owner, so the page cannot delete them. Saving and deleting
say so in a line under the picker, not in a toast, which would cover the player's status.
These events are the page's own ("private": EventGuard answers a call by name with 404).
"""

from __future__ import annotations

import logging
import secrets
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import gradio as gr

from ..audio import SAMPLE_RATE
from ..engine import BackendError, Engine, EngineBusy, EngineSlot, InputError, Limits
from ..engine.backend import reference_needs
from ..engine.validation import prepare_reference
from ..server.route_utils import served_engine
from ..server.state import OWNER_KEY_CHARS
from ..server.voice_fit import fits, starting_voice
from ..server.voices import NamedVoice, Viewer, VoiceNotFound, VoiceRegistry, VoiceStoreError

log = logging.getLogger(__name__)

UPLOAD = ""  # the dropdown's "Upload or record a clip" entry (no named voice)
UPLOAD_LABEL = "Upload or record a clip"
OWNER_STORAGE_KEY = "tts-core-voice-owner"
_warming = threading.Semaphore(1)  # (a burst of saves warms the first; the rest warm on use)
# BrowserState encrypts what it keeps with this "secret", which the page receives anyway: a
# fixed one keeps the key readable after a server restart (a random one would not), so a
# browser keeps owning its voices.
OWNER_SECRET = "tts-core-owner-key"


@dataclass
class VoiceLibrary:
    voice: gr.Dropdown  # UPLOAD or a voice name: the make_request `voice` input
    reference: gr.Audio  # the clip (UPLOAD only)
    transcript: gr.Textbox  # what the clip says (optional)
    owner: gr.BrowserState  # this browser's owner key
    upload_box: gr.Column  # clip + transcript + save row, shown for UPLOAD only
    name: gr.Textbox
    save: gr.Button
    about: gr.Markdown  # the picked voice's description
    delete: gr.Button
    note: gr.Markdown  # what the last save or delete did (until the visitor picks a voice)


def build_voice_library(
    reference_label: str,
    editable: bool = True,
    private: bool = False,
    voices: VoiceRegistry | None = None,
    backend: object | None = None,
) -> VoiceLibrary:
    """The voice inputs: a dropdown of voices (filled per browser on page load: the ones that
    fit the served model), starting on a built-in recording that fits it (`starting_voice`),
    and for "Upload or record a clip" the clip, its transcript and (when `editable`) a row to
    save them as a voice. Saved voices are listed to every visitor of the server, or with
    `private` to the browser that saved them only."""
    shared = (
        "Only this browser will see the voices it saves."
        if private
        else "Saved voices are listed to everyone using this server."
    )
    owner = gr.BrowserState("", storage_key=OWNER_STORAGE_KEY, secret=OWNER_SECRET)
    start = start_voice(voices, backend) if voices is not None else UPLOAD
    listed = choices(voices, None, backend) if voices is not None else [(UPLOAD_LABEL, UPLOAD)]
    # allow_custom_value: an API caller may name a voice registered after the page was built
    voice = gr.Dropdown(
        listed, value=start, label="Voice", allow_custom_value=True, elem_id="voice"
    )
    with gr.Column(elem_id="upload-box", visible=start == UPLOAD) as upload_box:
        reference = gr.Audio(
            None,
            sources=["upload", "microphone"],
            type="filepath",
            label=reference_label,
            elem_id="reference",
        )
        transcript = gr.Textbox(
            "", label="Transcript of the clip (optional)", lines=1, elem_id="reference-text"
        )
        with gr.Row(equal_height=True, visible=editable):
            name = gr.Textbox(
                placeholder="Name it, e.g. my-voice",
                show_label=False,
                scale=3,
                info=shared,
                max_length=64,
                elem_id="voice-name",
            )
            save = gr.Button("Save this voice", size="md", scale=2, elem_id="save-voice")
    with gr.Row(equal_height=True):
        picked = voices.get(start) if voices is not None and start else None
        about = gr.Markdown(
            about_text(picked) if picked else "", visible=picked is not None, elem_id="voice-about"
        )
        delete = gr.Button(
            "Delete voice",
            variant="stop",
            size="sm",
            visible=False,
            scale=0,
            min_width=120,
            elem_id="delete-voice",
        )
    note = gr.Markdown(visible=False, elem_id="voice-note")
    return VoiceLibrary(
        voice, reference, transcript, owner, upload_box, name, save, about, delete, note
    )


def wire_voice_library(
    demo: gr.Blocks,
    lib: VoiceLibrary,
    slot: EngineSlot,
    voices: VoiceRegistry,
    editable: bool = True,
    model_line: gr.HTML | None = None,
) -> None:
    """Events: page load (and a change of `model_line`: the model loaded) -> this browser's list
    (and key); pick; an uploaded or recorded clip checked at once; save and delete (only
    when `editable`: a server whose API needs a key does not let the page write the store)."""

    def refresh(owner_key: str) -> tuple:
        """On page load: this browser's key and the voices that fit the served model; the
        value only where the starting voice is no longer the page's (a visitor's pick made
        meanwhile is kept)."""
        owner_key = usable_key(owner_key)  # made once per browser
        backend = served_backend(slot)
        update = {"choices": choices(voices, owner_key, backend)}
        if (start := start_voice(voices, backend)) != lib.voice.value:
            update["value"] = start
        return owner_key, gr.update(**update)

    def follow_model(owner_key: str, current: str | None) -> tuple:
        """Once the model is known: the voices that fit it (the picked one kept when it still
        fits, else the starting voice)."""
        backend = served_backend(slot)
        if backend is None:  # still loading
            return gr.skip(), gr.skip()
        owner_key = usable_key(owner_key)
        listed = choices(voices, owner_key, backend)
        keep = current in {name for _, name in listed}
        value = current if keep else start_voice(voices, backend)
        return owner_key, gr.update(choices=listed, value=value)

    def check_clip(clip: str | None) -> tuple:
        problem = clip_problem(slot, clip)
        if problem is None:
            return gr.skip(), gr.update(visible=False)
        return None, show_note(f"This clip was not taken: {problem}")

    def pick(name: str, owner_key: str) -> tuple:
        return show_picked(voices, name, owner_key, may_delete=editable)

    def save(name: str, clip: str | None, text: str, owner_key: str) -> tuple:
        owner_key = usable_key(owner_key)
        try:
            saved = save_voice(slot, voices, (name or "").strip(), clip, text, owner_key)
        except gr.Error as exc:
            return gr.skip(), gr.skip(), owner_key, show_note(f"Not saved: {exc.message}")
        where = "" if voices.private else ", and the API knows it too"
        return (
            gr.update(choices=choices(voices, owner_key), value=saved),
            "",
            owner_key,
            show_note(f"Saved the voice '{saved}': it is selected now{where}."),
        )

    def delete(name: str, owner_key: str) -> tuple:
        try:
            delete_voice(voices, name, owner_key)
        except gr.Error as exc:
            return gr.skip(), show_note(f"Not deleted: {exc.message}")
        return (
            gr.update(choices=choices(voices, owner_key), value=UPLOAD),
            show_note(f"Deleted the voice '{name}'."),
        )

    # what save and delete did (or why not) shows in the note, not in a toast
    private = {"api_visibility": "private", "show_progress": "hidden"}
    demo.load(refresh, lib.owner, [lib.owner, lib.voice], queue=False, **private)
    if model_line is not None:  # the list once the model is known: its line says so first
        model_line.change(
            follow_model, [lib.owner, lib.voice], [lib.owner, lib.voice], queue=False, **private
        )
    # a clip that cannot serve (not audio, silent, too short for the model) is refused at once
    for event in (lib.reference.upload, lib.reference.stop_recording):
        event(check_clip, lib.reference, [lib.reference, lib.note], queue=False, **private)
    lib.voice.change(
        pick,
        [lib.voice, lib.owner],
        [lib.upload_box, lib.about, lib.delete],
        queue=False,
        **private,
    )
    if not editable:
        return
    # the note stays until the visitor picks a voice (input: not when a save or delete sets it)
    lib.voice.input(lambda: gr.update(visible=False), None, lib.note, queue=False, **private)
    lib.save.click(
        save,
        [lib.name, lib.reference, lib.transcript, lib.owner],
        [lib.voice, lib.name, lib.owner, lib.note],
        **private,
    )
    lib.delete.click(delete, [lib.voice, lib.owner], [lib.voice, lib.note], **private)


def usable_key(owner_key: object) -> str:
    """The browser's owner key, or a new one when it has none (its first visit) or one that
    the page's routes would refuse (not a string of 16-256 characters: a damaged storage)."""
    low, high = OWNER_KEY_CHARS
    if isinstance(owner_key, str) and low <= len(owner_key) <= high:
        return owner_key
    return secrets.token_urlsafe(24)


def choices(
    voices: VoiceRegistry, owner_key: str | None, backend: object | None = None
) -> list[tuple[str, str]]:
    """(label, name) for the dropdown: upload first, then built-in and saved voices (with
    private voices: the ones `owner_key` saved); damaged ones and those whose clip does not
    fit `backend` (voice_fit.py; None: not loaded yet, all fit) are left out (they cannot
    speak)."""
    listed = [(UPLOAD_LABEL, UPLOAD)]
    for voice in voices.list(Viewer(owner_key=owner_key or None)):
        if voice.status != "ok" or not fits(voice, backend):
            continue
        if voice.kind == "builtin":
            label = f"{voice.name} (built-in)"
        else:
            label = f"{voice.name} (saved by you)" if voice.owned_by(owner_key) else voice.name
        listed.append((label, voice.name))
    return listed


def show_picked(
    voices: VoiceRegistry, name: str, owner_key: str | None, may_delete: bool = True
) -> tuple:
    """Updates for (upload box, about, delete): the upload box for UPLOAD, else what the
    voice is (one `owner_key` may see), and Delete for a voice this browser saved (when
    `may_delete`)."""
    hidden = gr.update(visible=False)
    if not name:
        return gr.update(visible=True), hidden, hidden
    try:
        voice = voices.get(name, Viewer(owner_key=owner_key or None))
    except VoiceNotFound:
        missing = f"There is no voice named '{plain(name)}'."
        return hidden, gr.update(value=missing, visible=True), hidden
    owned = voice.owned_by(owner_key)
    return (
        hidden,
        gr.update(value=about_text(voice, owned, voices.private), visible=True),
        gr.update(visible=owned and may_delete),
    )


def about_text(voice: NamedVoice, owned: bool = False, private: bool = False) -> str:
    """What the picked voice is: its description (or whose it is) and its clip's words."""
    if owned:
        whose = "Saved from this browser" + (": no one else sees it." if private else ".")
    else:
        whose = "Saved from another browser or through the API: you can use it, not delete it."
    lines = [voice.description or whose]
    if voice.transcript:  # anyone's words: shown as text, never as Markdown or HTML
        lines.append(f"Its clip says: “{plain(voice.transcript)}”")
    return "  \n".join(lines)


def served_backend(slot: EngineSlot) -> object | None:
    """The served backend; None while the model loads (or after it failed)."""
    engine = served_engine(slot)
    return engine.backend if engine is not None else None


def start_voice(voices: VoiceRegistry, backend: object | None) -> str:
    """The voice the page starts on: a built-in recording that fits the served model (a
    first Generate that works), else the upload entry."""
    return starting_voice(voices.list(Viewer()), backend) or UPLOAD


def clip_problem(slot: EngineSlot, clip: str | None) -> str | None:
    """Why an uploaded or recorded clip cannot serve (not audio, empty, silent, too short, or
    not what the served model asks: engine/backend.py ReferenceNeeds); None: it can, or there
    is no clip."""
    if not clip:
        return None
    engine = served_engine(slot)
    limits = engine.config.limits if engine is not None else Limits()
    try:
        audio, _ = prepare_reference(clip, limits)
    except InputError as exc:
        return str(exc).removeprefix("Reference clip: ")
    if audio is None or engine is None:
        return None
    return reference_needs(engine.backend).why_not(audio.size / SAMPLE_RATE)


def show_note(text: str) -> dict:
    """The note under the picker, showing `text` (anyone's words: as plain text)."""
    return gr.update(value=plain(text), visible=True)


def plain(text: str) -> str:
    """`text` for gr.Markdown with every Markdown and HTML character escaped."""
    return "".join(f"\\{c}" if c in _MARKUP else c for c in text)


_MARKUP = set("\\`*_[]<>!&~|")  # inline Markdown and HTML (the text never starts a line)


def save_voice(
    slot: EngineSlot,
    voices: VoiceRegistry,
    name: str,
    clip: str | bytes | tuple | None,
    transcript: str | None,
    owner_key: str,
) -> str:
    """Register the clip under `name` (owned by `owner_key`) and warm it up in the background;
    returns the name."""
    if not clip:
        raise gr.Error("Upload or record a clip first, then save it as a voice.")
    with voice_errors():
        engine = slot.engine
        saved = voices.register(
            name, clip, transcript or None, limits=engine.config.limits, owner_key=owner_key
        )
    cloning = getattr(engine.backend, "task_type", "Base") == "Base"  # else: nothing to warm
    if cloning and _warming.acquire(blocking=False):  # one at a time, outside admission: skip
        threading.Thread(target=_warm, args=(engine, voices, saved.name), daemon=True).start()
    return saved.name


def delete_voice(voices: VoiceRegistry, name: str, owner_key: str | None) -> None:
    """Delete `name` if the browser with `owner_key` saved it (gr.Error otherwise)."""
    with voice_errors():
        voices.delete(name, owner_key=owner_key, check_owner=True)


def _warm(engine: Engine, voices: VoiceRegistry, name: str) -> None:
    """Build the voice's prompt now, from the stored clip (as every request will read it), so
    the first request with it starts at once."""
    try:
        voice, clip = voices.load(name)
        engine.prepare_voice((SAMPLE_RATE, clip), voice.transcript)
    except Exception:  # noqa: BLE001 - a warm-up only: the first request will report it
        log.exception("could not prepare the saved voice %s", name)
    finally:
        _warming.release()


@contextmanager
def voice_errors() -> Iterator[None]:
    """The registry's refusals -> gr.Error with its message; anything else -> a short one (an
    OSError's text would show a server path)."""
    try:
        yield
    except gr.Error:
        raise
    except VoiceNotFound as exc:
        raise gr.Error(
            f"There is no voice named '{exc.args[0]}' (any more).", print_exception=False
        ) from None
    except VoiceStoreError as exc:
        raise gr.Error(exc.message, print_exception=False) from None
    except (InputError, EngineBusy, BackendError) as exc:
        raise gr.Error(str(exc), print_exception=False) from None
    except Exception as exc:  # noqa: BLE001 - never a stack trace or a path in the page
        own = isinstance(exc, PermissionError | FileExistsError)
        if own and exc.errno is None and exc.filename is None:  # the registry's: a message only
            raise gr.Error(str(exc), print_exception=False) from None
        log.exception("voice store error")
        raise gr.Error("The voice store failed; see the server log.") from None


# --- The checkpoint's own voices (Qwen3-TTS CustomVoice / VoiceDesign, #41) -----------------

# Examples for the instruction box (CustomVoice: how to speak) and the description box
# (VoiceDesign: the voice itself); a click fills the box in
INSTRUCTION_EXAMPLES = (
    "Speak in a cheerful, excited tone.",
    "Whisper, slowly and calmly, as if telling a secret.",
    "Sound tired and a little sad.",
)
DESCRIPTION_EXAMPLES = (
    "A warm, deep male voice, middle-aged, speaking slowly and calmly.",
    "A bright young female voice, energetic and cheerful, speaking quickly.",
    "An elderly man with a gravelly voice, telling a story by the fire.",
)
NO_INSTRUCTIONS = (
    "This checkpoint does not follow instructions (the 0.6B CustomVoice: the "
    "official model ignores them, so they are refused here)."
)
DESIGN_NOTE = (
    "**Save this voice** stores the last result's audio and the text it speaks as a "
    "clone voice in this server's voice store (listed by /v1/audio/voices): a Base "
    "model served elsewhere from the same store clones it; this model cannot."
)
# the save's input: the low-latency player's last WAV (its download link, a blob: URL), read
# as a data: URL in the browser; empty when it has none (the standard player's clip is used)
READ_LAST_WAV = """async (name, text, clip, owner, full) => {
  const link = document.querySelector('#lowlatency-player [data-ll="download"]');
  let data = "";
  if (link && !link.hidden && link.href) {
    const blob = await (await fetch(link.href)).blob();
    data = await new Promise((done) => {
      const reader = new FileReader();
      reader.onload = () => done(reader.result);
      reader.readAsDataURL(blob);
    });
  }
  return [name, text, data, owner, full];
}"""


@dataclass
class ModelVoiceInputs:
    """The voice inputs of a checkpoint that makes its own voices (shown in place of the
    library on CustomVoice / VoiceDesign; hidden on a cloning model)."""

    box: gr.Column
    speaker: gr.Dropdown  # CustomVoice: the checkpoint's presets (engine info "speakers")
    instructions: gr.Textbox  # CustomVoice: how to speak; VoiceDesign: the voice's description
    examples: gr.Dataset
    design_box: gr.Column  # VoiceDesign only: save the result as a clone voice
    name: gr.Textbox
    save: gr.Button
    clip: gr.Textbox  # hidden: the low-latency player's last WAV as a data: URL (READ_LAST_WAV)
    note: gr.Markdown


def build_model_voice(info: dict) -> ModelVoiceInputs:
    """The speaker picker, the instruction / description box with examples, and (VoiceDesign)
    the save row, made as `model_voice_spec` says for `info` (slot.info(); page_state follows
    the model once it has loaded: `model_voice_state`)."""
    spec = model_voice_spec(info)
    with gr.Column(elem_id="model-voice", visible=spec["box"]) as box:
        speaker = gr.Dropdown(
            spec["speakers"],
            value=spec["speaker"],
            label="Preset voice",
            elem_id="speaker",
            visible=spec["custom"],
            allow_custom_value=True,
        )
        instructions = gr.Textbox("", lines=2, elem_id="instructions", **spec["instructions"])
        examples = gr.Dataset(
            components=[instructions],
            samples=spec["samples"] or [[""]],
            label="Examples",
            elem_id="instruction-examples",
            type="values",
            visible=bool(spec["samples"]),
        )
        with gr.Column(visible=spec["design"], elem_id="design-save") as design_box:
            gr.Markdown(DESIGN_NOTE, elem_id="design-note")
            with gr.Row(equal_height=True):
                name = gr.Textbox(
                    placeholder="Name it, e.g. calm-narrator",
                    show_label=False,
                    scale=3,
                    max_length=64,
                    elem_id="design-name",
                )
                save = gr.Button("Save this voice", size="md", scale=2, elem_id="save-design")
            clip = gr.Textbox("", visible=False)
            note = gr.Markdown(visible=False, elem_id="design-result")
    return ModelVoiceInputs(
        box, speaker, instructions, examples, design_box, name, save, clip, note
    )


def model_voice_spec(info: dict) -> dict:
    """What the page shows for the served checkpoint (info's task_type, speakers and
    instruct_supported; while loading, or a cloning model: nothing)."""
    task = info.get("task_type", "Base")
    custom, design = task == "CustomVoice", task == "VoiceDesign"
    speakers = list(info.get("speakers") or ()) if custom else []
    allowed = bool(info.get("instruct_supported", True))
    instructions: dict = {
        "label": "Instructions",
        "visible": custom or design,
        "interactive": True,
        "info": None,
        "placeholder": None,
    }
    if custom:
        instructions.update(
            label="Instructions (optional): how to speak",
            interactive=allowed,
            info=None if allowed else NO_INSTRUCTIONS,
            placeholder="e.g. " + INSTRUCTION_EXAMPLES[0],
        )
    elif design:
        instructions.update(
            label="Describe the voice", placeholder="e.g. " + DESCRIPTION_EXAMPLES[0]
        )
    samples = (
        [[x] for x in INSTRUCTION_EXAMPLES]
        if custom and allowed
        else [[x] for x in DESCRIPTION_EXAMPLES]
        if design
        else []
    )
    return {
        "box": custom or design,
        "custom": custom,
        "design": design,
        "speakers": speakers,
        "speaker": speakers[0] if speakers else None,
        "instructions": instructions,
        "samples": samples,
    }


def model_voice_state(inputs: ModelVoiceInputs, info: dict, set_values: bool) -> dict:
    """{component: update} for the served checkpoint (`model_voice_spec`). `set_values`: also
    the picker's first preset (not over a visitor's pick while the page polls)."""
    spec = model_voice_spec(info)
    speaker: dict = {"choices": spec["speakers"], "visible": spec["custom"]}
    if set_values:
        speaker["value"] = spec["speaker"]
    return {
        inputs.box: gr.update(visible=spec["box"]),
        inputs.speaker: gr.update(**speaker),
        inputs.instructions: gr.update(**spec["instructions"]),
        inputs.examples: gr.Dataset(
            samples=spec["samples"] or [[""]], visible=bool(spec["samples"])
        ),
        inputs.design_box: gr.update(visible=spec["design"]),
    }


def wire_model_voice(
    inputs: ModelVoiceInputs,
    slot: EngineSlot,
    voices: VoiceRegistry,
    text: gr.Textbox,
    owner: gr.BrowserState,
    full_clip: gr.Audio,
    editable: bool,
) -> None:
    """An example click fills the box; Save this voice (VoiceDesign) stores the last result
    and its text as a clone voice (the page's own, private events)."""
    private = {"api_visibility": "private", "show_progress": "hidden"}
    inputs.examples.click(
        lambda row: row[0], inputs.examples, inputs.instructions, queue=False, **private
    )
    inputs.save.visible = editable
    if not editable:
        return

    def save(name: str, spoken: str, data_url: str, owner_key: str, full: object) -> tuple:
        owner_key = usable_key(owner_key)
        clip = designed_clip(data_url, full)
        if clip is None:
            return owner_key, show_note("Not saved: generate a voice first, then save it.")
        try:
            saved = save_voice(slot, voices, (name or "").strip(), clip, spoken, owner_key)
        except gr.Error as exc:
            return owner_key, show_note(f"Not saved: {exc.message}")
        return owner_key, show_note(
            f"Saved the voice '{saved}' (the last result and its text) in this server's voice "
            "store: a Base model served from the same store clones it."
        )

    inputs.save.click(
        save,
        [inputs.name, text, inputs.clip, owner, full_clip],
        [owner, inputs.note],
        js=READ_LAST_WAV,
        **private,
    )


def designed_clip(data_url: str | None, full: object) -> bytes | tuple | None:
    """The clip to save: the low-latency player's WAV (a data: URL), else the standard
    player's full clip ((rate, samples)); None when there is neither."""
    if isinstance(data_url, str) and data_url.startswith("data:") and "," in data_url:
        import base64

        return base64.b64decode(data_url.split(",", 1)[1])
    if isinstance(full, tuple) and len(full) == 2 and full[1] is not None:
        return full
    return None
