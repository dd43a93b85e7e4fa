"""The S3Gen work of several Chatterbox Turbo streams in one padded pass (an R port's
`generate_batch`): per row its flow encoder, then ONE meanflow CFM solve over the rows padded to
the longest and ONE HiFT decoder call, each row trimmed to its own length, without the three
padded-batch leaks (tests/chatterbox/test_batch_leaks.py): lengths per row (`row_lengths`),
the estimator's attention masked, every HiFT conv re-zeroed past a row's end. runner.py runs
it only where `padded_s3gen_exact` finds it bit-identical to the rows alone."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch
import torch.nn.functional as F

from .config import MELS
from .flow import TOKEN_MEL_RATIO, Flow
from .hift import LRELU_SLOPE, RESBLOCK_KERNELS, UPSAMPLE_RATES, HiFTGenerator, ResBlock
from .streaming import FlowChunker, FlowWindow, S3GenStream


def make_pad_mask(lengths: torch.Tensor, max_len: int | None = None) -> torch.Tensor:
    """(B,) lengths -> (B, max_len) bool, True at padded positions (the official's). Refuses
    any other shape: (1, 1) + (B,) broadcasts to (1, B), ONE row of B "positions" (leak 1)."""
    if lengths.ndim != 1:
        raise ValueError(f"lengths must be (B,), got {tuple(lengths.shape)}")
    max_len = int(lengths.max()) if max_len is None else int(max_len)
    positions = torch.arange(max_len, device=lengths.device)
    return positions[None, :] >= lengths[:, None]


def row_lengths(prompt_token_len: list[torch.Tensor], token_len: list[int]) -> torch.Tensor:
    """Each row's token count, prompt + generated, as (B,): every row's prompt_token_len
    (whatever its shape, e.g. the official's (1, 1) or (1,)) reduced to its one value first."""
    prompt = torch.stack([torch.as_tensor(p).reshape(()) for p in prompt_token_len]).long()
    return prompt + torch.as_tensor(token_len, dtype=torch.long)


@dataclass
class CfmRow:
    """One row's CFM inputs, as Flow.inference makes them before its Euler steps."""

    z: torch.Tensor  # (1, 80, T)
    mu: torch.Tensor  # (1, 80, T)
    spks: torch.Tensor  # (1, 80)
    cond: torch.Tensor  # (1, 80, T)
    prompt_mels: int
    prompt_token_len: torch.Tensor  # the prompt's token count, shaped (1, 1) as the official's
    token_len: int  # generated tokens: T = 2 (prompt_token_len + token_len)
    window: FlowWindow | None = None  # the pass's window (None: a test's hand-made row)


def cfm_row(flow: Flow, chunker: FlowChunker, tokens: torch.Tensor) -> CfmRow:
    """Flow.inference's work up to the Euler steps for one row (its encoder alone: it attends
    over the whole row), over the pass's window (FlowChunker.push's arguments)."""
    w = chunker.window(tokens)
    z, mu, spks, cond = flow.cfm_inputs(*chunker.flow_inputs(w))
    prompt_token_len = torch.tensor([[w.prompt_token.shape[1]]])
    mels, n = w.prompt_feat.shape[1], w.tokens.shape[1]
    return CfmRow(z, mu, spks, cond, mels, prompt_token_len, n, w)


def padded_cfm(flow: Flow, rows: list[CfmRow], mask_attention: bool = True) -> list[torch.Tensor]:
    """ONE meanflow Euler solve over the rows zero-padded to the longest, with a (B, 1, T) mask
    of the per-row lengths (convs and attention masked; `mask_attention=False`: attention not,
    leak 2, tests only): each row's generated mel (1, 80, T_i - prompt_mels_i)."""
    if not getattr(flow, "meanflow", True):
        raise ValueError("padded_cfm solves Turbo's meanflow CFM only")
    tokens = row_lengths([row.prompt_token_len for row in rows], [row.token_len for row in rows])
    lengths = TOKEN_MEL_RATIO * tokens  # (B,): the encoder upsamples x2
    if lengths.tolist() != [row.mu.shape[2] for row in rows]:
        raise ValueError("a row's mu is not 2 x (prompt + generated tokens) frames long")
    longest = int(lengths.max())

    def pad(parts: list[torch.Tensor]) -> torch.Tensor:
        return torch.cat([F.pad(p, (0, longest - p.shape[2])) for p in parts], dim=0)

    x, mu, cond = (pad([getattr(r, k) for r in rows]) for k in ("z", "mu", "cond"))
    spks = torch.cat([row.spks for row in rows], dim=0)
    mask = (~make_pad_mask(lengths, longest)).to(mu.dtype)[:, None, :].to(mu.device)  # (B,1,T)
    solve = flow._euler if mask_attention else partial(_unmasked, flow._euler)
    x = solve(x, mu, mask, spks, cond)  # Flow.inference's meanflow solve, over the batch
    return [x[i : i + 1, :, row.prompt_mels : int(lengths[i])] for i, row in enumerate(rows)]


def _unmasked(solve, *args) -> torch.Tensor:
    """`solve` with an additive attention bias of 0: the blocks unmasked (leak 2)."""
    from . import estimator

    saved, estimator.MASK_BIAS = estimator.MASK_BIAS, 0.0
    try:
        return solve(*args)
    finally:
        estimator.MASK_BIAS = saved


def _conv_masked(conv, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return conv(x) * mask


def _resblock_masked(block: ResBlock, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """ResBlock.forward with every conv's output re-zeroed past each row's end (so the next
    conv's input there is the zeros its own padding would give the row alone)."""
    for conv1, conv2, act1, act2 in zip(
        block.convs1, block.convs2, block.activations1, block.activations2, strict=True
    ):
        x = _conv_masked(conv2, act2(_conv_masked(conv1, act1(x), mask)), mask) + x
    return x


def padded_hift_decode(
    hift: HiFTGenerator, mels: list[torch.Tensor], sources: list[torch.Tensor]
) -> list[torch.Tensor]:
    """HiFTGenerator.decode of several rows in ONE decoder pass: mels (1, 80, F_i) and sources
    (1, 1, 480 F_i) zero-padded, re-zeroed past a row's end after every conv (a 'same'-padded
    conv reads its neighbours), the STFT and iSTFT per row (padding at each row's own end):
    each row's waveform (480 F_i,)."""
    frames = [mel.shape[2] for mel in mels]
    longest = max(frames)
    device = mels[0].device
    window = hift._window(device)

    def masks(per_row: list[int], total: int) -> torch.Tensor:
        lengths = torch.tensor(per_row, device=device)
        return (~make_pad_mask(lengths, total)).to(mels[0].dtype)[:, None, :]

    specs = [hift.source_stft(source, window) for source in sources]  # (1, 18, 120 F + 1)
    spec_len = 120 * longest + 1
    s_stft = torch.cat([F.pad(s, (0, spec_len - s.shape[2])) for s in specs], dim=0)
    x = torch.cat([F.pad(m, (0, longest - m.shape[2])) for m in mels], dim=0)
    x = hift.conv_pre(x) * masks(frames, longest)
    kernels, scale, total = len(RESBLOCK_KERNELS), 1, longest
    for i, up in enumerate(hift.ups):
        scale *= UPSAMPLE_RATES[i]
        lengths, total = [f * scale for f in frames], longest * scale
        x = up(F.leaky_relu(x, LRELU_SLOPE))
        if i == len(hift.ups) - 1:
            x = F.pad(x, (1, 0), mode="reflect")
            lengths, total = [n + 1 for n in lengths], total + 1
        mask = masks(lengths, total)
        x = x * mask
        down = hift.source_downs[i](s_stft) * mask
        x = x + _resblock_masked(hift.source_resblocks[i], down, mask)
        xs = _resblock_masked(hift.resblocks[i * kernels], x, mask)
        for j in range(1, kernels):
            xs += _resblock_masked(hift.resblocks[i * kernels + j], x, mask)
        x = xs / kernels
    x = hift.conv_post(F.leaky_relu(x))
    return [hift.waveform(x[row : row + 1, :, :n], window)[0] for row, n in enumerate(lengths)]


@torch.inference_mode()
def padded_s3gen_push(
    flow: Flow, hift: HiFTGenerator, jobs: list[tuple[S3GenStream, torch.Tensor, bool]]
) -> list[torch.Tensor]:
    """Each job's S3GenStream.push(tokens, final) with the rows' CFM solves as one padded solve
    and their HiFT decoder calls as one padded call (module doc)."""
    rows = [cfm_row(flow, stream.flow, tokens) for stream, tokens, _ in jobs]
    mels = padded_cfm(flow, rows)
    news = [  # FlowChunker.push's hand-out of each pass's stable frames
        stream.flow.take(mel, row.window, row.window.skipped + row.token_len, final)
        for (stream, _, final), mel, row in zip(jobs, mels, rows, strict=True)
    ]
    windows = [
        stream.hift.window(new, final) for (stream, _, final), new in zip(jobs, news, strict=True)
    ]
    due = [i for i, w in enumerate(windows) if w is not None]
    out = [news[i].new_zeros(0) for i in range(len(jobs))]
    if due:
        waves = padded_hift_decode(hift, [windows[i][0] for i in due], [windows[i][1] for i in due])
        for i, wav in zip(due, waves, strict=True):
            out[i] = jobs[i][0].hift.finish(wav, windows[i][2], windows[i][3])
    return out


_exact: dict[tuple, bool] = {}
_exact_lock = threading.Lock()


@torch.inference_mode()
def padded_s3gen_exact(model: Any, rows: int) -> bool:
    """Does the padded S3Gen pass of `model` (a Turbo) give each of `rows` ragged rows its bits
    alone? Probed once per (rows, threads, device) on random rows 8 frames apart (a kernel that
    blocks by shape shows; no proof for every length)."""
    key = (rows, torch.get_num_threads(), str(model.device), id(model))
    with _exact_lock:
        if key not in _exact:
            _exact[key] = _probe(model, rows)
        return _exact[key]


def _probe(model: Any, rows: int) -> bool:
    flow, hift, device = model.flow, model.hift, model.device
    generator = torch.Generator().manual_seed(rows)
    cfm_rows, mels, sources = [], [], []
    for i in range(rows):
        frames = TOKEN_MEL_RATIO * (12 + 4 * i)  # rows 8 frames apart
        z, mu, cond = (
            torch.randn(1, MELS, frames, generator=generator).to(device) for _ in range(3)
        )
        spks = torch.randn(1, MELS, generator=generator).to(device)
        cfm_rows.append(CfmRow(z, mu, spks, cond, 4, torch.tensor([[2]]), 10 + 4 * i))
        mels.append(torch.randn(1, MELS, frames, generator=generator).to(device))
        sources.append(0.1 * torch.randn(1, 1, 480 * frames, generator=generator).to(device))
    together = padded_cfm(flow, cfm_rows)
    for row, mel in zip(cfm_rows, together, strict=True):
        if not torch.equal(
            flow._euler(row.z, row.mu, torch.ones_like(row.mu[:, :1]), row.spks, row.cond)[
                ..., row.prompt_mels :
            ],
            mel,
        ):
            return False
    waves = padded_hift_decode(hift, mels, sources)
    return all(
        torch.equal(hift.decode(m, s)[0], w) for m, s, w in zip(mels, sources, waves, strict=True)
    )
