"""What a backend can do, declared once on its class as `capabilities` (a checkpoint that decides
some of it, Qwen3-TTS's CustomVoice / VoiceDesign, replaces those fields on the instance): the
engine, `Engine.info`, /v1/models and the page read it, never probing the backend's attributes.
"""

from __future__ import annotations

from dataclasses import dataclass

from .knobs import SHARED_NAMES

TASK_TYPES = ("Base", "CustomVoice", "VoiceDesign")  # vLLM-Omni's names of what a model does


@dataclass(frozen=True)
class Capabilities:
    reads_language: bool = True  # False: the language follows the text (the page hides it)
    takes_text_pieces: bool = False  # stream_fed: speaks while the text arrives (else buffered)
    independent_phrases: bool = False  # chunks marked `independent` start a new synthesis:
    # the engine crossfades into them (eSpeak's phrases)
    task_type: str = "Base"  # Base: clones a clip; CustomVoice / VoiceDesign: voices it makes
    speakers: tuple[str, ...] = ()  # its preset voices (CustomVoice)
    # True: its `stream` and `create_voice` compute nothing on the caller's thread; they only
    # wait on its EngineLoop (`call`, `submit`'s stream), so a request on the event loop runs
    # them there, each wait awaited (awaiting.py). False: they may compute or block (eSpeak, a
    # remote server, a test's gated backend): on the event loop the engine gives the request
    # one thread of its own for its voice and stream
    waits_on_loop: bool = False
    # the shared knobs (knobs.shared_knobs) it reads: the surfaces offer only these, and a
    # request that sets another is refused naming it (Chatterbox: a chunk is an S3Gen pass, so
    # not first_chunk_frames / chunk_frames)
    shared_knobs: tuple[str, ...] = SHARED_NAMES

    def __post_init__(self) -> None:
        if self.task_type not in TASK_TYPES:
            raise ValueError(f"task_type must be one of {TASK_TYPES}, not {self.task_type!r}")
        if not set(self.shared_knobs) <= set(SHARED_NAMES):
            raise ValueError(f"shared_knobs must be among {SHARED_NAMES}: {self.shared_knobs}")
