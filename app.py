"""Streaming voice demo: `python app.py --model NAME_OR_PATH --device auto|cpu|cuda`.

parse args -> engine slot (the model downloads and loads in the background) -> voice
registry -> page (its launch adds the HTTP routes) -> queue -> launch. `--model espeak` selects
the offline eSpeak NG voice; a neural model that cannot be loaded falls back to it (logged,
and explained in the page).
"""

from __future__ import annotations

import argparse
import logging
import os
from collections.abc import Callable
from functools import partial
from pathlib import Path

DEFAULT_MODEL = "Qwen/Qwen3-TTS-12Hz-0.6B-Base"
DEFAULT_MAX_CONNECTIONS = 1000  # tts_core.server.connections.DEFAULT_MAX_CONNECTIONS
DEFAULT_MAX_PER_ADDRESS = 64  # tts_core.server.connections.DEFAULT_MAX_PER_ADDRESS
ASSETS = Path(__file__).resolve().parent / "assets"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default=os.environ.get("TTS_MODEL", DEFAULT_MODEL),
                   help="Qwen3-TTS, VoxCPM2 or Chatterbox (Turbo, English, Nano) repo id or "
                   "local folder (the model is read from its config.json, a Chatterbox release "
                   "from its T3 file), 'espeak' (offline voice), or http(s)://HOST:PORT/v1 "
                   "of a server speaking vLLM-Omni's /v1/audio/speech (this app included)")  # fmt: skip
    p.add_argument("--device", default=os.environ.get("TTS_DEVICE", "auto"),
                   choices=["auto", "cpu", "cuda"])  # fmt: skip
    p.add_argument("--dtype", default=os.environ.get("TTS_DTYPE", "auto"),
                   choices=["auto", "float32", "bfloat16"],
                   help="weights and activations: auto = bfloat16 on a GPU with native bf16 "
                   "(compute capability 8.0+), else float32")  # fmt: skip
    p.add_argument("--quantize", default=os.environ.get("TTS_QUANTIZE", "auto"),
                   choices=["auto", "none", "int8"],
                   help="8-bit CPU layers: Qwen3-TTS's talker and code predictor, Chatterbox "
                   "Turbo's T3 (its GPT-2 blocks); auto = int8 on a CPU where it is faster than "
                   "float (timed, cached) and every layer keeps >= 30 dB SQNR on a calibration "
                   "run; models without the knob ignore it")  # fmt: skip
    p.add_argument("--cuda-graphs", default=os.environ.get("TTS_CUDA_GRAPHS", "auto"),
                   choices=["auto", "off"],
                   help="Qwen3-TTS on CUDA: capture the served decode step as CUDA graphs per batch "
                   "bucket at load (auto = on for CUDA; eager with a log line if capture fails); "
                   "env TTS_CUDA_GRAPHS")  # fmt: skip
    p.add_argument("--host", default=os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"))
    p.add_argument("--port", type=int, default=int(os.environ.get("GRADIO_SERVER_PORT", 7860)))
    p.add_argument("--max-chars", type=int, default=1000, help="longest accepted text")
    p.add_argument("--max-reference-seconds", type=float, default=30.0,
                   help="longer reference clips are cut to their first N seconds")  # fmt: skip
    p.add_argument("--max-file-size", default="20mb", help="largest accepted upload")
    p.add_argument("--max-batch", type=int, default=None,
                   help="neural model: streams decoded together in one batch (default 8); "
                   "its KV cache is allocated for them at load")  # fmt: skip
    p.add_argument("--max-concurrent", type=int, default=None,
                   help="syntheses at once (default: 4 for espeak, --max-batch for the neural "
                   "model)")  # fmt: skip
    p.add_argument("--crossfade-ms", type=float, default=20.0,
                   help="Hann crossfade at joins of independent phrases (0 disables)")  # fmt: skip
    p.add_argument("--queue-size", type=int, default=32, help="requests waiting at most")
    p.add_argument("--wait-for-model", action="store_true",
                   help="load the model before serving (the default serves at once and loads "
                   "it in the background: requests meanwhile get 503 / 'the model is "
                   "loading')")  # fmt: skip
    p.add_argument("--no-fallback", action="store_true",
                   help="fail instead of falling back to espeak when the model cannot load")  # fmt: skip
    p.add_argument("--shutdown-timeout", type=float, default=10.0,
                   help="on SIGTERM/SIGINT: seconds the requests in flight may take to finish "
                   "before they are cancelled (new ones get 503 meanwhile)")  # fmt: skip
    p.add_argument("--max-connections", type=int, default=DEFAULT_MAX_CONNECTIONS,
                   help="open HTTP connections at most (also kept below the open-files limit); "
                   "past it the oldest idle one is closed")  # fmt: skip
    p.add_argument("--max-connections-per-address", type=int, default=DEFAULT_MAX_PER_ADDRESS,
                   help="open connections one client address (an IPv6 /64) may hold; past it "
                   "its own oldest idle one is closed, or the new one refused")  # fmt: skip
    p.add_argument("--header-timeout", type=float, default=10.0,
                   help="seconds a client may take to send a request's head; a connection "
                   "that sends nothing is closed after this")  # fmt: skip
    p.add_argument("--body-timeout", type=float, default=30.0,
                   help="longest pause, in seconds, while a request body is being received")  # fmt: skip
    p.add_argument("--body-total-timeout", type=float, default=300.0,
                   help="seconds a whole request body may take to arrive")  # fmt: skip
    p.add_argument("--voices-dir", default=None,
                   help="where registered voices are kept "
                   "(default: $TTS_VOICES_DIR or ~/.local/share/tts_core/voices)")  # fmt: skip
    p.add_argument("--allowed-origins", default=os.environ.get("TTS_ALLOWED_ORIGINS", ""),
                   help="comma-separated web origins, besides the server's own, whose pages may "
                   "call the API (e.g. https://example.org); '*' allows any")  # fmt: skip
    p.add_argument("--api-key", default=os.environ.get("TTS_API_KEY") or None,
                   help="require 'Authorization: Bearer KEY' on /v1 (env TTS_API_KEY)")  # fmt: skip
    p.add_argument("--replicas", type=int, default=None,
                   help="run the engine as N Ray Serve replicas (one GPU each where there are "
                   "GPUs) behind this page and API; needs the extra: pip install .[scale]")  # fmt: skip
    p.add_argument("--ray-address", default=os.environ.get("RAY_ADDRESS") or None,
                   help="with --replicas: join this Ray cluster (e.g. auto, or HOST:6379 of "
                   "`ray start --head`) instead of starting one here")  # fmt: skip
    p.add_argument("--min-replicas", type=int, default=None,
                   help="with --replicas: autoscale on ongoing requests, at least this many")  # fmt: skip
    p.add_argument("--max-replicas", type=int, default=None,
                   help="with --replicas: autoscale on ongoing requests, at most this many")  # fmt: skip
    p.add_argument("--private-voices", action="store_true",
                   default=env_flag(os.environ.get("TTS_PRIVATE_VOICES")),
                   help="a voice saved from the page is listed to, and usable by, only the "
                   "browser that saved it (and /v1 behind --api-key); env TTS_PRIVATE_VOICES=1")  # fmt: skip
    p.add_argument("--voices-per-owner", type=int, default=20,
                   help="most voices one browser (or X-Voice-Owner) may keep saved")  # fmt: skip
    p.add_argument("--voices-per-address", type=int, default=50,
                   help="most voices one client address (an IPv6 /64) may keep saved")  # fmt: skip
    args = p.parse_args(argv)
    try:
        args.max_file_bytes = parse_file_size(args.max_file_size)
    except ValueError as exc:
        p.error(f"--max-file-size: {exc}")
    if min(args.voices_per_owner, args.voices_per_address) < 1:
        p.error("--voices-per-owner and --voices-per-address must be >= 1")
    if args.queue_size < 0 or (args.max_concurrent is not None and args.max_concurrent < 1):
        p.error("--queue-size must be >= 0 and --max-concurrent >= 1")
    if args.max_batch is not None and not 1 <= args.max_batch <= 256:
        p.error("--max-batch must be between 1 and 256")
    if args.shutdown_timeout < 0 or min(args.header_timeout, args.body_timeout) <= 0:
        p.error("--shutdown-timeout must be >= 0, --header-timeout and --body-timeout > 0")
    if args.max_connections < 1 or args.max_connections_per_address < 1:
        p.error("--max-connections and --max-connections-per-address must be >= 1")
    if args.body_total_timeout <= 0:
        p.error("--body-total-timeout must be > 0")
    if args.replicas is not None and args.replicas < 1:
        p.error("--replicas must be >= 1")
    if args.replicas is None and any(v is not None for v in (args.min_replicas, args.max_replicas)):
        p.error("--min-replicas and --max-replicas need --replicas")
    return args


def env_flag(value: str | None) -> bool:
    """An on/off environment variable: 1, true, yes or on (any case) is on."""
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


def parse_file_size(text: str) -> int:
    """'20mb' -> 20971520, as Gradio reads --max-file-size (units b, kb, mb, gb of 1024)."""
    units = {"b": 1, "kb": 1024, "mb": 1024**2, "gb": 1024**3}
    value = text.strip().lower().replace(" ", "")
    number = value.rstrip("kmgb")
    unit = value[len(number) :] or "b"
    if not number.isdigit() or unit not in units or int(number) <= 0:
        raise ValueError(f"expected a size such as 20mb or 500kb, got {text!r}")
    return int(number) * units[unit]


def build_app(args: argparse.Namespace):  # noqa: ANN201 - gr.Blocks, imported lazily
    """The composition root: engine slot (model loading in the background unless
    --wait-for-model) -> voice registry -> page, whose launch() adds the HTTP routes."""
    from tts_core.audio.ffmpeg import ensure_ffmpeg_on_path
    from tts_core.engine import EngineSlot
    from tts_core.server import AccessPolicy, ApiConfig, open_voice_registry
    from tts_core.ui import build_demo

    ensure_ffmpeg_on_path()
    slot = EngineSlot(args.model)
    slot.load(partial(build_engine, args), background=not args.wait_for_model)
    voices = open_voice_registry(args.voices_dir, private=args.private_voices,
                                 max_per_owner=args.voices_per_owner,
                                 max_per_address=args.voices_per_address)  # fmt: skip
    origins = tuple(o.strip() for o in args.allowed_origins.split(",") if o.strip())
    access = AccessPolicy(bind_host=args.host, allowed_origins=origins, api_key=args.api_key)
    api = ApiConfig(max_upload_bytes=args.max_file_bytes, access=access)
    concurrency = planned_concurrency(args)
    demo = build_demo(slot, voices, ASSETS, api, concurrency=concurrency)
    demo.queue(max_size=args.queue_size, default_concurrency_limit=concurrency)
    return demo


def build_engine(args: argparse.Namespace, report: Callable[..., None]):  # noqa: ANN201 - Engine
    """Backend (downloading and loading, reported to `report`) -> engine; with --replicas the
    engine in front of Ray Serve replicas, each built by this function (tts_core/scale)."""
    if getattr(args, "replicas", None):
        from tts_core.scale import replica_engine  # Ray is imported only here

        return replica_engine(args)
    from tts_core.backends import load_backend
    from tts_core.engine import Engine, EngineConfig, Limits
    from tts_core.engine.loading import WARMING
    from tts_core.models.registry import is_remote

    limits = Limits(max_chars=args.max_chars, max_reference_s=args.max_reference_seconds)
    # a remote server's audio is faded at its ends already: fading it again would change it
    fades = {"fade_ms": 0.0} if is_remote(args.model) else {}
    config = EngineConfig(limits=limits, crossfade_ms=args.crossfade_ms,
                          max_concurrent=args.max_concurrent, max_queue=args.queue_size,
                          **fades)  # fmt: skip
    backend, notice = load_backend(args.model, args.device, allow_fallback=not args.no_fallback,
                                   dtype=args.dtype, quantize=args.quantize,
                                   max_batch=args.max_batch, report=report,
                                   cuda_graphs=args.cuda_graphs)  # fmt: skip
    engine = Engine(backend, config, notice)
    report(WARMING)
    warm_builtin_voices(engine)
    info = engine.info()
    logging.getLogger("app").info(
        "engine ready: backend=%s model=%s device=%s concurrency=%d",
        info["backend"], info["model"], info["device"], engine.max_concurrent,
    )  # fmt: skip
    return engine


def warm_builtin_voices(engine) -> None:  # noqa: ANN001 - Engine
    """Build the voices of the built-in real recordings (assets/voices/voices.json, as the
    page's examples use them: with their transcript and without) into the engine's cache, so a
    visitor's first click does not wait for them (an ICL voice costs seconds on a CPU)."""
    import json

    from tts_core.engine import InputError

    for entry in json.loads((ASSETS / "voices" / "voices.json").read_text()).values():
        if entry.get("recorded"):
            for transcript in (entry.get("transcript"), None):
                try:
                    engine.prepare_voice(ASSETS / "voices" / entry["file"], transcript)
                except InputError as exc:  # e.g. a limit set below the clip's length
                    logging.getLogger("app").warning("built-in voice %s: %s", entry["file"], exc)


def planned_concurrency(args: argparse.Namespace) -> int:
    """Gradio's limit for the page's synthesis events, fixed before the model is known: the
    engine's own admission (which may be lower, e.g. VoxCPM2's 1) queues the rest."""
    each = args.max_concurrent or (4 if args.model == "espeak" else args.max_batch or 8)
    return each * (getattr(args, "max_replicas", None) or getattr(args, "replicas", None) or 1)


def serve_options(args: argparse.Namespace):  # noqa: ANN201 - ServeOptions, imported lazily
    from tts_core.server.connections import ConnectionLimits
    from tts_core.server.http_server import ServeOptions

    limits = ConnectionLimits(header_timeout_s=args.header_timeout,
                              body_idle_timeout_s=args.body_timeout,
                              body_timeout_s=args.body_total_timeout,
                              max_connections=args.max_connections,
                              max_per_address=args.max_connections_per_address)  # fmt: skip
    return ServeOptions(host=args.host, port=args.port, connections=limits,
                        shutdown_timeout_s=args.shutdown_timeout,
                        max_file_size=args.max_file_bytes)  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    args = parse_args(argv)
    demo = build_app(args)
    # Gradio keeps per-session state for this many sessions (default 10000); the page keeps
    # none worth 10000 visitors' memory
    demo.state_session_capacity = 200
    from tts_core.ui import serve_page

    serve_page(demo, serve_options(args), on_started=page_ready)


def page_ready(url: str) -> None:
    logging.getLogger("app").info("page ready: %s (the voice is ready when 'engine ready' "
                                  "is logged)", url)  # fmt: skip


if __name__ == "__main__":
    main()
