"""Streaming voice demo: `python app.py --model NAME_OR_PATH --device auto|cpu|cuda`.

parse args -> put ffmpeg on PATH -> load the engine once -> build the page -> queue -> launch.
`--model espeak` selects the offline eSpeak NG voice; a neural model that cannot be loaded
falls back to it (logged, and shown in the page).
"""

from __future__ import annotations

import argparse
import logging
import os
from pathlib import Path

DEFAULT_MODEL = "Qwen/Qwen3-TTS-12Hz-0.6B-Base"
ASSETS = Path(__file__).resolve().parent / "assets"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default=os.environ.get("TTS_MODEL", DEFAULT_MODEL),
                   help="Qwen3-TTS repo id or local folder, or 'espeak' (offline voice)")  # fmt: skip
    p.add_argument("--device", default=os.environ.get("TTS_DEVICE", "auto"),
                   choices=["auto", "cpu", "cuda"])  # fmt: skip
    p.add_argument("--host", default=os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"))
    p.add_argument("--port", type=int, default=int(os.environ.get("GRADIO_SERVER_PORT", 7860)))
    p.add_argument("--max-chars", type=int, default=1000, help="longest accepted text")
    p.add_argument("--max-reference-seconds", type=float, default=30.0,
                   help="longer reference clips are cut to their first N seconds")  # fmt: skip
    p.add_argument("--max-file-size", default="20mb", help="largest accepted upload")
    p.add_argument("--max-concurrent", type=int, default=None,
                   help="syntheses at once (default: 4 for espeak, 1 for the neural model)")  # fmt: skip
    p.add_argument("--crossfade-ms", type=float, default=20.0,
                   help="Hann crossfade at joins of independent phrases (0 disables)")  # fmt: skip
    p.add_argument("--queue-size", type=int, default=32, help="requests waiting at most")
    p.add_argument("--no-fallback", action="store_true",
                   help="fail instead of falling back to espeak when the model cannot load")  # fmt: skip
    p.add_argument("--share", action="store_true", help="create a public Gradio share link")
    p.add_argument("--voices-dir", default=None,
                   help="where registered voices are kept "
                   "(default: $TTS_VOICES_DIR or ~/.local/share/tts_core/voices)")  # fmt: skip
    return p.parse_args(argv)


def build_app(args: argparse.Namespace):  # noqa: ANN201 - gr.Blocks, imported lazily
    from tts_core.audio.ffmpeg import ensure_ffmpeg_on_path
    from tts_core.engine import EngineConfig, Limits, get_engine
    from tts_core.ui import build_demo

    ensure_ffmpeg_on_path()
    limits = Limits(max_chars=args.max_chars, max_reference_s=args.max_reference_seconds)
    config = EngineConfig(
        limits=limits, crossfade_ms=args.crossfade_ms, max_concurrent=args.max_concurrent
    )
    engine = get_engine(args.model, args.device, config, allow_fallback=not args.no_fallback)
    info = engine.info()
    logging.getLogger("app").info(
        "engine ready: backend=%s model=%s device=%s concurrency=%d",
        info["backend"], info["model"], info["device"], engine.max_concurrent,
    )  # fmt: skip
    demo = build_demo(engine, ASSETS)
    demo.queue(max_size=args.queue_size, default_concurrency_limit=engine.max_concurrent)
    return demo


def main(argv: list[str] | None = None) -> None:
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    args = parse_args(argv)
    demo = build_app(args)
    from tts_core.engine import get_engine
    from tts_core.server import launch_with_routes

    launch_with_routes(
        demo,
        lambda: get_engine(args.model, args.device),  # the engine build_app loaded (cached)
        voices_dir=args.voices_dir,
        server_name=args.host,
        server_port=args.port,
        max_file_size=args.max_file_size,
        share=args.share,
        footer_links=["api", "gradio"],
    )


if __name__ == "__main__":
    main()
