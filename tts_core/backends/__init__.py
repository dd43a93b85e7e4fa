"""Voice backends and the loader that picks one (with the offline fallback)."""

from __future__ import annotations

import logging
from collections.abc import Callable

from ..engine.backend import Backend, Notice
from ..engine.engine import Engine
from ..engine.errors import redact_paths
from ..engine.knobs import Knob, backend_knobs, merge_knobs, shared_knobs
from ..engine.loading import FALLING_BACK
from ..engine.validation import Limits

log = logging.getLogger(__name__)

ESPEAK = "espeak"
Report = Callable[..., None]  # EngineSlot.report(phase, done=, total=, unit=)


def load_backend(
    name: str,
    device: str = "auto",
    allow_fallback: bool = True,
    dtype: str = "auto",
    quantize: str = "auto",
    max_batch: int | None = None,
    report: Report | None = None,
    cuda_graphs: str = "auto",
) -> tuple[Backend, Notice | None]:
    """(backend, notice). `name`: "espeak", a Hub repo id or local folder of a checkpoint of a
    model in MODEL_SPECS (detected from its config.json or files, not from the name), or an
    http(s)://HOST:PORT/v1 server (remote.py). `dtype`, `quantize` and `cuda_graphs` go to the
    backends whose spec takes them (`ModelSpec.backend_options`), `max_batch` (None: its
    default) to every one; `report` hears of the download and loading. A model that cannot be
    loaded is, with `allow_fallback`, the eSpeak voice with a notice saying why (logged too).
    """
    if name == ESPEAK:
        return _espeak(), None
    try:
        options = dict(dtype=dtype, quantize=quantize, cuda_graphs=cuda_graphs, max_batch=max_batch)
        return _neural(name, device, options, report), None
    except Exception as exc:  # noqa: BLE001 - any load failure means "use the offline voice"
        if not allow_fallback:
            raise
        notice = explain_load_failure(name, exc)
        log.warning(
            "Could not load model %r (%s: %s); falling back to the offline eSpeak voice.",
            name,
            type(exc).__name__,
            exc,
        )
        if report is not None:
            report(FALLING_BACK)  # the status names what is starting now, not the lost model
        return _espeak(), notice


def backend_classes() -> tuple[type, ...]:
    """The backends of MODEL_SPECS (models/specs.py), then eSpeak's, for what they declare (their
    `knobs`). Importing them loads no model and no torch."""
    from ..models.specs import model_specs
    from .espeak import EspeakBackend

    return (*(spec.backend_class() for spec in model_specs()), EspeakBackend)


def request_knobs(engine: Engine | None = None) -> tuple[Knob, ...]:
    """Every knob a request may carry, each once: the shared ones (with `engine`'s chunk limit),
    every backend_classes()' and the served backend's (whose declaration of a name wins). The
    routes and the page check all of them, so a request means the same whichever model is
    served; each backend reads only its own, the engine leaves out the rest."""
    limits = engine.config.limits if engine is not None else Limits()
    served = backend_knobs(engine.backend) if engine is not None else ()
    taken = {knob.name for knob in served}
    known = [[knob for knob in cls.knobs if knob.name not in taken] for cls in backend_classes()]
    return merge_knobs(shared_knobs(limits.max_chunk_frames), *known, served)


def explain_load_failure(name: str, exc: BaseException) -> Notice:
    """A load error in words a visitor understands, and how to get the real voice."""
    first_line = (str(exc).strip().splitlines() or [""])[0]
    details = f"{type(exc).__name__}: {redact_paths(first_line[:400])}"  # the log: whole
    text = str(exc)
    if name.lower().startswith(("http://", "https://")):  # --model URL: a remote server
        what = f"The remote speech server {name} could not be used ({details})."
        fix = "start that server (or correct the URL given to --model) and restart this one."
    elif "no network connection" in text or "ConnectError" in text or "Name or service" in text:
        what = f"The voice-cloning model ({name}) could not be downloaded: this machine cannot "
        what += "reach the Hugging Face Hub, and the model is not in its local cache."
        fix = "connect this machine to the internet and restart the app, or start it with "
        fix += "--model /path/to/a/downloaded/checkpoint."
    elif "no such repository" in text or "checkpoint folder not found" in text:
        what = f"The voice-cloning model '{name}' was not found (no such local folder or Hub "
        what += "repository, or it is private)."
        fix = "check the name given to --model (a Hub repo id such as "
        fix += "Qwen/Qwen3-TTS-12Hz-0.6B-Base, or a local folder)."
    elif isinstance(exc, MemoryError) or "out of memory" in text.lower():
        what = f"The voice-cloning model ({name}) did not fit in this machine's memory."
        fix = "use a smaller model (the 0.6B one), --quantize int8, or a larger machine."
    else:
        what = f"The voice-cloning model ({name}) could not be loaded."
        fix = "see the details below and the server log, then restart the app."
    summary = (
        f"{what} You are hearing the built-in eSpeak NG voice instead: it reads the "
        f"text aloud but does not imitate the reference voice. To get the real voice, "
        f"{fix}"
    )
    return Notice(summary, details)


def _neural(name: str, device: str, options: dict, report: Report | None) -> Backend:
    """The backend of checkpoint or server `name`; `options`: load_backend's, by name."""
    from ..models.config_json import one_read
    from ..models.download import LOADING, reporting_to
    from ..models.registry import REMOTE, detect_architecture
    from ..models.specs import spec_of

    report = report or (lambda *args, **kwargs: None)
    report(LOADING)
    # config.json read once for the detection and the model's configs; a download reports
    with reporting_to(report), one_read():
        architecture = detect_architecture(name)
        if architecture == REMOTE:  # http(s)://HOST:PORT/v1: another server's /v1 speaks
            from .remote import RemoteBackend

            return RemoteBackend.connect(name)
        return spec_of(architecture).load_backend(name, device, options)


def _espeak() -> Backend:
    from .espeak import EspeakBackend

    backend = EspeakBackend()
    backend.warm_up()
    return backend
