"""Codec decoder: 16 codes per 80 ms frame -> 1920 samples at 24 kHz.

`forward` is one full pass (the official `Qwen3TTSTokenizerV2Decoder.forward`). `decode_step` is
the exact streaming form: every layer is causal, so keeping each conv's last input samples, each
transposed conv's previous input and the attention window of the last sliding_window - 1 frames
makes the concatenated step outputs equal the full pass, with each frame decoded exactly once.

The decoder's dtype is its own (`set_dtype`, e.g. bfloat16 on a CPU with AVX512_BF16 while the
talker and the codec encoder stay float32); streaming states follow it and the waveform it returns
is float32 (float64 for a float64 decoder). `warm_up` builds the CPU kernels of the streaming
chunk sizes ahead of the first request.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

import torch
from torch import nn

from ... import laid_out
from ...streaming_state import KVWindow
from .config import CodecDecoderConfig
from .layers import CausalConv1d, CausalTransConv1d, ConvNeXtBlock, DecoderBlock, SnakeBeta
from .quantizer import DecoderQuantizer
from .streaming import ConvWindow, DecoderState
from .transformer import PreTransformer


class CodecDecoder(nn.Module):
    weight_format: str | None = None  # "int8" once codec/int8.py quantized it

    def __init__(self, cfg: CodecDecoderConfig) -> None:
        super().__init__()
        self.config = cfg
        self.samples_per_frame = cfg.samples_per_frame
        self.quantizer = DecoderQuantizer(
            cfg.num_quantizers,
            cfg.num_semantic_quantizers,
            cfg.codebook_size,
            cfg.vector_dim,
            cfg.codebook_dim,
        )
        self.pre_conv = CausalConv1d(cfg.codebook_dim, cfg.latent_dim, 3)
        self.pre_transformer = PreTransformer(cfg)
        self.upsample = nn.ModuleList(
            nn.ModuleList(
                [
                    CausalTransConv1d(cfg.latent_dim, cfg.latent_dim, factor, factor),
                    ConvNeXtBlock(cfg.latent_dim),
                ]
            )
            for factor in cfg.upsampling_ratios
        )
        widths = [cfg.decoder_dim // 2**i for i in range(len(cfg.upsample_rates) + 1)]
        stages: list[nn.Module] = [CausalConv1d(cfg.latent_dim, cfg.decoder_dim, 7)]
        stages += [
            DecoderBlock(widths[i], widths[i + 1], rate)
            for i, rate in enumerate(cfg.upsample_rates)
        ]
        stages += [SnakeBeta(widths[-1]), CausalConv1d(widths[-1], 1, 7)]
        self.decoder = nn.ModuleList(stages)
        self._stateful = [
            m for m in self.modules() if isinstance(m, CausalConv1d | CausalTransConv1d)
        ]
        for slot, module in enumerate(self._stateful):
            module.slot = slot
        self.register_load_state_dict_post_hook(lambda module, _keys: module.refresh_derived())
        laid_out.lay_out_linears(self)  # transformer and ConvNeXt linears over a few frames

    @classmethod
    def from_config(cls, cfg: CodecDecoderConfig, seed: int = 0) -> CodecDecoder:
        """Random weights with the given geometry (benchmarks and tests; no checkpoint)."""
        generator = torch.Generator().manual_seed(seed)
        model = cls(cfg)
        with torch.no_grad():
            for name, param in model.named_parameters():
                if name.endswith("cluster_usage"):
                    param.uniform_(0.5, 2.0, generator=generator)
                elif name.endswith("alpha"):
                    param.normal_(0.0, 0.3, generator=generator)
                elif name.endswith("beta"):  # log scale of 1/beta: keeps Snake terms small
                    param.normal_(1.0, 0.3, generator=generator)
                elif param.dim() == 1:
                    param.normal_(0.0, 0.05, generator=generator)
                else:  # gain 0.5 keeps the residual stacks from blowing up the waveform
                    fan_in = param[0].numel()
                    param.normal_(0.0, 0.5 * fan_in**-0.5, generator=generator)
        model.refresh_derived()
        return model.eval()

    @property
    def dtype(self) -> torch.dtype:
        return self.decoder[-2].alpha.dtype  # a SnakeBeta's: stays float when convs are int8

    @property
    def device(self) -> torch.device:
        return self.decoder[-2].alpha.device

    def set_dtype(self, dtype: torch.dtype) -> CodecDecoder:
        """Convert every parameter and buffer of the decoder (quantizer codebooks, convs,
        transformer) to the floating `dtype`, in place; returns self.

        Narrowing (float32 -> bfloat16) recomputes the derived tensors (effective codebooks,
        SnakeBeta exps) from the wide parameters first, so each is rounded once. Narrowing is
        lossy: converting back to float32 does not restore the float32 weights (reload them).
        States made before keep their dtype until their next `decode_step`, which converts them.
        """
        if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
            raise TypeError(f"decoder dtype must be a floating torch.dtype, got {dtype!r}")
        current = self.dtype
        if dtype == current:
            return self
        if self.weight_format == "int8":
            raise ValueError("an int8 decoder stays float32: quantize a decoder of that dtype")
        if torch.finfo(dtype).eps > torch.finfo(current).eps:
            self.refresh_derived()
            self.to(dtype)
        else:
            self.to(dtype)
            self.refresh_derived()
        return self

    def refresh_derived(self) -> None:
        """Recompute effective codebooks and SnakeBeta exps (after loading or a dtype change)."""
        self.quantizer.refresh_derived()
        for module in self.modules():
            if isinstance(module, SnakeBeta):
                module.refresh_derived()

    def _check_codes(self, codes: torch.Tensor) -> None:
        cfg = self.config
        if codes.dim() != 3 or codes.shape[1] != cfg.num_quantizers:
            raise ValueError(
                f"expected codes of shape (B, {cfg.num_quantizers}, T), got {tuple(codes.shape)}"
            )
        if codes.shape[-1] == 0:
            raise ValueError("codes must contain at least one frame")
        if codes.dtype not in (torch.int64, torch.int32):
            raise TypeError(f"codes must be an integer tensor, got {codes.dtype}")
        low, high = int(codes.min()), int(codes.max())
        if low < 0 or high >= cfg.codebook_size:
            raise ValueError(f"codes must lie in [0, {cfg.codebook_size}), got [{low}, {high}]")

    def _run(self, codes: torch.Tensor, state: DecoderState | None) -> torch.Tensor:
        convs = None if state is None else state.convs
        codes = codes.to(device=self.device, dtype=torch.long)
        hidden = self.quantizer(codes)  # (B, codebook_dim, T)
        hidden = self.pre_conv(hidden, None if convs is None else convs[self.pre_conv.slot])
        hidden = (
            self.pre_transformer(
                hidden.transpose(1, 2).to(self._transformer_dtype),
                None if state is None else state.attention,
            )
            .transpose(1, 2)
            .to(hidden.dtype)
        )  # (B, latent, T)
        for transposed, convnext in self.upsample:
            hidden = transposed(hidden, None if convs is None else convs[transposed.slot])
            hidden = convnext(hidden, convs)
        wav = self.decoder[0](hidden, None if convs is None else convs[self.decoder[0].slot])
        for block in self.decoder[1:-2]:
            wav = block(wav, convs)
        last = self.decoder[-1]
        wav = last(wav, None if convs is None else convs[last.slot], act=self.decoder[-2])
        wav = wav.clamp_(min=-1.0, max=1.0)  # (B, 1, T * samples_per_frame)
        return wav.to(torch.promote_types(wav.dtype, torch.float32))  # bf16/fp16 -> float32

    @property
    def _transformer_dtype(self) -> torch.dtype:
        """float64 around an int8 decoder's transformer (its linears stay int8: their inputs
        round to float32, their outputs are float32 values): a key is rotated by its slot in
        the window, which depends on the chunking, and attention sums over however many keys a
        step holds; in float32 that ulp would flip an int8 rounding behind it and grow through
        the stack (1.4e-3 between chunk 6 and 12 over 164 frames on 2 threads, measured); in
        float64 it is ~1e-16 and rounds away. A few MFLOP a frame."""
        return torch.float64 if self.weight_format == "int8" else self.dtype

    @torch.inference_mode()
    def forward(self, codes: torch.Tensor) -> torch.Tensor:
        """Full pass: codes (B, n_q, T) -> waveform (B, 1, T * samples_per_frame), float32
        (float64 for a float64 decoder). An int8 decoder runs it as one step on a fresh state:
        the stateless attention rounds unlike the windowed one, and an int8 layer would turn
        that ulp into a quantum, so its full pass is the stream's own path (exact, any chunks)."""
        self._check_codes(codes)
        state = self.init_state(codes.shape[0]) if self.weight_format == "int8" else None
        return self._run(codes, state)

    def init_state(
        self,
        batch_size: int = 1,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> DecoderState:
        """Zero-filled state for `batch_size` streams, on the decoder's device and dtype."""
        device = self.device if device is None else torch.device(device)
        dtype = self.dtype if dtype is None else dtype
        convs = [
            ConvWindow(
                torch.zeros(batch_size, m.in_channels, m.history_size, device=device, dtype=dtype)
            )
            for m in self._stateful
        ]
        cfg = self.config
        shape = (batch_size, cfg.num_key_value_heads, cfg.sliding_window - 1, cfg.head_dim)
        attention = [
            KVWindow(
                torch.zeros(shape, device=device, dtype=dtype),
                torch.zeros(shape, device=device, dtype=dtype),
            )
            for _ in range(cfg.num_hidden_layers)
        ]
        return DecoderState(convs=convs, attention=attention, batch_size=batch_size)

    @torch.inference_mode()
    def decode_step(self, codes: torch.Tensor, state: DecoderState) -> torch.Tensor:
        """Decode the next t frames of each stream: codes (B, n_q, t) -> (B, t * samples_per_frame),
        float32 (float64 for a float64 decoder).

        Each frame must be given exactly once, in order; `state` is updated in place. A state of
        another dtype or device (made before `set_dtype`) is first converted to the decoder's.
        """
        self._check_codes(codes)
        if codes.shape[0] != state.batch_size:
            raise ValueError(f"state is for batch {state.batch_size}, codes have {codes.shape[0]}")
        if state.dtype != self.dtype or state.device != self.device:
            state.to_(dtype=self.dtype, device=self.device)
        wav = self._run(codes, state)
        state.frames_seen += codes.shape[-1]
        return wav[:, 0]

    def warm_up(
        self, chunk_frames: Iterable[int] = (2, 6), batch_size: int = 1
    ) -> dict[int, float]:
        """Decode dummy codes once per chunk size, each on a throwaway state, so that the CPU
        kernels for those input shapes (oneDNN primitives, created and cached on first use per
        shape and dtype) exist before a real request: its first chunk then costs what a steady
        chunk costs. Call it after `set_dtype` (kernels are per dtype). It writes no parameter,
        buffer or existing state. Returns the seconds each warm-up decode took, by chunk size.
        """
        seconds: dict[int, float] = {}
        for frames in dict.fromkeys(int(f) for f in chunk_frames):
            if frames < 1:
                raise ValueError(f"chunk sizes must be >= 1, got {frames}")
            codes = torch.zeros(
                batch_size, self.config.num_quantizers, frames, dtype=torch.long, device=self.device
            )
            began = time.perf_counter()
            self.decode_step(codes, self.init_state(batch_size))
            seconds[frames] = time.perf_counter() - began
        return seconds
