"""Logits processors one by one, their order, the EOS mask and seeded reproducibility."""

from __future__ import annotations

import pytest
import torch

from tts_core.models.qwen3_tts.sampling import (
    SamplingParams,
    TalkerSampler,
    draw,
    draw_rows,
    make_generator,
    probabilities,
    repetition_penalty,
    suppressed_ids,
    top_k,
    top_p,
)

EOS = 2150
VOCAB = 3072
GREEDY = SamplingParams(do_sample=False, temperature=1.0, top_k=0, top_p=1.0)


def _sampler(params: SamplingParams, seed: int = 0, window: int | None = None) -> TalkerSampler:
    return TalkerSampler(
        params,
        eos_id=EOS,
        suppressed=suppressed_ids(VOCAB, EOS, "cpu"),
        generator=make_generator(seed),
        penalty_window=window,
    )


def test_repetition_penalty_divides_positive_multiplies_negative_once() -> None:
    logits = torch.tensor([[2.0, -2.0, 1.0, 0.5]])
    history = torch.tensor([[0, 1, 0, 0]])  # id 0 three times: penalized once
    out = repetition_penalty(logits, history, 2.0)
    assert out.tolist() == [[1.0, -4.0, 1.0, 0.5]]
    assert repetition_penalty(logits, history[:, :0], 2.0) is logits


def test_suppressed_range_is_non_audio_except_eos() -> None:
    ids = suppressed_ids(VOCAB, EOS, "cpu").tolist()
    assert ids == [i for i in range(2048, 3072) if i != EOS]


def test_talker_never_picks_a_suppressed_id_and_masks_eos_for_two_draws() -> None:
    logits = torch.full((1, VOCAB), -5.0)
    logits[0, 2500] = 100.0  # suppressed
    logits[0, EOS] = 50.0
    logits[0, 7] = 1.0
    sampler = _sampler(GREEDY)
    assert sampler(logits, torch.zeros(1, 0, dtype=torch.long)).item() == 7
    assert sampler(logits, torch.tensor([[7]])).item() == 7
    assert sampler(logits, torch.tensor([[7, 7]])).item() == EOS


def test_top_k_runs_after_suppression_and_eos_mask() -> None:
    # With top_k=1 applied before suppression only id 2500 would survive and then be masked.
    logits = torch.full((1, VOCAB), -5.0)
    logits[0, 2500] = 100.0
    logits[0, EOS] = 90.0
    logits[0, 11] = 3.0
    params = SamplingParams(do_sample=True, temperature=0.9, top_k=1, top_p=1.0)
    for seed in range(3):
        assert _sampler(params, seed)(logits, torch.zeros(1, 0, dtype=torch.long)).item() == 11


def test_repetition_penalty_applies_before_the_choice_and_window_limits_it() -> None:
    logits = torch.full((1, VOCAB), -5.0)
    logits[0, 3] = 2.0
    logits[0, 4] = 1.5
    params = SamplingParams(
        do_sample=False, temperature=1.0, top_k=0, top_p=1.0, repetition_penalty=2.0
    )
    history = torch.tensor([[3, 9, 9]])
    assert _sampler(params)(logits, history).item() == 4  # 2.0 / 2 < 1.5
    assert _sampler(params, window=2)(logits, history).item() == 3  # 3 is outside the window


def test_top_k_and_top_p_filters() -> None:
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    kept_k = torch.isfinite(top_k(logits, 2))
    assert kept_k.tolist() == [[True, True, False, False]]
    kept_p = torch.isfinite(top_p(logits, 0.7))
    assert kept_p.tolist() == [[True, True, False, False]]
    assert torch.isfinite(top_p(logits, 0.01)).sum() == 1  # the top id always stays


def test_temperature_sharpens_the_distribution() -> None:
    logits = torch.tensor([[1.0, 0.0]])
    counts = []
    for value in (2.0, 0.25):
        params = SamplingParams(do_sample=True, temperature=value, top_k=0, top_p=1.0)
        generator = make_generator(0)
        picks = [draw(logits, params, generator).item() for _ in range(400)]
        counts.append(picks.count(0))
    assert counts[1] > counts[0] + 50


