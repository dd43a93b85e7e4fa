"""GPT-2 stack of the Turbo T3 (HF `GPT2Model` as Chatterbox builds it: learned positions `wpe`,
pre-LayerNorm blocks with biased fused projections, gelu_new MLP, final `ln_f`). Not
layers.Attention: GPT-2's `Conv1D` stores one fused [in, out] matrix and runs `addmm(bias, x,
W)`; F.linear would transpose it and change the BLAS call (and its rounding). Attribute names
are the checkpoint's (`tfmr.h.N.attn.c_attn`, ...).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ..layers import KVCache, causal_mask, scaled_dot_product

LN_EPS = 1e-5  # GPT2_medium layer_norm_epsilon


class Conv1D(nn.Module):
    """GPT-2's linear layer: weight [in, out], y = addmm(bias, x, W) (the official call)."""

    def __init__(self, n_in: int, n_out: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n_in, n_out))
        self.bias = nn.Parameter(torch.empty(n_out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.addmm(self.bias, x.reshape(-1, x.shape[-1]), self.weight)
        return out.view(*x.shape[:-1], out.shape[-1])


def gelu_new(x: torch.Tensor) -> torch.Tensor:
    """HF NewGELUActivation, the same ops and roundings: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715
    x^3))), each step in place on the one temporary (a product or sum of two is the same either
    way round)."""
    inner = torch.pow(x, 3.0).mul_(0.044715).add_(x).mul_(math.sqrt(2.0 / math.pi))
    return (0.5 * x).mul_(inner.tanh_().add_(1.0))


class FusedKV(KVCache):
    """A KVCache whose k and v are the halves of one (2, B, heads, L, D) tensor: a step stores
    its keys and values with one copy from c_attn's output and reads them back with one slice.
    Not zeroed: a position is read only once written (`store`, `write`: [0, end)). A request's
    caches hold prompt + text + every draw (~1,400 positions, 275 MB at the released size):
    zeroing them cost the first audio ~90 ms of memset and page faults (a busy 2-core Zen 5)."""

    def __init__(self, batch: int, heads: int, max_len: int, head_dim: int, dtype, device) -> None:
        self.kv = torch.empty(2, batch, heads, max_len, head_dim, dtype=dtype, device=device)
        self.k, self.v = self.kv.unbind(0)

    def store(self, start: int, kv: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """kv (2, B, heads, T, D) at [start, start+T) -> keys, values (B, heads, start+T, D)."""
        end = start + kv.shape[3]
        if end > self.max_len:
            raise RuntimeError(f"KV cache overflow: position {end} > capacity {self.max_len}")
        self.kv.narrow(3, start, kv.shape[3]).copy_(kv)
        return self.kv.narrow(3, 0, end).unbind(0)


class GPT2Attention(nn.Module):
    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, hidden // heads
        self.c_attn = Conv1D(hidden, 3 * hidden)
        self.c_proj = Conv1D(hidden, hidden)

    def forward(
        self, x: torch.Tensor, cache: FusedKV | list[FusedKV], start: int | list[int]
    ) -> torch.Tensor:
        """x (B, T, H) at positions [start, start+T), keys/values appended to `cache`; or one
        position per row (T = 1), row b at start[b] with its own cache[b] (T3Turbo.feed)."""
        batch, steps, hidden = x.shape
        # (3, B, heads, T, D): q, k, v as views of c_attn's one (B, T, 3H) output
        qkv = self.c_attn(x).view(batch, steps, 3, self.heads, self.head_dim)
        qkv = qkv.permute(2, 0, 3, 1, 4)
        if isinstance(start, list):
            q, k, v = qkv.unbind(0)
            out = torch.cat(
                [
                    self._attend(
                        q[b : b + 1], *cache[b].write(start[b], k[b : b + 1], v[b : b + 1])
                    )
                    for b in range(batch)
                ]
            )
        else:
            out = self._attend(qkv[0], *cache.store(start, qkv[1:]))  # (B, heads, T, D)
        if steps > 1:
            out = out.transpose(1, 2)
        return self.c_proj(out.reshape(batch, steps, hidden))  # one position: heads in order

    @staticmethod
    def _attend(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        """q (B, heads, T, D) at the last T of the S keys/values (B, heads, S, D) -> (B, heads,
        T, D)."""
        steps, start = q.shape[2], keys.shape[2] - q.shape[2]
        # HF's SDPA path: is_causal for a prefill from 0, no mask for one new query; a pass
        # after a cached voice prefix: query i sees keys <= start + i.
        if steps > 1 and start != 0:
            mask = causal_mask(steps, start, q.device)
            return scaled_dot_product(q, keys, values, mask=mask)
        return scaled_dot_product(q, keys, values, is_causal=steps > 1)


class GPT2MLP(nn.Module):
    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.c_fc = Conv1D(hidden, 4 * hidden)
        self.c_proj = Conv1D(4 * hidden, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(gelu_new(self.c_fc(x)))


class GPT2Block(nn.Module):
    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(hidden, eps=LN_EPS)
        self.attn = GPT2Attention(hidden, heads)
        self.ln_2 = nn.LayerNorm(hidden, eps=LN_EPS)
        self.mlp = GPT2MLP(hidden)

    def forward(
        self, x: torch.Tensor, cache: KVCache | list[KVCache], start: int | list[int]
    ) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x), cache, start)
        return x + self.mlp(self.ln_2(x))


class GPT2Stack(nn.Module):
    """`tfmr` without `wte` (inputs are embeddings): wpe + blocks `h` + `ln_f`."""

    def __init__(self, hidden: int, heads: int, layers: int, positions: int) -> None:
        super().__init__()
        self.heads = heads
        self.wpe = nn.Embedding(positions, hidden)
        self.h = nn.ModuleList(GPT2Block(hidden, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(hidden, eps=LN_EPS)

    def new_caches(self, batch: int, max_len: int, dtype: torch.dtype, device) -> list[FusedKV]:
        hidden = self.wpe.weight.shape[1]
        if max_len > self.wpe.weight.shape[0]:
            raise ValueError(f"{max_len} positions > the model's {self.wpe.weight.shape[0]}")
        return [
            FusedKV(batch, self.heads, max_len, hidden // self.heads, dtype, device) for _ in self.h
        ]

    def forward(self, embeds: torch.Tensor, caches: list, start: int | list[int]) -> torch.Tensor:
        """embeds (B, T, H) at positions [start, start+T) -> ln_f hidden states (B, T, H); a
        list `start`: one step of B rows, row b at start[b] with caches[layer][b] (`feed`)."""
        if isinstance(start, list):
            positions = torch.tensor(start, device=embeds.device)[:, None]  # (B, 1)
            x = embeds + self.wpe(positions)
        else:  # wpe's rows [start, start+T) (T, H), broadcast over the batch
            x = embeds + self.wpe.weight.narrow(0, start, embeds.shape[1])
        for block, cache in zip(self.h, caches, strict=True):
            x = block(x, cache, start)
        return self.ln_f(x)
