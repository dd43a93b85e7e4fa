"""A model is its folder plus one line in MODEL_SPECS (tts_core/models/specs.py): a sine "voice"
with one knob (`pitch_hz`), declared here and registered by one line, is detected from its
config.json and served through /v1/audio/speech, the page's Gradio API (gradio_client) and its
library model's `stream`, its knob listed by /v1/models, accepted on every surface (the tone
heard is the pitch asked for) and refused out of range with its name; its declared
capabilities (no language) reach /v1/models as declared.

The app is app.py's composition root (`build_app`) served in this process: a subprocess would
not see the registration made here.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import numpy as np
import pytest
import soundfile as sf
from conftest import free_port
from gradio_client import Client
from gradio_client.exceptions import AppError

from tts_core.engine.backend import BackendChunk, ReferenceNeeds, Voice
from tts_core.engine.capabilities import Capabilities
from tts_core.engine.knobs import Knob
from tts_core.models import specs
from tts_core.models.specs import ModelSpec

RATE, FRAME = 24_000, 1920  # samples per second; per frame (the chunk-size unit: 80 ms)
PITCH = Knob(
    "pitch_hz", float, 50.0, 2000.0, default=220.0, label="Pitch (Hz)", help="The tone's frequency."
)
TEXT = "A tone as long as this text."  # one frame per character: 28 x 80 ms = 2.24 s
VOICE = "arctic-slt"  # a built-in voice: /v1 asks for one (the tone ignores it)
ASKED, OUT_OF_RANGE = 440.0, 5000.0


def sine(text: str, pitch_hz: float) -> np.ndarray:
    t = np.arange(FRAME * len(text)) / RATE
    return (0.5 * np.sin(2 * np.pi * pitch_hz * t)).astype(np.float32)


class SineBackend:
    """The whole model: a tone one frame per character, at the request's `pitch_hz`."""

    name, description = "sine", "A sine tone, one 80 ms frame per character."
    can_clone = needs_reference = False
    capabilities = Capabilities(reads_language=False)  # no language; the text whole
    weight_format, weight_format_reason, decode_step = None, "", None  # no weights
    reference = ReferenceNeeds(transcript="ignored")  # no clip needed; one given is not read
    sample_rate, frame_samples, default_concurrency, knobs = RATE, FRAME, 2, (PITCH,)

    def __init__(self, model_name: str, device: str) -> None:
        self.model_name, self.device = model_name, device

    @classmethod
    def load(cls, name: str, device: str, max_batch: int | None = None) -> SineBackend:
        return cls(str(name), device)

    def create_voice(self, audio: np.ndarray | None, reference_text: str | None) -> Voice:
        return Voice(self.name, None)

    def stream(self, text, voice, params, cancel) -> Iterator[BackendChunk]:  # noqa: ANN001
        yield BackendChunk(sine(text, params.get("pitch_hz", PITCH.default)), frames=len(text))

    def sampling_defaults(self) -> dict[str, float]:
        return {"pitch_hz": PITCH.default}


class SineModel:
    """The library's model: `stream(text, voice=None, pitch_hz=...)` -> float32 chunks."""

    sample_rate = RATE

    def __init__(self, name, device="cpu", dtype=None) -> None:  # noqa: ANN001 - the loader's
        self.name = name

    def stream(self, text: str, voice: object = None, pitch_hz: float | None = None):  # noqa: ANN201
        pitch = PITCH.parse(pitch_hz)  # InputError naming pitch_hz out of range
        audio = sine(text, PITCH.default if pitch is None else pitch)
        yield from np.split(audio, len(text))


SINE = ModelSpec("sine_test", "Sine", SineBackend, SineModel, config=("model_type", "sine_test"))


def peak_hz(audio: np.ndarray, rate: int) -> float:
    """The strongest frequency: the tone's, to within one FFT bin (rate / len(audio))."""
    spectrum = np.abs(np.fft.rfft(audio.astype(np.float64)))
    return float(np.argmax(spectrum) * rate / audio.size)


