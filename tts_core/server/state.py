"""What the HTTP routes share: the engine slot, the voice registry and the API limits."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from ..engine import Engine, EngineSlot
from .access import AccessPolicy
from .voices import VoiceRegistry

ENV_VOICES_DIR = "TTS_VOICES_DIR"


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


def as_slot(source: Engine | EngineSlot) -> EngineSlot:
    """An engine the caller built is a slot that is ready from the start."""
    return source if isinstance(source, EngineSlot) else EngineSlot.holding(source)
