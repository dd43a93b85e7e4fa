"""HTTP routes served by the same process as the Gradio page.

Integration point: `install_routes(app, engine_provider, voices_dir=None, config=None)` adds
    POST   /v1/audio/speech           OpenAI-compatible speech (streamed)
    GET    /v1/audio/voices           built-in + registered voices
    POST   /v1/audio/voices           register a named voice (multipart: name, file, transcript)
    DELETE /v1/audio/voices/{name}
    GET    /v1/models
    POST   /tts_stream/pcm            raw PCM frames for the page's low-latency player
to a FastAPI app. `engine_provider()` returns the process-wide engine (`get_engine(...)`), so
the routes share its concurrency limit with the UI.

With Gradio 6.31 the app is the one `launch` creates; routes may be added after it started
(Starlette looks its route list up per request, and Gradio has no catch-all route):

    demo.launch(prevent_thread_lock=True, ...)      # returns once the server listens
    install_routes(demo.app, lambda: engine)
    demo.block_thread()                             # what launch() does when it blocks

which `launch_with_routes(demo, engine_provider, voices_dir, **launch_kwargs)` does. Or, mounting
Gradio in your own FastAPI app served by uvicorn:

    app = FastAPI(); install_routes(app, lambda: engine)
    app = gr.mount_gradio_app(app, demo, path="/")
"""

from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..engine import Engine
from .access import AccessPolicy
from .state import ApiConfig, ServerState, default_voices_dir
from .voices import VoiceRegistry

ASSETS = Path(__file__).resolve().parents[2] / "assets"

__all__ = [
    "AccessPolicy",
    "ApiConfig",
    "ServerState",
    "default_voices_dir",
    "install_routes",
    "launch_with_routes",
]
log = logging.getLogger(__name__)


def install_routes(
    app,  # noqa: ANN001 - fastapi.FastAPI (Gradio's App is one)
    engine_provider: Callable[[], Engine],
    voices_dir: str | Path | None = None,
    config: ApiConfig | None = None,
) -> ServerState:
    """Add the speech API and the page's PCM route to `app`; returns the shared state."""
    from .openai_api import make_openai_router
    from .pcm_stream import make_pcm_router

    voices = VoiceRegistry(voices_dir or default_voices_dir())
    problem = voices.store_problem()
    if problem:
        log.warning("voice store %s: %s; registering voices will fail", voices.root, problem)
    state = ServerState(
        engine_provider=engine_provider,
        voices=voices,
        config=config or ApiConfig(),
        upload_roots=(gradio_upload_folder(), ASSETS),
    )
    app.include_router(make_openai_router(state))
    app.include_router(make_pcm_router(state))
    return state


def gradio_upload_folder() -> Path:
    """Where Gradio keeps uploads (as gradio.utils.get_upload_folder, without importing gradio)."""
    return Path(os.environ.get("GRADIO_TEMP_DIR") or Path(tempfile.gettempdir()) / "gradio")


def launch_with_routes(
    demo,  # noqa: ANN001 - gr.Blocks
    engine_provider: Callable[[], Engine],
    voices_dir: str | Path | None = None,
    config: ApiConfig | None = None,
    block: bool = True,
    **launch_kwargs: Any,
) -> tuple[Any, str, str | None]:
    """demo.launch(**launch_kwargs) with the routes installed; blocks like launch() unless
    `block` is false. Returns launch's (app, local_url, share_url)."""
    app, local_url, share_url = demo.launch(prevent_thread_lock=True, **launch_kwargs)
    install_routes(demo.app, engine_provider, voices_dir, config)
    if block:
        demo.block_thread()
    return app, local_url, share_url
