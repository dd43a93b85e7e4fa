"""Our modules at the released sizes have the official state dicts' keys and shapes
(tests/fixtures/tada-release-shapes.json, dumped from hume-tada's own constructors by
tools/oracle/tada/dump_release_shapes.py): the 1B LM (Llama 3.2 1B + TADA's defaults, the tied
head left out as save_pretrained does), the codec decoder and encoder at their class defaults.
Built on the meta device: no memory."""

from __future__ import annotations

import json

import torch

from tts_core.models.tada.checkpoint import CODEC_DERIVED_BUFFERS
from tts_core.models.tada.codec import TadaDecoder, TadaEncoder
from tts_core.models.tada.config import CodecStackConfig, LMConfig
from tts_core.models.tada.lm import TadaLM

from .conftest import FIXTURES

RELEASE = json.loads((FIXTURES / "tada-release-shapes.json").read_text())


def ours(module: torch.nn.Module) -> dict[str, list[int]]:
    return {k: list(v.shape) for k, v in module.state_dict().items()}


def official(part: str) -> dict[str, list[int]]:
    return {k: v for k, v in RELEASE[part].items() if not k.endswith(CODEC_DERIVED_BUFFERS)}


def test_lm_at_release_size(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(RELEASE["llama_config"]))
    with torch.device("meta"):
        lm = TadaLM(LMConfig.from_folder(tmp_path))
    assert ours(lm) == official("model")


def test_codec_at_release_size():
    with torch.device("meta"):
        decoder = TadaDecoder(CodecStackConfig())
        encoder = TadaEncoder(CodecStackConfig(strides=(6, 5, 4, 4)))
    assert ours(decoder) == official("decoder")
    assert ours(encoder) == official("encoder")
