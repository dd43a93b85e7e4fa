"""Serve the page with the production server (`tts_core.server.http_server`): what `app.py`
runs. `VoicePage.launch()` (Gradio's own server) stays for notebooks and quick scripts; it has
none of the connection limits or the graceful shutdown."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..server import make_router
from ..server.http_server import ServeOptions, serve
from .page import VoicePage


def serve_page(
    demo: VoicePage, options: ServeOptions, on_started: Callable[[str], Any] | None = None
) -> None:
    """Serve `demo` and its HTTP routes until SIGTERM/SIGINT, then drain and return."""
    router, _ = make_router(demo.tts_slot, demo.tts_voices, demo.tts_api)
    serve(
        demo,
        router,
        demo.tts_slot,
        options,
        wait_for_writes=demo.tts_voices.wait_for_writes,
        middleware=(demo.disk_guard_middleware(),),
        on_started=on_started,
    )
