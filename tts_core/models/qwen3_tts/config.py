"""Configuration dataclasses read from a Qwen3-TTS checkpoint's JSON files.

Every model number comes from `config.json` / `generation_config.json`; the official Python
config classes have defaults that do not match the released models, so nothing is defaulted
here except fields the released JSON leaves out and the official code fills the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..config_json import Fields, read_json_object

MODEL_TYPE = "qwen3_tts"
TALKER_MODEL_TYPE = "qwen3_tts_talker"
CODE_PREDICTOR_MODEL_TYPE = "qwen3_tts_talker_code_predictor"
SUPPORTED_TOKENIZER_TYPES = ("qwen3_tts_tokenizer_12hz",)
SUPPORTED_ROPE_TYPES = ("default",)
# tts_model_type -> the official wrapper's method for it, and its default non_streaming_mode
# (qwen_tts/inference/qwen3_tts_model.py: generate_voice_clone False, the other two True).
MODEL_TYPES = ("base", "custom_voice", "voice_design")
DEFAULT_NON_STREAMING_MODE = {"base": False, "custom_voice": True, "voice_design": True}


class ConfigError(ValueError):
    """A checkpoint config file is missing a field or holds a value we cannot run."""


def _rope_type(section: Fields) -> str:
    scaling = section.get("rope_scaling", None) or {}
    rope_type = scaling.get("rope_type", scaling.get("type", "default"))
    if rope_type not in SUPPORTED_ROPE_TYPES:
        raise ConfigError(f"{section.where}: unsupported rope type {rope_type!r}")
    return rope_type


@dataclass(frozen=True)
class DecoderStackConfig:
    """Geometry of one Qwen3 decoder stack (talker or code predictor)."""

    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    rms_norm_eps: float
    rope_theta: float
    max_position_embeddings: int

    @classmethod
    def from_dict(cls, raw: dict[str, Any], where: str) -> DecoderStackConfig:
        section = Fields(raw, where, ConfigError)
        act = section.get("hidden_act", "silu")
        if act != "silu":
            raise ConfigError(f"{where}: unsupported hidden_act {act!r} (only 'silu')")
        if section.get("attention_bias", False):
            raise ConfigError(f"{where}: attention_bias=true is not supported")
        if section.get("use_sliding_window", False):
            raise ConfigError(f"{where}: sliding-window attention is not supported")
        _rope_type(section)
        heads = section.integer("num_attention_heads")
        kv_heads = section.integer("num_key_value_heads")
        if heads % kv_heads:
            raise ConfigError(f"{where}: num_attention_heads {heads} not divisible by {kv_heads}")
        hidden = section.integer("hidden_size")
        return cls(
            hidden_size=hidden,
            num_hidden_layers=section.integer("num_hidden_layers"),
            num_attention_heads=heads,
            num_key_value_heads=kv_heads,
            head_dim=section.optional_integer("head_dim") or hidden // heads,
            intermediate_size=section.integer("intermediate_size"),
            rms_norm_eps=section.number("rms_norm_eps"),
            rope_theta=section.number("rope_theta"),
            max_position_embeddings=section.integer("max_position_embeddings"),
        )


@dataclass(frozen=True)
class CodePredictorConfig:
    stack: DecoderStackConfig
    vocab_size: int  # one codebook (2048)
    num_code_groups: int  # 16: the predictor emits groups 1..15


@dataclass(frozen=True)
class TalkerConfig:
    stack: DecoderStackConfig
    vocab_size: int  # codec vocabulary (3072)
    text_vocab_size: int
    text_hidden_size: int
    num_code_groups: int
    codec_pad_id: int
    codec_bos_id: int
    codec_eos_token_id: int
    codec_think_id: int
    codec_nothink_id: int
    codec_think_bos_id: int
    codec_think_eos_id: int
    codec_language_id: dict[str, int]
    code_predictor: CodePredictorConfig
    # CustomVoice: preset name -> its row of the codec input embedding, and -> the
    # codec_language_id key of its dialect (False: none); both {} in Base / VoiceDesign.
    spk_id: dict[str, int] = field(default_factory=dict)
    spk_is_dialect: dict[str, str | bool] = field(default_factory=dict)


@dataclass(frozen=True)
class Qwen3TTSConfig:
    tts_model_type: str
    tts_model_size: str
    tokenizer_type: str
    im_start_token_id: int
    im_end_token_id: int
    tts_pad_token_id: int
    tts_bos_token_id: int
    tts_eos_token_id: int
    talker: TalkerConfig
    speaker_encoder: dict[str, Any] = field(default_factory=dict)

    @property
    def languages(self) -> tuple[str, ...]:
        """The language names a request may give (the dialect ids are picked by a speaker's
        spk_is_dialect, never named: the official get_supported_languages drops them)."""
        return ("auto", *(k for k in self.talker.codec_language_id if "dialect" not in k))

    @property
    def speakers(self) -> tuple[str, ...]:
        return tuple(self.talker.spk_id)

    @property
    def instruct_supported(self) -> bool:
        """False where the official silently drops `instruct`: generate_custom_voice tests
        `tts_model_size in "0b6"` (a substring test, kept as it is) and sets instruct None."""
        return not (self.tts_model_type == "custom_voice" and self.tts_model_size in "0b6")

    @property
    def default_non_streaming_mode(self) -> bool:
        return DEFAULT_NON_STREAMING_MODE[self.tts_model_type]


@dataclass(frozen=True)
class GenerationDefaults:
    """Values of generation_config.json (the official wrapper's hard defaults fill gaps)."""

    do_sample: bool = True
    temperature: float = 0.9
    top_k: int = 50
    top_p: float = 1.0
    repetition_penalty: float = 1.05
    subtalker_dosample: bool = True
    subtalker_temperature: float = 0.9
    subtalker_top_k: int = 50
    subtalker_top_p: float = 1.0
    max_new_tokens: int = 2048

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GenerationDefaults:
        return Fields(data, "generation_config.json", ConfigError).dataclass(cls)


def _code_predictor_config(section: Fields, talker_groups: int) -> CodePredictorConfig:
    model_type = section.get("model_type", CODE_PREDICTOR_MODEL_TYPE)
    if model_type != CODE_PREDICTOR_MODEL_TYPE:
        raise ConfigError(f"{section.where}: unknown model_type {model_type!r}")
    groups = section.integer("num_code_groups")
    if groups != talker_groups:
        raise ConfigError(
            f"{section.where}: num_code_groups {groups} differs from the talker's {talker_groups}"
        )
    return CodePredictorConfig(
        stack=DecoderStackConfig.from_dict(section.raw, section.where),
        vocab_size=section.integer("vocab_size"),
        num_code_groups=groups,
    )


def _talker_config(section: Fields) -> TalkerConfig:
    where = section.where
    model_type = section.get("model_type", TALKER_MODEL_TYPE)
    if model_type != TALKER_MODEL_TYPE:
        raise ConfigError(f"{where}: unknown model_type {model_type!r}")
    groups = section.integer("num_code_groups")
    if groups < 2:
        raise ConfigError(f"{where}: num_code_groups must be >= 2, got {groups}")
    ids = {
        name: section.integer(name, minimum=0)
        for name in (
            "codec_pad_id",
            "codec_bos_id",
            "codec_eos_token_id",
            "codec_think_id",
            "codec_nothink_id",
            "codec_think_bos_id",
            "codec_think_eos_id",
        )
    }
    vocab = section.integer("vocab_size")
    for name, value in ids.items():
        if value >= vocab:
            raise ConfigError(f"{where}: '{name}'={value!r} is outside the codec vocab {vocab}")
    languages = {str(k).lower(): int(v) for k, v in section.get("codec_language_id", {}).items()}
    predictor = _code_predictor_config(section.section("code_predictor_config"), groups)
    speakers, dialects = _speaker_tables(section, vocab, languages)
    return TalkerConfig(
        stack=DecoderStackConfig.from_dict(section.raw, section.where),
        vocab_size=vocab,
        text_vocab_size=section.integer("text_vocab_size"),
        text_hidden_size=section.integer("text_hidden_size"),
        num_code_groups=groups,
        codec_language_id=languages,
        code_predictor=predictor,
        spk_id=speakers,
        spk_is_dialect=dialects,
        **ids,
    )


def _speaker_tables(
    section: Fields, vocab: int, languages: dict[str, int]
) -> tuple[dict[str, int], dict[str, str | bool]]:
    """talker_config.spk_id / spk_is_dialect, checked: every id a codec row, every dialect a
    codec_language_id key. A speaker missing from spk_is_dialect has no dialect."""
    where = section.where
    speakers = {}
    for name, value in (section.get("spk_id", None) or {}).items():
        row = value[0] if isinstance(value, list) and len(value) == 1 else value
        if isinstance(row, bool) or not isinstance(row, int) or not 0 <= row < vocab:
            raise ConfigError(f"{where}: spk_id[{name!r}]={value!r} is not a codec id < {vocab}")
        speakers[str(name)] = row
    dialects: dict[str, str | bool] = {}
    for name, value in (section.get("spk_is_dialect", None) or {}).items():
        if value is not False and value not in languages:
            raise ConfigError(
                f"{where}: spk_is_dialect[{name!r}]={value!r} is neither false nor a "
                f"codec_language_id key"
            )
        dialects[str(name)] = value
    return speakers, dialects


def parse_config(data: dict[str, Any]) -> Qwen3TTSConfig:
    """Validate the parsed config.json and turn it into dataclasses (ConfigError on bad values)."""
    top = Fields(data, "config.json", ConfigError)
    where = top.where
    model_type = top.get("model_type", None)
    if model_type != MODEL_TYPE:
        raise ConfigError(f"{where}: unknown model_type {model_type!r} (expected {MODEL_TYPE!r})")
    tokenizer_type = top.get("tokenizer_type", None)
    if tokenizer_type not in SUPPORTED_TOKENIZER_TYPES:
        raise ConfigError(
            f"{where}: unknown tokenizer_type {tokenizer_type!r} "
            f"(supported: {', '.join(SUPPORTED_TOKENIZER_TYPES)})"
        )
    model_kind = top.get("tts_model_type", None)
    if model_kind not in MODEL_TYPES:
        raise ConfigError(
            f"{where}: tts_model_type {model_kind!r} is not supported (one of {MODEL_TYPES})"
        )
    talker = _talker_config(top.section("talker_config"))
    speaker = dict(top.get("speaker_encoder_config", None) or {})
    enc_dim = speaker.get("enc_dim", talker.stack.hidden_size)
    if model_kind == "base" and enc_dim != talker.stack.hidden_size:
        raise ConfigError(
            f"{where}: speaker_encoder_config.enc_dim {enc_dim} != talker hidden size "
            f"{talker.stack.hidden_size}"
        )
    return Qwen3TTSConfig(
        tts_model_type=model_kind,
        tts_model_size=str(top.get("tts_model_size", "")),
        tokenizer_type=tokenizer_type,
        im_start_token_id=top.integer("im_start_token_id", minimum=0),
        im_end_token_id=top.integer("im_end_token_id", minimum=0),
        tts_pad_token_id=top.integer("tts_pad_token_id", minimum=0),
        tts_bos_token_id=top.integer("tts_bos_token_id", minimum=0),
        tts_eos_token_id=top.integer("tts_eos_token_id", minimum=0),
        talker=talker,
        speaker_encoder=speaker,
    )


def load_config(folder: Path) -> Qwen3TTSConfig:
    return parse_config(read_json_object(Path(folder) / "config.json", ConfigError))


def load_generation_defaults(folder: Path) -> GenerationDefaults:
    path = Path(folder) / "generation_config.json"
    if not path.exists():
        return GenerationDefaults()
    return GenerationDefaults.from_dict(read_json_object(path, ConfigError))
