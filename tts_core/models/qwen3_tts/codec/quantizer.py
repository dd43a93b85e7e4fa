"""Residual vector quantizers of the codec.

Decoder side (`decoder.quantizer.*` keys): split RVQ decode with effective codebooks
`embedding_sum / clamp(cluster_usage, 1e-5)`, precomputed at load time.
Encoder side (`encoder.quantizer.*` keys, Mimi names): nearest-centroid encode.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

_USAGE_EPSILON = 1e-5


def effective_codebook(embedding_sum: torch.Tensor, cluster_usage: torch.Tensor) -> torch.Tensor:
    return embedding_sum / cluster_usage.clamp(min=_USAGE_EPSILON)[:, None]


class _DecoderCodebook(nn.Module):
    def __init__(self, size: int, dim: int) -> None:
        super().__init__()
        self.cluster_usage = nn.Parameter(torch.ones(size))
        self.embedding_sum = nn.Parameter(torch.zeros(size, dim))


class _DecoderCodebookHolder(nn.Module):
    def __init__(self, size: int, dim: int) -> None:
        super().__init__()
        self._codebook = _DecoderCodebook(size, dim)


class _DecoderLayers(nn.Module):
    def __init__(self, count: int, size: int, dim: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList(_DecoderCodebookHolder(size, dim) for _ in range(count))


class DecoderRVQGroup(nn.Module):
    """One group (semantic or acoustic): sum of codebook vectors, then output_proj (1x1 conv).

    `input_proj` is in the checkpoint but only used for encoding, which this side never does.
    """

    def __init__(self, count: int, size: int, dim: int, io_dim: int) -> None:
        super().__init__()
        self.input_proj = nn.Conv1d(io_dim, dim, 1, bias=False)
        self.output_proj = nn.Conv1d(dim, io_dim, 1, bias=False)
        self.vq = _DecoderLayers(count, size, dim)
        self.register_buffer("codebooks", torch.zeros(count, size, dim), persistent=False)

    @torch.no_grad()
    def refresh_derived(self) -> None:
        books = [
            effective_codebook(h._codebook.embedding_sum, h._codebook.cluster_usage)
            for h in self.vq.layers
        ]
        self.codebooks = torch.stack(books).detach()

    def forward(self, codes: torch.Tensor) -> torch.Tensor:  # (B, n_q, T) -> (B, io_dim, T)
        summed = F.embedding(codes[:, 0], self.codebooks[0])
        for index in range(1, codes.shape[1]):
            summed = summed + F.embedding(codes[:, index], self.codebooks[index])
        return self.output_proj(summed.transpose(1, 2))


class DecoderQuantizer(nn.Module):
    """(B, n_q, T) codes -> (B, codebook_dim, T): semantic group + acoustic group."""

    def __init__(self, num_quantizers: int, num_semantic: int, size: int, dim: int, io_dim: int):
        super().__init__()
        self.num_semantic = num_semantic
        self.rvq_first = DecoderRVQGroup(num_semantic, size, dim, io_dim)
        self.rvq_rest = DecoderRVQGroup(num_quantizers - num_semantic, size, dim, io_dim)

    def refresh_derived(self) -> None:
        self.rvq_first.refresh_derived()
        self.rvq_rest.refresh_derived()

    def forward(self, codes: torch.Tensor) -> torch.Tensor:
        first = self.rvq_first(codes[:, : self.num_semantic])
        return first + self.rvq_rest(codes[:, self.num_semantic :])


class _EncoderCodebook(nn.Module):
    def __init__(self, size: int, dim: int) -> None:
        super().__init__()
        self.register_buffer("initialized", torch.ones(1))
        self.register_buffer("cluster_usage", torch.ones(size))
        self.register_buffer("embed_sum", torch.zeros(size, dim))


class _EncoderLayer(nn.Module):
    def __init__(self, size: int, dim: int) -> None:
        super().__init__()
        self.codebook = _EncoderCodebook(size, dim)


class EncoderRVQ(nn.Module):
    """Mimi residual VQ: input_proj (1x1), then per layer nearest centroid and subtract."""

    def __init__(self, count: int, size: int, dim: int, io_dim: int) -> None:
        super().__init__()
        self.input_proj = nn.Conv1d(io_dim, dim, 1, bias=False)
        self.output_proj = nn.Conv1d(dim, io_dim, 1, bias=False)
        self.layers = nn.ModuleList(_EncoderLayer(size, dim) for _ in range(count))
        self.register_buffer("codebooks", torch.zeros(count, size, dim), persistent=False)

    @torch.no_grad()
    def refresh_derived(self) -> None:
        books = [
            effective_codebook(q.codebook.embed_sum, q.codebook.cluster_usage) for q in self.layers
        ]
        self.codebooks = torch.stack(books)

    def encode(self, embeddings: torch.Tensor, count: int) -> torch.Tensor:
        """(B, io_dim, T) -> codes (count, B, T) of the first `count` layers."""
        residual = self.input_proj(embeddings).transpose(1, 2)  # (B, T, dim)
        batch, steps, dim = residual.shape
        codes = []
        for index in range(count):
            book = self.codebooks[index]
            flat = residual.reshape(-1, dim)
            # Same distance computation as the official (torch.cdist in float32), so ties and
            # near-ties resolve to the same index.
            nearest = torch.cdist(flat[None].float(), book[None].float(), p=2)[0].argmin(dim=-1)
            nearest = nearest.view(batch, steps)
            residual = residual - F.embedding(nearest, book)
            codes.append(nearest)
        return torch.stack(codes)
