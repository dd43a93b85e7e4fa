"""The codec decoder (local attention under the v2 block mask, then the DAC-style CNN) against
the official goldens `decoder_*`: the transformer output and the waveform within the float32
error model (conftest.check_fp32: 5 E, E from the oracle's float64 rerun), the length exact."""

from __future__ import annotations

import pytest
import torch

from tts_core.models.checkpoint import CheckpointError
from tts_core.models.tada.checkpoint import load_decoder
from tts_core.models.tada.codec import decoder_segment_mask, encoder_segment_mask

from .conftest import check_fp32, tensor


def test_decoder_matches_golden(tiny_folder, goldens):
    decoder = load_decoder(tiny_folder / "codec")
    expanded, masks = tensor(goldens, "decoder_in_expanded"), tensor(goldens, "decoder_in_masks")
    with torch.no_grad():
        print(check_fp32(decoder.hidden(expanded, masks), goldens, "decoder_hidden"))
        print(check_fp32(decoder.decode(expanded, masks), goldens, "decoder_wav"))


def test_encoder_v2_mask_rules():
    """Frames 0..6 with marks at 2 and 5: blocks [0,1] [2,3,4] [5,6] (a mark starts a block).
    Unmarked frames see the unmarked frames of their block; a marked frame its whole block and
    the previous block's unmarked frames."""
    allowed = encoder_segment_mask(torch.tensor([[0, 0, 1, 0, 0, 1, 0]]))[0, 0]
    expect = {
        0: [0, 1],
        1: [0, 1],
        2: [0, 1, 2, 3, 4],
        3: [3, 4],
        4: [3, 4],
        5: [3, 4, 5, 6],
        6: [6],
    }
    for i, row in expect.items():
        assert allowed[i].nonzero().flatten().tolist() == row, i


def test_decoder_v2_mask_rules():
    """Marks at 2 and 5: blocks [0,1,2] [3,4,5] [6] (a mark ends a block); every frame sees its
    block and the previous one."""
    allowed = decoder_segment_mask(torch.tensor([[0, 0, 1, 0, 0, 1, 0]]))[0, 0]
    expect = {
        0: [0, 1, 2],
        2: [0, 1, 2],
        3: [0, 1, 2, 3, 4, 5],
        5: [0, 1, 2, 3, 4, 5],
        6: [3, 4, 5, 6],
    }
    for i, row in expect.items():
        assert allowed[i].nonzero().flatten().tolist() == row, i


def test_decoder_load_is_strict(tiny_folder, tmp_path):
    """A folder whose weights miss a key fails loading with the key named."""
    from safetensors.torch import load_file, save_file

    source = tiny_folder / "codec" / "decoder"
    state = load_file(source / "model.safetensors")
    state.pop("decoder_proj.bias")
    (tmp_path / "decoder").mkdir()
    save_file(state, tmp_path / "decoder" / "model.safetensors")
    (tmp_path / "decoder" / "config.json").write_text((source / "config.json").read_text())
    with pytest.raises(CheckpointError, match="decoder_proj.bias"):
        load_decoder(tmp_path)
