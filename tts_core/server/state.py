"""What the HTTP routes share: the engine slot, the voice registry and the API limits."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from fastapi import Request

from ..engine import Engine, EngineSlot
from .access import AccessPolicy
from .errors import ApiError
from .voices import OPERATOR, Viewer, VoiceRegistry

ENV_VOICES_DIR = "TTS_VOICES_DIR"
# With private voices and no --api-key, a /v1 caller names its own voices with this header (a
# secret of its choosing, like the key a browser keeps for the page)
OWNER_HEADER = "X-Voice-Owner"
OWNER_KEY_CHARS = (16, 256)  # a key short enough to guess would share its owner's voices


def default_voices_dir() -> Path:
    """$TTS_VOICES_DIR, else $XDG_DATA_HOME/tts_core/voices (~/.local/share/...)."""
    if os.environ.get(ENV_VOICES_DIR):
        return Path(os.environ[ENV_VOICES_DIR])
    data_home = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data_home) / "tts_core" / "voices"


@dataclass
class ApiConfig:
    max_input_chars: int = 4096  # like OpenAI; longer engine limits are met by splitting
    max_upload_bytes: int = 20 * 1024 * 1024  # voice registration clip (--max-file-size)
    pcm_route: str = "/tts_stream/pcm"  # the page's low-latency player
    access: AccessPolicy = field(default_factory=AccessPolicy)  # Host, Origin, API key
    model_names: tuple[str, ...] = ("tts-1", "tts-1-hd", "gpt-4o-mini-tts")  # all accepted


@dataclass
class ServerState:
    slot: EngineSlot
    voices: VoiceRegistry
    config: ApiConfig = field(default_factory=ApiConfig)
    upload_roots: tuple[Path, ...] = ()  # where the page's reference files may live

    @property
    def engine(self) -> Engine:
        """The engine; ModelLoading (an EngineBusy: 503 + Retry-After) while it loads."""
        return self.slot.engine

    def api_viewer(self, request: Request) -> Viewer:
        """Who a /v1 request (past its access check) is, for the voices: the operator (every
        voice; may replace and delete any) unless the voices are private and the API has no
        key, where a caller is a visitor known by its X-Voice-Owner header (none: it sees
        only the built-in voices)."""
        if not self.voices.private or self.config.access.api_key:
            return OPERATOR
        return Viewer(owner_key=owner_key(request.headers.get(OWNER_HEADER), OWNER_HEADER))

    def page_viewer(self, key: object) -> Viewer:
        """A page's request, with the key its browser keeps (never the operator)."""
        return Viewer(owner_key=owner_key(key, "owner_key"))


def owner_key(value: object, param: str) -> str | None:
    """A visitor's owner key as sent (None when absent); 400 for one that is not a string of
    OWNER_KEY_CHARS characters."""
    if value in (None, ""):
        return None
    low, high = OWNER_KEY_CHARS
    if not isinstance(value, str) or not low <= len(value) <= high:
        raise ApiError(
            400, f"{param} must be a secret of {low}-{high} characters.", param, "invalid_value"
        )
    return value


def as_slot(source: Engine | EngineSlot) -> EngineSlot:
    """An engine the caller built is a slot that is ready from the start."""
    return source if isinstance(source, EngineSlot) else EngineSlot.holding(source)
