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
from typing import Any

DEFAULT_MODEL = "Qwen/Qwen3-TTS-12Hz-0.6B-Base"
DEFAULT_MAX_CONNECTIONS = 1000  # tts_core.server.connections.DEFAULT_MAX_CONNECTIONS
DEFAULT_MAX_PER_ADDRESS = 64  # tts_core.server.connections.DEFAULT_MAX_PER_ADDRESS
ASSETS = Path(__file__).resolve().parent / "assets"
# Gradio's queue looks for page events every 1 ms and for progress every 10 ms while idle, for
# the server's whole life (gradio/queueing.py on Linux): measured ~900 wake-ups a second of the
# event loop with no request at all, each taking the GIL and a core from the model thread's
# OpenMP team on a 2-core box. 20 ms / 100 ms: a page event starts at most 20 ms later.
GRADIO_QUEUE_POLL_S, GRADIO_PROGRESS_POLL_S = 0.02, 0.1


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = build_parser()
    args = p.parse_args(argv)
    for action in p._actions:  # an environment value is a default: argparse checks no choices
        value = getattr(args, action.dest, None)
        if action.choices and value not in action.choices:
            p.error(f"{action.env}={value!r}: expected one of {', '.join(action.choices)}")
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


def build_parser() -> argparse.ArgumentParser:
    """The command line, the one source of `--help` and of the README's options table
    (`options_table`; tests/test_readme_options.py checks that they agree)."""
    p = argparse.ArgumentParser(
        description="Streaming voice-cloning TTS: the page, gradio_client's API and the "
        "OpenAI-compatible /v1 on one server.",
        epilog="Every option's environment variable sets its default; the option wins.",
    )
    model = "Qwen3-TTS, VoxCPM2 or Chatterbox (Turbo, English)"
    option(
        p,
        "--model",
        DEFAULT_MODEL,
        env="TTS_MODEL",
        help=f"{model}: a Hugging Face Hub id (Qwen/Qwen3-TTS-12Hz-0.6B-Base or -1.7B-Base, "
        "openbmb/VoxCPM2, ResembleAI/chatterbox-turbo, ResembleAI/chatterbox) or a local "
        "folder in the released layout; 'espeak' for the offline voice; or "
        "http(s)://HOST:PORT/v1, a server speaking vLLM-Omni's /v1/audio/speech (this "
        "app included). A model that cannot load falls back to 'espeak', with a notice",
    )
    option(
        p,
        "--device",
        "auto",
        choices=["auto", "cpu", "cuda"],
        help="auto picks CUDA when available",
    )
    option(
        p,
        "--dtype",
        "auto",
        choices=["auto", "float32", "bfloat16"],
        help="weights and activations: auto = bfloat16 on a GPU with native bf16 (compute "
        "capability 8.0+), else float32",
    )
    option(
        p,
        "--quantize",
        "auto",
        choices=["auto", "none", "int8", "int4"],
        help="8-bit CPU layers (Qwen3-TTS's talker and code predictor, Chatterbox Turbo's "
        "T3): auto = int8 where it is faster than float on this CPU (timed, cached) and every "
        "layer keeps >= 30 dB SQNR, and Qwen3-TTS's code predictor in 4 bits where its kernel "
        "runs and its gate holds on the checkpoint, and Turbo's S3Gen estimator in int8 or "
        "bfloat16 where its mel keeps >= 35 dB and it is faster; int4 = int8 with that 4-bit code predictor "
        "forced (Qwen3-TTS only); /v1/models says which and why. See docs/engine.md",
    )
    option(
        p,
        "--cuda-graphs",
        "auto",
        choices=["auto", "off"],
        help="Qwen3-TTS on CUDA: capture the decode step as CUDA graphs per batch size at "
        "load (eager, logged, if capture fails); no effect on a CPU",
    )
    option(p, "--host", "127.0.0.1", env="GRADIO_SERVER_NAME", help="address to listen on")
    option(p, "--port", 7860, type=int, env="GRADIO_SERVER_PORT", help="port to listen on")
    option(
        p,
        "--max-chars",
        1000,
        type=int,
        help="longest piece of one synthesis: the page, gradio_client and /v1/audio/speech "
        "take up to 4096 characters and speak longer text in pieces of this size, cut at "
        "sentence ends",
    )
    option(
        p,
        "--max-reference-seconds",
        30.0,
        type=float,
        help="longer reference clips are cut to their first N seconds (with a notice); "
        "with a transcript they are refused, since the words would no longer match",
    )
    option(
        p, "--max-file-size", "20mb", help="largest upload, for the page and POST /v1/audio/voices"
    )
    option(
        p,
        "--max-batch",
        None,
        type=int,
        shown="8",
        help="neural model: streams decoded together in one batch (continuous batching); "
        "its KV cache is reserved for them at load",
    )
    option(
        p,
        "--max-concurrent",
        None,
        type=int,
        shown="4 for espeak, else --max-batch",
        help="syntheses at once, shared by the page, gradio_client and the HTTP routes",
    )
    option(
        p,
        "--queue-size",
        32,
        type=int,
        help="requests that may wait for a slot; beyond that: 503 + Retry-After (HTTP) or "
        "'busy, retry' (page)",
    )
    option(
        p,
        "--crossfade-ms",
        20.0,
        type=float,
        help="Hann crossfade where independently synthesized phrases meet (0 disables)",
    )
    option(
        p,
        "--wait-for-model",
        False,
        action="store_true",
        help="load the model before serving; by default the page is up at once and the "
        "model loads in the background (requests meanwhile: 'the model is loading', 503)",
    )
    option(
        p,
        "--no-fallback",
        False,
        action="store_true",
        help="no eSpeak fallback when the model cannot load: with --wait-for-model the app "
        "exits, else requests get the load error",
    )
    option(
        p,
        "--voices-dir",
        None,
        shown="~/.local/share/tts_core/voices",
        help="where voices saved from the page or POST /v1/audio/voices are kept",
    )
    option(
        p,
        "--private-voices",
        False,
        action="store_true",
        help="a voice saved from the page is listed to, and usable by, only the browser "
        "that saved it (and /v1 behind --api-key); for a public server",
    )
    option(
        p,
        "--voices-per-owner",
        20,
        type=int,
        help="most voices one browser (or owner key the server issued) may keep saved",
    )
    option(
        p,
        "--voices-per-address",
        50,
        type=int,
        help="most voices one client address (an IPv6 /64) may keep saved",
    )
    option(
        p,
        "--allowed-origins",
        "",
        shown="none",
        help="comma-separated web origins, besides the server's own, whose pages may call "
        "the routes (e.g. https://example.org); '*' allows any",
    )
    option(
        p,
        "--api-key",
        None,
        shown="none",
        help="require 'Authorization: Bearer KEY' on /v1; the page then cannot save or "
        "delete voices",
    )
    option(
        p,
        "--header-timeout",
        10.0,
        type=float,
        help="seconds a client may take to send a request's head (then 408)",
    )
    option(
        p,
        "--body-timeout",
        30.0,
        type=float,
        help="longest pause, in seconds, while a request body arrives",
    )
    option(
        p,
        "--body-total-timeout",
        300.0,
        type=float,
        help="seconds a whole request body may take to arrive",
    )
    option(
        p,
        "--max-connections",
        DEFAULT_MAX_CONNECTIONS,
        type=int,
        help="open HTTP connections at most (kept 256 below the open-files limit); past it "
        "the oldest one still waiting for a request is closed",
    )
    option(
        p,
        "--max-connections-per-address",
        DEFAULT_MAX_PER_ADDRESS,
        type=int,
        help="open connections one client address (an IPv6 /64) may hold; past it its own "
        "oldest idle one is closed, or the new one refused (503)",
    )
    option(
        p,
        "--shutdown-timeout",
        10.0,
        type=float,
        help="on SIGTERM/SIGINT: seconds the requests in flight may take to finish before "
        "they are cancelled (new ones get 503 meanwhile)",
    )
    option(
        p,
        "--replicas",
        None,
        type=int,
        shown="none (one process)",
        help="run the engine as N Ray Serve replicas (one GPU each where there are GPUs) "
        "behind this page and API; needs the extra: .venv/bin/pip install -e '.[scale]'. "
        "See docs/scaling.md",
    )
    option(
        p,
        "--ray-address",
        None,
        env="RAY_ADDRESS",
        shown="a local Ray cluster",
        help="with --replicas: join this Ray cluster (auto, or HOST:6379 of `ray start --head`)",
    )
    option(
        p,
        "--min-replicas",
        None,
        type=int,
        shown="--replicas",
        help="with --replicas: autoscale on ongoing requests, at least this many",
    )
    option(
        p,
        "--max-replicas",
        None,
        type=int,
        shown="--replicas",
        help="with --replicas: autoscale on ongoing requests, at most this many",
    )
    return p


