"""HTTP routes served by the same process as the Gradio page.

`install_routes(app, engine_or_slot, voices=None, config=None)` adds
    POST   /v1/audio/speech           OpenAI-compatible speech (streamed)
    GET    /v1/audio/voices           built-in + registered voices (private ones: the caller's)
    POST   /v1/audio/voices           register a named voice (multipart: name, file, transcript)
    DELETE /v1/audio/voices/{name}
    GET    /v1/models                 the served model and its loading status
    POST   /tts_stream/pcm            raw PCM frames for the page's low-latency player
    WS     /tts_stream/text           the page's text fed word by word -> PCM (page_text_ws.py)
to a FastAPI app. They take the engine from the slot per request, so they share its admission
with the page and answer 503 + Retry-After while the model loads.

The page (`tts_core.ui.build_demo`) serves them itself when launched; to mount Gradio in
your own FastAPI app instead:

    app = FastAPI(); install_routes(app, engine, voices)
    app = gr.mount_gradio_app(app, build_demo(engine, voices), path="/")

Routes may also be added to an app that is already serving (Gradio's): Starlette looks its
route list up per request, and Gradio has no catch-all route.
"""

from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path

from fastapi import APIRouter

from ..engine import Engine, EngineSlot
from .access import AccessPolicy
from .state import ApiConfig, ServerState, as_slot, default_voices_dir
from .voices import VoiceRegistry

ASSETS = Path(__file__).resolve().parents[2] / "assets"

__all__ = [
    "AccessPolicy",
    "ApiConfig",
    "ServerState",
    "VoiceRegistry",
    "as_slot",
    "default_voices_dir",
    "install_routes",
    "make_router",
    "open_voice_registry",
]
log = logging.getLogger(__name__)


def open_voice_registry(
    root: str | Path | None = None,
    private: bool = False,
    max_per_owner: int = 20,
    max_per_address: int = 50,
) -> VoiceRegistry:
    """The registry of `root` (default: $TTS_VOICES_DIR or the user data folder), warning at
    start-up when it cannot take new voices. One per process and root: the page and the API
    share it. `private` and the quotas: VoiceRegistry's (voices.py)."""
    voices = VoiceRegistry(
        root or default_voices_dir(),
        private=private,
        max_per_owner=max_per_owner,
        max_per_address=max_per_address,
    )
    problem = voices.store_problem()
    if problem:
        log.warning("voice store %s: %s; registering voices will fail", voices.root, problem)
    if private:
        log.info("private voices: a saved voice is listed only to the browser that saved it")
    return voices


def install_routes(
    app,  # noqa: ANN001 - fastapi.FastAPI (Gradio's App is one)
    engine: Engine | EngineSlot,
    voices: VoiceRegistry | None = None,
    config: ApiConfig | None = None,
) -> ServerState:
    """Add the speech API and the page's PCM route to `app`; returns the shared state."""
    router, state = make_router(engine, voices, config)
    app.include_router(router)
    return state


def make_router(
    engine: Engine | EngineSlot,
    voices: VoiceRegistry | None = None,
    config: ApiConfig | None = None,
) -> tuple[APIRouter, ServerState]:
    """The routes of `install_routes` on one APIRouter (e.g. for FastAPI(routes=...))."""
    from .openai_api import make_openai_router
    from .page_text_ws import make_page_text_router
    from .pcm_stream import make_pcm_router

    state = ServerState(
        slot=as_slot(engine),
        voices=voices if voices is not None else open_voice_registry(),
        config=config or ApiConfig(),
        upload_roots=(gradio_upload_folder(), ASSETS),
    )
    router = APIRouter()
    router.include_router(make_openai_router(state))
    router.include_router(make_pcm_router(state))
    router.include_router(make_page_text_router(state))
    return router, state


def gradio_upload_folder() -> Path:
    """Where Gradio keeps uploads (as gradio.utils.get_upload_folder, without importing gradio)."""
    return Path(os.environ.get("GRADIO_TEMP_DIR") or Path(tempfile.gettempdir()) / "gradio")
