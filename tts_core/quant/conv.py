"""8-bit 1-D convolution (stride 1, no padding, groups 1) as an Int8Linear over im2col rows.

Output step t of a kernel-k conv with dilation d reads the window x[t], x[t + d], ...,
x[t + (k-1) d]; laid out time-major, that window is one row of k * C_in values (tap-major), so

    y[:, :, t] = Int8Linear(W laid out (C_out, k * C_in))(window_t)

with the int8 weights per output channel and the activation scale per window (per row: the
peak of the k * C_in inputs that output step reads). Every output step is thus a function of its
own window alone, as the float conv's is: a causal decoder streamed chunk by chunk sees the
same windows as the whole-utterance pass, and the exact int32 sums give the same outputs for
the same windows (no per-tensor scale that would depend on the chunk or on the batch).

Where the native kernel has its windows entry (AVX-512 VNNI: int8_linear_windows) it reads
those rows in the conv's input itself, with the same arithmetic per row, so the same bits as the
rows copied (im2col) through Int8Linear elsewhere (tests/qwen3/test_codec_int8.py); measured on
a busy 2-core Zen 5 (the 6-frame chunk's k7 convs, 1 thread): 0.7-0.8x the copied rows' time.
"""

from __future__ import annotations

import torch
from torch import nn

from .linear import Int8Linear

# the rows quantized (native: int8 bytes) or copied (im2col: float bytes) at a time: a long
# input (a voice's reference frames) would otherwise need k x its own size at once
ROWS_BYTES = 4 << 20


class Int8Conv1d(nn.Module):
    """nn.Conv1d's forward (stride 1, padding 0, groups 1) over int8 weights: x (B, C_in, T)
    -> (B, C_out, T - (k - 1) d), float32 in and out (a time-major view)."""

    def __init__(self, conv: nn.Conv1d) -> None:
        super().__init__()
        if conv.stride != (1,) or conv.padding != (0,) or conv.groups != 1:
            raise ValueError(f"Int8Conv1d takes stride 1, no padding, groups 1: {conv}")
        self.kernel_size, self.dilation = conv.kernel_size[0], conv.dilation[0]
        self.in_channels, self.out_channels = conv.in_channels, conv.out_channels
        taps_last = conv.weight.detach().permute(0, 2, 1)  # (C_out, k, C_in): rows tap-major
        self.linear = Int8Linear(taps_last.reshape(self.out_channels, -1), conv.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, channels, steps = x.shape
        span = (self.kernel_size - 1) * self.dilation
        out_steps = steps - span
        out = x.new_empty(batch, out_steps, self.out_channels)
        in_place = self.linear.windows_native(x)
        # the native kernel reads each window in x itself (channel- or time-major); else the
        # rows are copied (im2col) from a time-major copy, then go through the linear layer
        time_major = None if in_place else x.transpose(1, 2).contiguous()  # (B, T, C_in)
        row_bytes = self.kernel_size * channels * (1 if in_place else 4 * batch)
        for start, stop in _blocks(out_steps, max(1, ROWS_BYTES // row_bytes)):
            if in_place:
                for b in range(batch):
                    steps_read = x[b, :, start : stop + span]  # (C_in, steps)
                    self.linear.windows(
                        steps_read, self.kernel_size, self.dilation, out[b, start:stop]
                    )
            else:
                out[:, start:stop] = self._rows(self._windows(time_major[:, start : stop + span]))
        return out.transpose(1, 2)  # (B, C_out, T_out), time-major in memory

    def _windows(self, time_major: torch.Tensor) -> torch.Tensor:
        """(B, T, C_in) -> (B, T - span, k, C_in), a view: row t starts at step t, taps d steps
        apart."""
        batch, steps, channels = time_major.shape
        return time_major.as_strided(
            (batch, steps - (self.kernel_size - 1) * self.dilation, self.kernel_size, channels),
            (time_major.stride(0), channels, self.dilation * channels, 1),
            time_major.storage_offset(),
        )

    def _rows(self, windows: torch.Tensor) -> torch.Tensor:
        """(B, t, k, C_in) windows -> (B, t, C_out)."""
        batch, steps = windows.shape[:2]
        rows = windows.reshape(batch * steps, self.kernel_size * self.in_channels)
        return self.linear(rows).view(batch, steps, self.out_channels)

    def extra_repr(self) -> str:
        return (
            f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
            f"dilation={self.dilation}, {self.linear.extra_repr()}"
        )


def _blocks(steps: int, most: int) -> list[tuple[int, int]]:
    """[start, stop) ranges of at most `most` steps covering `steps`, of even sizes (each call's
    rows split over the threads alike)."""
    count = -(-steps // most)
    size = -(-steps // count) if steps else 0
    return [(start, min(start + size, steps)) for start in range(0, steps, max(size, 1))]