def option(
    p: argparse.ArgumentParser,
    flag: str,
    default: Any,
    *,
    help: str,  # noqa: A002
    env: str | None = None,
    shown: str | None = None,
    **kwargs: Any,
) -> None:
    """One option whose default its environment variable `env` (default: TTS_ and the flag's
    name, e.g. TTS_MAX_BATCH) overrides; `shown`: the default in words where it is not a
    value (e.g. None, resolved later). --help and the README's table both say both."""
    env = env or "TTS_" + flag.removeprefix("--").upper().replace("-", "_")
    if kwargs.get("action") == "store_true":
        value = env_flag(os.environ[env]) if env in os.environ else default
    else:  # a string default goes through `type`, as argparse does for any string default
        value = os.environ.get(env) or default
    if shown is None:
        shown = "off" if kwargs.get("action") == "store_true" else str(default)
    action = p.add_argument(
        flag, default=value, help=f"{help} (default: {shown}; env {env})", **kwargs
    )
    action.env, action.shown_default, action.meaning = env, shown, help


def options_table() -> str:
    """The README's table of options, from the parser --help is made from."""
    rows = ["| option | default | environment | meaning |", "| --- | --- | --- | --- |"]
    for action in build_parser()._actions:
        if getattr(action, "env", None) is None:  # --help
            continue
        flag = action.option_strings[0]
        if action.choices:
            flag += " " + "\\|".join(action.choices)
        meaning = action.meaning.replace("|", "\\|")
        rows.append(f"| `{flag}` | {action.shown_default} | `{action.env}` | {meaning} |")
    return "\n".join(rows) + "\n"


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
    voices = open_voice_registry(
        args.voices_dir,
        private=args.private_voices,
        max_per_owner=args.voices_per_owner,
        max_per_address=args.voices_per_address,
    )
    origins = tuple(o.strip() for o in args.allowed_origins.split(",") if o.strip())
    access = AccessPolicy(bind_host=args.host, allowed_origins=origins, api_key=args.api_key)
    api = ApiConfig(max_upload_bytes=args.max_file_bytes, access=access)
    concurrency = planned_concurrency(args)
    demo = build_demo(slot, voices, ASSETS, api, concurrency=concurrency)
    demo.queue(max_size=args.queue_size, default_concurrency_limit=concurrency)
    demo._queue.sleep_when_free = GRADIO_QUEUE_POLL_S
    demo._queue.progress_update_sleep_when_free = GRADIO_PROGRESS_POLL_S
    return demo


