"""Every model this engine serves, each declared once: a new model is its folder plus one line
in `MODEL_SPECS`.

A `ModelSpec` says how its checkpoint is recognised (a config.json value, or for a release
without config.json a file name), which backend class serves it (its knobs and capabilities are
declared on that class) and which loader builds the library's model. Everything that used to
list the models derives from this list: `registry.detect_architecture` and `load_model`, the
backend loader and `backend_classes()` (so `/v1/models`, the page's controls and the Gradio
API's parameters). Classes and loaders are named as "module:attribute" and imported only when
used: importing this list imports no torch (the eSpeak start path stays light).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

# load_model's options (beyond device and dtype) and their defaults: a model whose loader does
# not take one refuses any other value (quantize: "none" and "auto" keep the float weights)
LIBRARY_OPTION_DEFAULTS = {
    "compile": False,
    "cuda_graphs": "auto",
    "quantize": None,
    "decoder_dtype": None,
    "warm_chunks": (2, 6),
}


@dataclass(frozen=True)
class ModelSpec:
    """One model: how its checkpoint is detected, its backend and its library loader."""

    architecture: str  # the id detect_architecture returns ("qwen3_tts")
    title: str  # for messages ("Qwen3-TTS 12 Hz")
    backend: str | type  # "module:Class" of its Backend (knobs and capabilities declared there)
    model: str | Callable[..., Any]  # "module:callable" (name_or_path, device=, dtype=,
    # **model_options) -> the library's model (a class or callable itself: not imported)
    config: tuple[str, str] | None = None  # config.json[key] == value is this model
    files: tuple[str, ...] = ()  # or, without config.json, any of these files in the folder
    backend_options: tuple[str, ...] = ()  # load_backend's options its Backend.load takes
    model_options: tuple[str, ...] = ()  # LIBRARY_OPTION_DEFAULTS' options its loader takes

    def matches_config(self, config: Mapping[str, Any]) -> bool:
        return self.config is not None and config.get(self.config[0]) == self.config[1]

    def backend_class(self) -> type:
        return _imported(self.backend)

    @property
    def knobs(self) -> tuple[Any, ...]:
        """Its request settings: the backend class's declaration (engine/knobs.py)."""
        return tuple(self.backend_class().knobs)

    @property
    def capabilities(self) -> Any:
        """What it can do: the backend class's declaration (engine/capabilities.py; a loaded
        checkpoint may say more, e.g. Qwen3-TTS's preset voices)."""
        return self.backend_class().capabilities

    @property
    def reference(self) -> Any:
        """What it asks of a reference clip: the backend class's declaration (ReferenceNeeds,
        engine/backend.py; VoxCPM2's loaded model narrows it on the instance)."""
        return self.backend_class().reference

    def load_backend(self, name: str, device: str, options: Mapping[str, Any]) -> Any:
        """Its backend for checkpoint `name`; `options`: load_backend's (those it takes are
        passed; max_batch always, when set)."""
        taken = {key: options[key] for key in self.backend_options}
        if options.get("max_batch") is not None:
            taken["max_batch"] = options["max_batch"]
        return self.backend_class().load(name, device, **taken)

    def load_model(self, name: str, device: str, dtype: Any, options: Mapping[str, Any]) -> Any:
        """The library's model; ValueError naming the options it cannot use."""
        refused = [
            f"{key}={value!r}"
            for key, value in options.items()
            if key not in self.model_options and not _is_default(key, value)
        ]
        if refused:
            takers = [
                spec.title for spec in model_specs() if set(options) & set(spec.model_options)
            ]
            takes = ", ".join(("device", "dtype", *self.model_options))
            raise ValueError(
                f"{name} is a {self.title} checkpoint; {', '.join(refused)} only applies to "
                f"{' and '.join(takers) or 'other models'} ({self.title} takes {takes})"
            )
        taken = {key: options[key] for key in self.model_options}
        return _imported(self.model)(name, device=device, dtype=dtype, **taken)


def _is_default(key: str, value: Any) -> bool:
    if key == "quantize":
        return value is None or str(value).lower() in ("none", "auto")
    if key == "cuda_graphs" and value in (None, False, "off"):  # no graphs to turn off
        return True
    if key == "warm_chunks":
        value = tuple(value)
    return value == LIBRARY_OPTION_DEFAULTS[key]


def _imported(target: Any) -> Any:
    """A "module:Name.attr" string -> that object (imported now); an object itself as it is."""
    if not isinstance(target, str):
        return target
    module, _, path = target.partition(":")
    found = importlib.import_module(module)
    for attribute in path.split("."):
        found = getattr(found, attribute)
    return found


BACKENDS = "tts_core.backends"
MODEL_SPECS: tuple[ModelSpec, ...] = (
    ModelSpec(
        "qwen3_tts",
        "Qwen3-TTS",
        f"{BACKENDS}.qwen3:Qwen3Backend",
        "tts_core.models.qwen3_tts.model:load_model",
        config=("model_type", "qwen3_tts"),
        backend_options=("dtype", "quantize", "cuda_graphs"),
        model_options=tuple(LIBRARY_OPTION_DEFAULTS),
    ),
    ModelSpec(
        "voxcpm2",
        "VoxCPM2",
        f"{BACKENDS}.voxcpm:VoxCPMBackend",
        "tts_core.models.voxcpm.model:VoxCPMModel.from_pretrained",
        config=("architecture", "voxcpm2"),
        backend_options=("dtype",),
    ),
    # Chatterbox releases have no config.json: the T3 weights' file name says which model
    ModelSpec(
        "chatterbox_turbo",
        "Chatterbox Turbo",
        f"{BACKENDS}.chatterbox:ChatterboxBackend",
        "tts_core.models.chatterbox.model:ChatterboxTurboModel.from_pretrained",
        files=("t3_turbo_v1.safetensors", "t3_nano_v1.safetensors"),  # Nano: GPT-2 small
        backend_options=("quantize",),
        model_options=("quantize",),
    ),
    ModelSpec(
        "chatterbox_english",
        "Chatterbox",
        f"{BACKENDS}.chatterbox_english:ChatterboxEnglishBackend",
        "tts_core.models.chatterbox.english:ChatterboxEnglishModel.from_pretrained",
        files=("t3_cfg.safetensors",),
    ),
    # a TADA model folder (its codec beside it as `codec`, else the Hub's), or a root without
    # config.json holding model/ and codec/ (tools/oracle/tada's layout): backends/tada.py
    ModelSpec(
        "tada",
        "TADA",
        f"{BACKENDS}.tada:TadaBackend",
        f"{BACKENDS}.tada:load_model",
        config=("diffusion_head_type", "vibevoice"),
        files=("codec",),
        backend_options=("dtype",),
    ),
)


def model_specs() -> tuple[ModelSpec, ...]:
    """The list as it is now (read at each call: a test may add a model to it)."""
    return MODEL_SPECS


def spec_of(architecture: str) -> ModelSpec:
    """The spec of `architecture` (ValueError for an id no spec has, e.g. "remote")."""
    found = next((spec for spec in model_specs() if spec.architecture == architecture), None)
    if found is None:
        raise ValueError(f"no model spec for {architecture!r}: it is not a checkpoint")
    return found
