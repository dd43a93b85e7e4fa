"""VoxCPM2 on the one decode engine (tts_core/serving): its request and its decode step. The
runner reaches the model only through the instance it is given (its public methods).

A step of the rows (`VoxRunner.decode`, spec voxcpm2.md section 9 for each row): the LM step
each row's last patch left pending, then per row its noise (its own generator), mu and the CFM
solve, LocEnc of the new patch and the stop head; the engine appends the patch and hands out a
chunk when due, decoded on the row's own VAE decoder state. Rows with the same number of
diffusion steps solve their CFM together: at each Euler step the LocDiT's transformer runs on
every row's tokens at once (its projections as one GEMM) where this CPU's BLAS gives each row
the bits of the row alone (`serving.rows.rows_invariant`, checked per batch size and thread
count); everything else runs per row with the call one stream makes, because it is not
batch-invariant on a CPU: GEMMs of 1 row (the LM steps, mu, the stop head) or of a few rows
(LocEnc) round by batch shape, the attention kernel differs by batch, a transcendental's tail
loop falls elsewhere in a longer tensor. So a request's patches and audio are bit-identical
alone (`model.stream`, `model.generate`) and in any batch, at any join time.

A prompt is prefilled in one call, as one stream does (a chunked prefill would round
differently), so a joining request delays the running ones by its prefill.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ...audio.cadence import Cadence
from ...serving.batch import BatchEngine
from ...serving.rows import rows_invariant
from ...serving.sequence import Sequence, Status
from .network import DecodeState
from .voice import Voice

MIN_LEN = 2  # the official min_len: the stop head counts from the 4th patch


@dataclass
class Prompt:
    """A request's prompt (model.request builds it): [ref audio] text [prompt audio]."""

    tokens: torch.Tensor  # (1, T) int64
    patches: torch.Tensor  # (1, T, P, D)
    text_mask: torch.Tensor  # (1, T) 0/1 in the model dtype
    audio_mask: torch.Tensor
    cap: int  # patches at most (the length cap)


@dataclass
class AudioChunk:
    audio: np.ndarray  # float32 at sample_rate
    sample_rate: int
    patches: int  # generated patches in this chunk
    stop_reason: str | None = None  # on the last chunk: "stop_head" or "length_cap"
    batch_size: int = 1  # rows stepped together when this chunk's patches were made


@dataclass
class PatchChunk:
    """What a patches-only request (`model.generate`) hands out: generated patches (P, D)."""

    patches: list[torch.Tensor]
    stop_reason: str | None


class VoxSequence(Sequence):
    """One VoxCPM2 request: prompt, voice, sampling (seed -> its own generator, cfg value,
    diffusion steps), and while it runs its LM caches and hidden states, last patch, pending LM
    step and VAE decoder state. The frame limit is the prompt's length cap."""

    def __init__(
        self,
        prompt: Prompt,
        voice: Voice | None,
        sampling: tuple[int, float, int],
        cadence: Cadence,
        should_stop: Callable[[], bool],
        *,
        audio: bool = True,
        outbox: Any = None,
    ) -> None:
        super().__init__(cadence, should_stop, prompt.cap, "length_cap", audio=audio, outbox=outbox)
        seed, self.cfg_value, self.timesteps = sampling
        self.prompt = prompt
        self.voice = voice
        self.generator = torch.Generator("cpu").manual_seed(int(seed))
        self.prompt_len = prompt.tokens.shape[1]
        # set at admission / while running
        self.decoder_state = None
        self.state: DecodeState | None = None  # LM caches, position, lm / residual hidden
        self.prev: torch.Tensor | None = None  # (1, P, D): the last patch (the CFM's cond)
        self.awaiting: torch.Tensor | None = None  # (1, H): LocEnc of the last patch, LM step due

    def noise(
        self, shape: tuple[int, ...], dtype: torch.dtype, device: torch.device
    ) -> torch.Tensor:
        """This patch's noise: randn((1, D, P)) from the request's generator, drawn in float32
        on the CPU (the official draw after torch.manual_seed(seed))."""
        draw = torch.randn(shape, generator=self.generator, dtype=torch.float32)
        return draw.to(device=device, dtype=dtype)


