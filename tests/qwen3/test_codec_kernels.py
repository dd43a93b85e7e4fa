"""SnakeBeta's one-pass kernel (models/native/snake_beta.c) is bit for bit torch's five operations.

float32 calls the sin torch calls (MKL's vmsSin on an AVX-512 build with MKL); bfloat16 looks
sin(t)^2 up in a table torch computed, for every bfloat16 t. Each multiply and add rounds as
torch's (bfloat16: to nearest even after every step), so the outputs are equal, not close: any
difference is a bug. Where the kernel cannot run, SnakeBeta runs the torch operations and the
kernel tests are skipped.
"""

from __future__ import annotations

import pytest
import torch

from tts_core.models.qwen3_tts.codec import kernels
from tts_core.models.qwen3_tts.codec.layers import SnakeBeta

DTYPES = [torch.float32, torch.bfloat16]
needs_kernel = pytest.mark.skipif(
    kernels._kernel() is None, reason="no codec kernels here (torch path)"
)


def random_snake(channels: int, seed: int, dtype: torch.dtype) -> tuple[SnakeBeta, torch.Generator]:
    """A SnakeBeta with N(0, 0.5) alpha and beta in `dtype`, and the generator that drew them."""
    snake = SnakeBeta(channels)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        snake.alpha.normal_(0.0, 0.5, generator=generator)
        snake.beta.normal_(0.0, 0.5, generator=generator)
    snake.refresh_derived()
    return snake.to(dtype), generator


def _plain(x: torch.Tensor, alpha: torch.Tensor, inv_beta: torch.Tensor) -> torch.Tensor:
    return x + inv_beta * torch.pow(torch.sin(x * alpha), 2)


def _inputs(dtype: torch.dtype, channels: int, steps: int, scale: float, seed: int):
    generator = torch.Generator().manual_seed(seed)
    x = (scale * torch.randn(2, channels, steps, generator=generator)).to(dtype)
    alpha = torch.randn(1, channels, 1, generator=generator).exp().to(dtype)
    inv_beta = torch.randn(1, channels, 1, generator=generator).exp().to(dtype)
    return x, alpha, inv_beta


@needs_kernel
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("threads", [1, 2])
def test_kernel_is_the_torch_operations_bit_for_bit(dtype: torch.dtype, threads: int) -> None:
    """Lengths around the kernel's 16-lane vectors and 4096-sample blocks, arguments up to
    ~1e4 (sin's range reduction), into a new tensor, a strided window and in place."""
    saved = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        for seed, steps in enumerate([1, 15, 16, 17, 33, 4095, 4096, 4097, 11574]):
            for scale in (1.0, 30.0, 3000.0):
                x, alpha, inv_beta = _inputs(dtype, 5, steps, scale, seed)
                expected = _plain(x, alpha, inv_beta)
                assert torch.equal(kernels.snake_beta(x, alpha, inv_beta, None), expected)
                window = torch.full((2, 5, steps + 6), 7.0, dtype=dtype)
                kernels.snake_beta(x, alpha, inv_beta, window[..., 6:])
                assert torch.equal(window[..., 6:], expected)
                assert (window[..., :6] == 7).all()
                kernels.snake_beta(x, alpha, inv_beta, x)
                assert torch.equal(x, expected)
    finally:
        torch.set_num_threads(saved)


@needs_kernel
@pytest.mark.parametrize("dtype", DTYPES)
def test_time_major_inputs_are_the_torch_operations_bit_for_bit(dtype: torch.dtype) -> None:
    """A laid-out conv's output is time-major (B, C, T) with strides (C T, 1, C): into a new
    tensor of its strides, a channel-major window (one copy) and in place."""
    for seed, (channels, steps) in enumerate([(5, 3), (16, 17), (24, 40), (768, 12)]):
        x, alpha, inv_beta = _inputs(dtype, channels, steps, 20.0, seed)
        x = x.transpose(1, 2).contiguous().transpose(1, 2)
        expected = _plain(x, alpha, inv_beta)
        fresh = kernels.snake_beta(x, alpha, inv_beta, None)
        assert fresh.stride() == x.stride() and torch.equal(fresh, expected)
        window = torch.full((2, channels, steps + 3), 7.0, dtype=dtype)
        kernels.snake_beta(x, alpha, inv_beta, window[..., 3:])
        assert torch.equal(window[..., 3:], expected) and (window[..., :3] == 7).all()
        kernels.snake_beta(x, alpha, inv_beta, x)
        assert torch.equal(x, expected)


def test_the_bfloat16_table_is_torch_sin_squared_for_every_value() -> None:
    every = torch.arange(2**16, dtype=torch.int32)
    values = torch.where(every >= 2**15, every - 2**16, every).to(torch.int16)
    t = values.view(torch.bfloat16)
    expected = torch.pow(torch.sin(t), 2).view(torch.int16)
    assert torch.equal(kernels.square_sin_table()[: 2**16], expected)


@pytest.mark.parametrize("dtype", DTYPES)
def test_the_module_gives_the_same_bits_with_and_without_the_kernel(
    dtype: torch.dtype, monkeypatch
) -> None:
    snake, generator = random_snake(8, 5, dtype)
    x = (3 * torch.randn(1, 8, 333, generator=generator)).to(dtype)
    with torch.no_grad():
        fused = snake(x)
        monkeypatch.setattr(kernels, "_kernel", lambda: None)
        assert torch.equal(snake(x), fused)
        assert torch.equal(fused, _plain(x, snake.alpha_exp, snake.inv_beta))


def test_what_the_kernel_does_not_take_runs_on_torch() -> None:
    """float64, a strided time axis or gradients: None, nothing written."""
    x, alpha, inv_beta = _inputs(torch.float32, 3, 40, 1.0, 0)
    out = torch.zeros_like(x)
    assert kernels.snake_beta(x.double(), alpha.double(), inv_beta.double(), None) is None
    assert kernels.snake_beta(x[..., ::2], alpha, inv_beta, None) is None
    with torch.enable_grad():
        assert kernels.snake_beta(x.requires_grad_(), alpha, inv_beta, out) is None
    assert (out == 0).all()