def assert_pitch(audio: np.ndarray, rate: int, hz: float) -> None:
    # the peak bin is the tone's nearest: off by at most one bin (the 5 ms end fades and
    # 16-bit rounding add no stronger component)
    assert audio.size > rate  # over a second: bins under 1 Hz
    assert abs(peak_hz(audio, rate) - hz) <= rate / audio.size


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    folder = tmp_path_factory.mktemp("sine-checkpoint")
    (folder / "config.json").write_text(json.dumps({"model_type": "sine_test"}))
    return folder


@pytest.fixture(scope="module")
def registered():
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(specs, "MODEL_SPECS", (*specs.MODEL_SPECS, SINE))  # the one line
        yield


@pytest.fixture(scope="module")
def url(registered, checkpoint, tmp_path_factory):
    import app

    args = app.parse_args(
        [
            "--model",
            str(checkpoint),
            "--wait-for-model",
            "--no-fallback",
            "--voices-dir",
            str(tmp_path_factory.mktemp("voices")),
        ]
    )
    demo = app.build_app(args)
    _, address, _ = demo.launch(
        prevent_thread_lock=True, server_name="127.0.0.1", server_port=free_port(), quiet=True
    )
    yield address.rstrip("/")
    demo.close()


def test_the_checkpoint_is_detected_from_its_spec(registered, checkpoint):
    from tts_core.backends import backend_classes
    from tts_core.models.registry import architectures, detect_architecture

    assert detect_architecture(checkpoint) == "sine_test"
    assert "sine_test" in architectures() and SineBackend in backend_classes()
    assert SINE.knobs == (PITCH,) and SINE.capabilities.reads_language is False
    assert SINE.reference.transcript == "ignored"


def test_v1_lists_the_knob_and_speaks_at_the_pitch_asked(url):
    models = httpx.get(f"{url}/v1/models", timeout=30).json()["data"][-1]
    assert models["info"]["backend"] == "sine"
    assert models["info"]["reads_language"] is False  # its declaration, not a default
    assert models["info"]["reads_transcript"] is False  # its ReferenceNeeds' "ignored"
    assert models["info"]["knobs"]["pitch_hz"]["maximum"] == PITCH.high
    body = {"input": TEXT, "voice": VOICE, "response_format": "pcm", "pitch_hz": ASKED}
    reply = httpx.post(f"{url}/v1/audio/speech", json=body, timeout=60)
    assert reply.status_code == 200, reply.text
    assert_pitch(np.frombuffer(reply.content, np.int16) / 32768, RATE, ASKED)


def test_v1_refuses_the_knob_out_of_range_by_name(url):
    body = {"input": TEXT, "voice": VOICE, "pitch_hz": OUT_OF_RANGE}
    reply = httpx.post(f"{url}/v1/audio/speech", json=body, timeout=60)
    assert reply.status_code == 400 and "pitch_hz" in reply.text


def test_the_gradio_api_takes_the_knob_by_name(url):
    client = Client(url, verbose=False)
    path, stats = client.predict(text=TEXT, pitch_hz=ASKED, api_name="/synthesize_full")
    audio, rate = sf.read(path)
    assert stats["done"] and stats["backend"] == "sine"
    assert_pitch(audio, rate, ASKED)
    with pytest.raises(AppError, match="pitch_hz"):
        client.predict(text=TEXT, pitch_hz=OUT_OF_RANGE, api_name="/synthesize_full")


def test_the_library_model_streams_at_the_pitch_asked(registered, checkpoint):
    from tts_core import load_model
    from tts_core.engine import InputError

    model = load_model(checkpoint)
    assert isinstance(model, SineModel)
    assert_pitch(np.concatenate(list(model.stream(TEXT, pitch_hz=ASKED))), RATE, ASKED)
    with pytest.raises(InputError, match="pitch_hz"):
        next(model.stream(TEXT, pitch_hz=OUT_OF_RANGE))
    with pytest.raises(ValueError, match="quantize='int8' only applies to"):
        load_model(checkpoint, quantize="int8")  # an option its loader does not take