def build_engine(args: argparse.Namespace, report: Callable[..., None]):  # noqa: ANN201 - Engine
    """Backend (downloading and loading, reported to `report`) -> engine; with --replicas the
    engine in front of Ray Serve replicas, each built by this function (tts_core/scale)."""
    if getattr(args, "replicas", None):
        from tts_core.scale import replica_engine  # Ray is imported only here

        return replica_engine(args, "app:build_engine")  # each replica imports this function
    from tts_core.backends import load_backend
    from tts_core.engine import Engine, EngineConfig, Limits
    from tts_core.engine.loading import WARMING
    from tts_core.models.registry import is_remote

    limits = Limits(max_chars=args.max_chars, max_reference_s=args.max_reference_seconds)
    # a remote server's audio is faded at its ends already: fading it again would change it
    fades = {"fade_ms": 0.0} if is_remote(args.model) else {}
    config = EngineConfig(
        limits=limits,
        crossfade_ms=args.crossfade_ms,
        max_concurrent=args.max_concurrent,
        max_queue=args.queue_size,
        **fades,
    )
    backend, notice = load_backend(
        args.model,
        args.device,
        allow_fallback=not args.no_fallback,
        dtype=args.dtype,
        quantize=args.quantize,
        max_batch=args.max_batch,
        report=report,
        cuda_graphs=args.cuda_graphs,
    )
    engine = Engine(backend, config, notice)
    report(WARMING)
    warm_builtin_voices(engine)
    info = engine.info()
    logging.getLogger("app").info(
        "engine ready: backend=%s model=%s device=%s concurrency=%d",
        info["backend"],
        info["model"],
        info["device"],
        engine.max_concurrent,
    )
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

    limits = ConnectionLimits(
        header_timeout_s=args.header_timeout,
        body_idle_timeout_s=args.body_timeout,
        body_timeout_s=args.body_total_timeout,
        max_connections=args.max_connections,
        max_per_address=args.max_connections_per_address,
    )
    return ServeOptions(
        host=args.host,
        port=args.port,
        connections=limits,
        shutdown_timeout_s=args.shutdown_timeout,
        max_file_size=args.max_file_bytes,
    )


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
    logging.getLogger("app").info(
        "page ready: %s (the voice is ready when 'engine ready' is logged)", url
    )


if __name__ == "__main__":
    main()
