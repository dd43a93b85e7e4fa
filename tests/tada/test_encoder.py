"""The codec encoder against the official goldens: `encoder_hidden` (get_encoder_outputs on the
reference clip with the official aligner's token marks) within 5 E, and the seeded token values
(`prompt_token_values`: the official Encoder.forward, N(0, 0.5^2) noise at token frames from
seed 11 after the aligner's draws, then one vector per token) within 5 E."""

from __future__ import annotations

import json

import torch

from tts_core.models.tada.checkpoint import load_encoder

from .conftest import check_fp32, tensor

ENCODER_SEED = 11  # make_goldens.SEEDS["encoder"]


def aligner_layers(folder) -> int:
    """transformers' Wav2Vec2Encoder draws torch.rand([]) per layer on every forward (its
    LayerDrop test, drawn even in eval mode): the official Encoder.forward runs the aligner
    before drawing its noise, so the noise starts after that many draws."""
    config = json.loads((folder / "codec" / "aligner" / "encoder_config.json").read_text())
    return config["num_hidden_layers"]


def test_encoder_matches_golden(tiny_folder, goldens):
    encoder = load_encoder(tiny_folder / "codec")
    audio, marks = tensor(goldens, "prompt_audio"), tensor(goldens, "aligner_masks")
    with torch.no_grad():
        hidden, masks = encoder.hidden(audio, marks)
        assert masks.tolist() == goldens["encoder_masks"].tolist()
        print(check_fp32(hidden, goldens, "encoder_hidden"))
        generator = torch.Generator().manual_seed(ENCODER_SEED)
        for _ in range(aligner_layers(tiny_folder)):  # the aligner's LayerDrop draws come first
            torch.rand([], generator=generator)
        values = encoder.token_values(
            hidden, masks, tensor(goldens, "aligner_positions"), generator
        )
        print(check_fp32(values, goldens, "prompt_token_values"))
