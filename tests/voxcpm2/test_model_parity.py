"""Our VoxCPM2 components and tokenizer against the official voxcpm==2.0.3 goldens.

Tolerances: the float error model of tests/qwen3/conftest.py (see tests/voxcpm2/conftest.py):
float32 results within 5 E of the float32 golden and 4 E of the exact float64 value, E being
the golden's recorded float32 error; float64 results within 8 E x 2^-29.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from qwen3.conftest import check_fp32, fp64_bound

from .conftest import shared_model

COMPONENTS = ("locenc", "locdit", "base_lm", "residual_lm", "fsq", "stop_logits", "cfm")


def components(net, g) -> dict[str, torch.Tensor]:
    x = {k: v.to(net.dtype) for k, v in g.items() if k.startswith("in_")}
    zeros = torch.zeros(2, dtype=net.dtype)
    dit = net.feat_decoder.estimator
    noise = torch.randn(
        (1, net.cfg.feat_dim, net.cfg.patch_size), generator=torch.Generator().manual_seed(7)
    )
    with torch.inference_mode():
        return {
            "locenc": net.feat_encoder(x["in_patches"]),
            "locdit": dit(x["in_dit_x"], x["in_dit_mu"], x["in_dit_t"], x["in_dit_cond"], zeros),
            "base_lm": net.base_lm.run(x["in_lm_embeds"]),
            "residual_lm": net.residual_lm.run(x["in_lm_embeds"]),
            "fsq": net.fsq_layer(x["in_hidden"]),
            "stop_logits": net.stop_head(F.silu(net.stop_proj(x["in_hidden"]))),
            "cfm": net.feat_decoder(noise.to(net.dtype), x["in_cfm_mu"], x["in_cfm_cond"], 6, 2.0),
        }


def test_tokenizer_matches_official(model_folder, model_goldens) -> None:
    model = shared_model(model_folder)
    for case in model_goldens.meta["tokenizer"]:
        assert model.tokenizer.encode(case["text"]) == case["ids"], case["text"]


def test_components_match_official(model_folder, model_goldens) -> None:
    ours = components(shared_model(model_folder).net, model_goldens)
    for key in COMPONENTS:
        print(model_folder.name, check_fp32(ours[key], model_goldens, key))


@pytest.mark.parametrize("key", COMPONENTS)
def test_components_float64_match_official_float64(model_folder, model_goldens, key) -> None:
    """Our math in float64 equals the official modules in float64 to float64 rounding."""
    ours = components(shared_model(model_folder, torch.float64).net, model_goldens)[key]
    assert ours.dtype == torch.float64
    error = float((ours - model_goldens[f"{key}_fp64"]).abs().max())
    bound = fp64_bound(model_goldens, key)
    print(f"{model_folder.name} {key} fp64: {error:.3g} (bound {bound:.3g})")
    assert error <= bound, (key, error, bound)
