"""The ZeroGPU variant of the demo: a `sdk: gradio` Space on Hugging Face's free shared GPUs.

On ZeroGPU a GPU exists only inside a function decorated with `@spaces.GPU`, for that call:
no server thread may own the model. So this page streams `model.stream` itself, which runs the
decode engine with one row on the calling thread (the same engine the full app batches on its
model thread), inside the decorated generator. Off ZeroGPU the decorator does nothing and the
same code runs on the local GPU or CPU. Deploying: deploy/zerogpu/README.md.

    TTS_MODEL=Qwen/Qwen3-TTS-12Hz-0.6B-Base python zerogpu_app.py
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent
VOICES = ROOT / "assets" / "voices"
DEFAULT_MODEL = "Qwen/Qwen3-TTS-12Hz-0.6B-Base"
GPU_SECONDS = 120  # the longest one request may hold the shared GPU (ZeroGPU's duration)
FIRST_CHUNK_FRAMES, CHUNK_FRAMES = 2, 6  # 160 ms to the first audio, then 480 ms chunks
MAX_CHARS = 1000


def recorded_voices() -> dict[str, dict]:
    """The built-in real recordings (assets/voices/voices.json): name -> entry."""
    entries = json.loads((VOICES / "voices.json").read_text())
    return {name: entry for name, entry in entries.items() if entry.get("recorded")}


@cache
def model():  # noqa: ANN201 - a Qwen3TTSModel
    """Loaded once per process. On ZeroGPU call it at start (as __main__ does): `cuda` is then
    ZeroGPU's stand-in device, and each decorated call sees the weights on the real GPU."""
    import torch

    import tts_core

    cuda = torch.cuda.is_available()
    return tts_core.load_model(
        os.environ.get("TTS_MODEL", DEFAULT_MODEL),
        device="cuda" if cuda else "cpu",
        dtype=torch.bfloat16 if cuda else torch.float32,
        quantize=None if cuda else "auto",
    )


def reference(voice_name: str, upload: tuple[int, np.ndarray] | None, transcript: str):
    """(audio, rate, transcript or None) from an upload, else the chosen built-in voice."""
    import soundfile as sf

    if upload is not None:
        rate, audio = upload
        audio = audio.astype(np.float32) / (32768.0 if audio.dtype == np.int16 else 1.0)
        return audio, int(rate), transcript.strip() or None
    entry = recorded_voices()[voice_name]
    audio, rate = sf.read(VOICES / entry["file"], dtype="float32")
    return audio, rate, entry["transcript"]


def _gpu(function):  # noqa: ANN001, ANN202 - the decorator keeps the signature
    try:
        import spaces
    except ImportError:  # not on a Space and not installed: nothing to request
        return function
    return spaces.GPU(duration=GPU_SECONDS)(function)


@_gpu
def speak(
    text: str, voice_name: str, upload: tuple[int, np.ndarray] | None, transcript: str, seed: int
) -> Iterator[tuple[int, np.ndarray]]:
    """Stream the speech of `text` as (24000, int16 chunk) pairs, as they are decoded."""
    import gradio as gr

    text = (text or "").strip()
    if not text:
        raise gr.Error("Please type some text.")
    if len(text) > MAX_CHARS:
        raise gr.Error(f"The text is {len(text)} characters; at most {MAX_CHARS}.")
    tts = model()
    audio, rate, ref_text = reference(voice_name, upload, transcript or "")
    try:
        voice = tts.create_voice(audio, rate, ref_text=ref_text)
    except ValueError as exc:
        raise gr.Error(f"Reference clip: {exc}") from exc
    chunks = tts.stream(
        text,
        voice,
        seed=int(seed),
        first_chunk_frames=FIRST_CHUNK_FRAMES,
        chunk_frames=CHUNK_FRAMES,
    )
    for chunk in chunks:
        if chunk.audio.size:
            pcm = np.clip(np.round(chunk.audio * 32767.0), -32768, 32767).astype(np.int16)
            yield 24_000, pcm


def build_demo():  # noqa: ANN201 - gr.Blocks
    import gradio as gr

    from tts_core.audio.ffmpeg import ensure_ffmpeg_on_path

    ensure_ffmpeg_on_path()  # Gradio's streamed audio output runs `ffmpeg`
    names = list(recorded_voices())
    with gr.Blocks(title="Streaming voice cloning (ZeroGPU)") as demo:
        gr.Markdown(
            "# Streaming voice cloning\nType, pick a voice (or upload one), listen while "
            "it is generated."
        )
        text = gr.Textbox(
            label="Text", value="Hello! This voice is being generated as you hear it."
        )
        with gr.Row():
            voice = gr.Dropdown(names, value=names[0], label="Built-in voice (real recordings)")
            seed = gr.Number(value=0, precision=0, label="Seed")
        generate = gr.Button("Generate", variant="primary")
        out = gr.Audio(label="Speech", streaming=True, autoplay=True, format="wav")
        with gr.Accordion("Your own voice", open=False):
            upload = gr.Audio(label="Reference clip (3-10 s)", type="numpy")
            transcript = gr.Textbox(label="Its transcript (optional: a closer clone)")
        generate.click(speak, [text, voice, upload, transcript, seed], out, api_name="speak")
    return demo


if __name__ == "__main__":
    model()  # at start, outside any GPU call: on ZeroGPU the weights are then shared by calls
    build_demo().queue(default_concurrency_limit=1).launch()