def test_seed_reproducibility() -> None:
    logits = torch.zeros(1, 2048)
    params = SamplingParams(do_sample=True, temperature=0.9, top_k=50, top_p=1.0)

    def run(seed: int) -> list[int]:
        generator = make_generator(seed)
        return [draw(logits, params, generator).item() for _ in range(20)]

    assert run(5) == run(5)
    assert run(5) != run(6)


def _multinomial(logits: torch.Tensor, params: SamplingParams, seed: int) -> torch.Tensor:
    """The official draw: torch.multinomial over the warped probabilities."""
    probs = probabilities(logits, params)
    return torch.multinomial(probs, 1, generator=make_generator(seed)).squeeze(1)


@pytest.mark.parametrize("vocab", [7, 2048, 3072])
@pytest.mark.parametrize("rows", [1, 4])
def test_draw_is_torch_multinomial(vocab: int, rows: int) -> None:
    """draw skips multinomial's host-side checks but must pick the same ids from the same
    generator (its algorithm, argmax of p / Exp(1), one draw over the whole tensor)."""
    for seed in range(40):
        logits = torch.randn(rows, vocab, generator=make_generator(seed)) * (1 + seed % 4)
        params = SamplingParams(
            True, (0.6, 0.9, 1.0, 1.4)[seed % 4], (0, 1, 50)[seed % 3], (1.0, 0.9)[seed % 2]
        )
        assert torch.equal(
            draw(logits, params, make_generator(seed)), _multinomial(logits, params, seed)
        )


DEVICES = [
    "cpu",
    pytest.param(
        "cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
    ),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mixed", [True, False])
def test_draw_rows_gives_each_row_what_it_draws_alone(device: str, mixed: bool) -> None:
    """The batch scheduler's draw: rows with their own parameters (greedy among them) and
    generators, warped together where they share parameters, equal row by row to draw alone
    and to the official multinomial; each generator advances as if its row were drawn alone.
    mixed=False: every row shares the parameters (the usual batch, one group)."""
    sampled = SamplingParams(True, 0.9, 50, 1.0)
    others = [GREEDY, SamplingParams(True, 0.7, 5, 0.8), sampled]
    for trial in range(20):
        logits = (torch.randn(8, 2048, generator=make_generator(trial)) * 3).to(device)
        params = [
            sampled if row % 2 or not mixed else others[(row + trial) % 3] for row in range(8)
        ]
        generators = [make_generator(100 * trial + row, device) for row in range(8)]
        ids = draw_rows(logits, params, generators)
        for row in range(8):
            alone = make_generator(100 * trial + row, device)
            assert torch.equal(ids[row : row + 1], draw(logits[row : row + 1], params[row], alone))
            if params[row].do_sample:
                official = torch.multinomial(
                    probabilities(logits[row : row + 1], params[row]),
                    1,
                    generator=make_generator(100 * trial + row, device),
                ).squeeze(1)
                assert torch.equal(ids[row : row + 1], official)
            assert torch.equal(generators[row].get_state(), alone.get_state())


def test_draw_rows_refuses_a_shared_generator_or_missing_rows() -> None:
    logits = torch.randn(2, 16)
    shared = make_generator(0)
    params = SamplingParams(True, 0.9, 5, 1.0)
    with pytest.raises(ValueError, match="own generator"):
        draw_rows(logits, [params, params], [shared, shared])
    with pytest.raises(ValueError, match="as many"):
        draw_rows(logits, [params], [shared])


def test_greedy_is_argmax() -> None:
    logits = torch.randn(3, 2048, generator=torch.Generator().manual_seed(1))
    assert torch.equal(draw(logits, GREEDY, make_generator(0)), logits.argmax(-1))


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(temperature=0.0),
        dict(top_p=0.0),
        dict(top_p=1.5),
        dict(top_k=-1),
        dict(repetition_penalty=0.0),
    ],
)
def test_invalid_parameters_are_rejected(kwargs) -> None:
    values = dict(do_sample=True, temperature=0.9, top_k=50, top_p=1.0) | kwargs
    with pytest.raises(ValueError):
        SamplingParams(**values)