class VoxRunner:
    """The engine's StepModel for VoxCPM2 (tts_core/serving/batch.py)."""

    def __init__(self, model: Any, max_batch: int) -> None:
        """model: the VoxCPMModel whose steps these are (its public methods: prefill,
        new_decoder_state, decode_chunk; its net, config and patch_size)."""
        if max_batch < 1:
            raise ValueError("max_batch must be >= 1")
        self.model = model
        self.net = model.net
        self.max_batch = int(max_batch)
        estimator = self.net.feat_decoder.estimator
        self.dit = estimator.decoder
        self.dit_rows = 2 * (2 * model.patch_size + 3)  # a CFM row pair's tokens
        first = self.dit.layers[0]
        attention, mlp = first.self_attn, first.mlp
        self.dit_linears = [
            attention.q_proj,
            attention.k_proj,
            attention.v_proj,
            attention.o_proj,
            mlp.gate_proj,
            mlp.up_proj,
            mlp.down_proj,
        ]

    def admit(self, seq: VoxSequence) -> bool:
        seq.decoder_state = self.model.new_decoder_state(seq.voice) if seq.audio else None
        return True  # its LM caches are made at prefill, prompt + length cap positions

    @torch.inference_mode()
    def prefill(self, seq: VoxSequence, positions: int) -> bool:
        """The whole prompt in one call, whatever `positions` (see the module doc)."""
        seq.state, seq.prev = self.model.prefill(seq.prompt)
        return True

    @torch.inference_mode()
    def decode(self, seqs: list[VoxSequence], out: BatchEngine) -> None:
        net, shape = self.net, (1, self.model.config.feat_dim, self.model.patch_size)
        for seq in seqs:  # the LM step of each row's last patch, row by row (1-row GEMMs)
            if seq.awaiting is not None:
                net.advance(seq.state, seq.awaiting)
                seq.awaiting = None
        patches = self._solve(seqs, [seq.noise(shape, net.dtype, net.device) for seq in seqs])
        rows = len(seqs)
        for seq, patch in zip(seqs, patches, strict=True):
            embed = net.encode_patches(patch[:, None])[:, 0]  # (1, H)
            stop = int(net.stop_logits(seq.state).argmax(dim=-1)[0])  # from the patch's lm_h
            seq.prev = patch
            reason = "stop_head" if seq.frames > MIN_LEN and stop == 1 else None
            out.emit(seq, patch[0], rows, reason)
            if seq.status is Status.DECODING:
                seq.awaiting = embed

    def _solve(self, seqs: list[VoxSequence], zs: list[torch.Tensor]) -> list[torch.Tensor]:
        """Each row's new patch (1, P, D): the CFM solve of rows with the same number of
        diffusion steps together (`EulerCFM.solve_requests`)."""
        net, patches = self.net, [None] * len(seqs)
        groups: dict[int, list[int]] = {}
        for index, seq in enumerate(seqs):
            groups.setdefault(seq.timesteps, []).append(index)
        for steps, members in groups.items():
            solved = net.feat_decoder.solve_requests(
                [zs[i] for i in members],
                [net.dit_condition(seqs[i].state) for i in members],
                [seqs[i].prev.transpose(1, 2) for i in members],
                steps,
                [seqs[i].cfg_value for i in members],
                self._dit_runner(len(members)),
            )
            for index, x in zip(members, solved, strict=True):
                patches[index] = x.transpose(1, 2)
        return patches

    def _dit_runner(
        self, requests: int
    ) -> Callable[[list[torch.Tensor]], list[torch.Tensor]] | None:
        """The LocDiT transformer over `requests` rows' tokens in one pass where its GEMMs are
        row-invariant here at this batch size; None: one pass per request."""
        if requests > 1 and rows_invariant(self.dit_linears, self.dit_rows, requests):
            return self.dit.run_requests
        return None

    def deliver(
        self,
        seq: VoxSequence,
        frames: list[torch.Tensor],
        compute_s: float,
        stop_reason: str | None,
        batch: int,
    ) -> AudioChunk | PatchChunk:
        """The patches decoded into the next AudioChunk on the row's VAE decoder state (a
        patches-only request gets the patches themselves)."""
        if not seq.audio:
            return PatchChunk(frames, stop_reason)
        return self.model.decode_chunk(frames, seq.decoder_state, stop_reason, batch)

    def release(self, seq: VoxSequence) -> None:
        seq.state = seq.prev = seq.awaiting = seq.decoder_state = None
