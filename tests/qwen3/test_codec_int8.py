"""The codec decoder in 8 bits (codec/int8.py, quant/conv.py): the int8 conv's definition, the
exact stream in that format, the audio gate and `auto`'s choice.

Error model of one int8 layer: weights per output channel and activations per row are rounded
to steps of peak / 127, a uniform error of rms step / sqrt(12) each; for Gaussian-like values of
peak ~3.3 sigma that is ~0.0075 sigma, -42.5 dB per operand and ~-39.5 dB for the product of
both (measured 38-41 dB on random convs of the decoder's shapes). A single layer is held to
35 dB: 4.5 dB of room for a peak a little further out, while a wrong layout (a tap or a
channel out of place) gives ~0 dB.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
from pathlib import Path

import pytest
import torch
from torch import nn

from tts_core.models import native
from tts_core.models.qwen3_tts.codec import SpeechTokenizer, load_speech_tokenizer_config
from tts_core.models.qwen3_tts.codec.int8 import (
    MIN_AUDIO_SNR_DB,
    audio_snr_db,
    choose_decoder_format,
    quantize_decoder,
)
from tts_core.quant.conv import Int8Conv1d
from tts_core.quant.linear import Int8Linear, sqnr_db

from .test_streaming_decoder import (
    _codes,
    _float32_tolerance,
    _max_diff,
    _stream,
    _well_conditioned_decoder,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
ONE_LAYER_DB = 35.0  # see the module doc
VNNI = native.int8_linear() is not None and native.int8_linear().isa.name in (
    "avx512vnni",
    "avxvnni",
)


def _conv(c_in: int, c_out: int, dilation: int, seed: int) -> nn.Conv1d:
    torch.manual_seed(seed)
    conv = nn.Conv1d(c_in, c_out, 7, dilation=dilation)
    with torch.no_grad():
        conv.weight.normal_(0.0, c_in**-0.5)
    return conv


@pytest.mark.parametrize(("c_in", "c_out", "dilation"), [(48, 32, 1), (32, 48, 3), (40, 16, 9)])
def test_int8_conv_is_its_linear_layer_on_each_window(c_in, c_out, dilation) -> None:
    """Output step t is the int8 linear layer on the window t, t + d, ..., t + 6d (tap-major),
    bit for bit; and the float conv within one int8 layer's error."""
    conv = _conv(c_in, c_out, dilation, seed=c_in)
    quantized = Int8Conv1d(conv)
    x = torch.randn(2, c_in, 40 + 6 * dilation)
    with torch.no_grad():
        out = quantized(x)
        windows = x.unfold(2, 6 * dilation + 1, 1)[..., ::dilation]  # (B, C_in, T, 7)
        rows = windows.permute(0, 2, 3, 1).reshape(-1, 7 * c_in)  # (B T, 7 C_in) tap-major
        expected = quantized.linear(rows).view(2, 40, c_out).transpose(1, 2)
        assert out.shape == (2, c_out, 40)
        assert torch.equal(out, expected)
        assert sqnr_db(conv(x), out) >= ONE_LAYER_DB


def test_int8_conv_rows_do_not_depend_on_the_batch_or_the_length() -> None:
    """A window's output is the same in a batch of 2 and alone, and in a longer input: no scale
    shared across steps or rows (what makes the stream exact)."""
    quantized = Int8Conv1d(_conv(24, 16, 3, seed=1))
    x = torch.randn(2, 24, 60)
    with torch.no_grad():
        both = quantized(x)
        assert torch.equal(both[1:], quantized(x[1:]))
        assert torch.equal(both[..., 10:30], quantized(x[..., 10 : 30 + 18]))


def test_int8_conv_in_blocks_of_steps_is_the_same(monkeypatch) -> None:
    """A long input is copied to rows a block of steps at a time (bounded memory): the same
    outputs bit for bit, each row being computed alone."""
    import tts_core.quant.conv as conv_module

    quantized = Int8Conv1d(_conv(32, 16, 9, seed=2))
    x = torch.randn(2, 32, 200)
    with torch.no_grad():
        whole = quantized(x)
        # 5 steps a block where the kernel reads the windows in place, 1 where rows are copied
        monkeypatch.setattr(conv_module, "ROWS_BYTES", 7 * 32 * 5)
        assert torch.equal(quantized(x), whole)


def _copied_rows(monkeypatch) -> None:
    """Int8Conv1d as before the kernel read windows in place: im2col rows, then Int8Linear."""
    monkeypatch.setattr(Int8Linear, "windows_native", lambda self, x: False)


@contextlib.contextmanager
def _threads(count: int):
    saved = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(saved)


def _steps_over_decades(batch: int, channels: int, steps: int, seed: int) -> torch.Tensor:
    """(B, C, T) whose steps span 6 decades of scale (each window sets its own), with an
    all-zero step, a NaN and an inf (their windows' outputs are NaN, as the torch path's)."""
    g = torch.Generator().manual_seed(seed)
    scale = torch.logspace(-3, 3, steps)[torch.randperm(steps, generator=g)]
    x = torch.randn(batch, channels, steps, generator=g) * scale
    x[0, :, 5] = 0
    x[-1, 1, steps // 2] = float("nan")
    x[0, 2, steps - 9] = float("inf")
    return x


WINDOW_SHAPES = [(192, 64, 7, 1), (37, 21, 7, 3), (5, 16, 7, 9), (96, 48, 1, 1), (130, 17, 3, 2)]


@pytest.mark.skipif(not (VNNI and native.int8_linear().windows), reason="no in-place windows")
@pytest.mark.parametrize(("c_in", "c_out", "taps", "dilation"), WINDOW_SHAPES)
def test_windows_read_in_place_equal_the_copied_rows_at_1_and_2_threads(
    monkeypatch, c_in, c_out, taps, dilation
) -> None:
    """The kernel reading each window in the input (int8_linear_windows) gives the im2col rows'
    outputs bit for bit, NaN and inf windows included, at 1 and 2 threads: every row is
    quantized with the same arithmetic whichever thread takes it (300 steps: past the size from
    which the rows are quantized on every thread). Widths not a multiple of 4 or 16 exercise the
    masked tails of each tap, 300 steps the tail of the 16 x 16 transposition; the input comes
    channel-major (transposed in the kernel), time-major (read as it is) and with neither stride
    1 (copied first)."""
    conv = nn.Conv1d(c_in, c_out, taps, dilation=dilation)
    quantized = Int8Conv1d(conv)
    x = _steps_over_decades(2, c_in, 300, seed=c_in)
    layouts = [
        x,
        x.transpose(1, 2).contiguous().transpose(1, 2),
        x.repeat_interleave(2, 2)[..., ::2],
    ]
    with torch.no_grad():
        outputs = []
        for count in (1, 2):
            with _threads(count):
                outputs += [quantized(layout) for layout in layouts]
        with monkeypatch.context() as patch:
            _copied_rows(patch)
            copied = quantized(x)
    assert torch.isnan(outputs[0]).any() and torch.isfinite(outputs[0]).any()
    for out in outputs:
        assert torch.equal(out.nan_to_num(), copied.nan_to_num())
        assert torch.equal(out.isnan(), copied.isnan())


@pytest.mark.skipif(not (VNNI and native.int8_linear().windows), reason="no in-place windows")
def test_int8_conv_is_the_same_at_every_chunk_split_and_thread_count() -> None:
    """A causal stream hands the conv its history ++ the new steps: at every split of a long
    input, the two chunks' outputs are the whole pass's, bit for bit, at 1 and 2 threads (200
    steps of 7 x 192 inputs: the longer chunks are quantized on every thread)."""
    quantized = Int8Conv1d(_conv(192, 48, 3, seed=9))
    span = 6 * 3
    x = _steps_over_decades(1, 192, 200, seed=3).nan_to_num(posinf=7.0)
    with torch.no_grad():
        whole = quantized(x)
        for count in (1, 2):
            with _threads(count):
                for split in range(span + 1, x.shape[-1]):
                    first, rest = quantized(x[..., :split]), quantized(x[..., split - span :])
                    assert torch.equal(torch.cat([first, rest], dim=-1), whole), (count, split)


@pytest.mark.skipif(not (VNNI and native.int8_linear().windows), reason="no in-place windows")
def test_int8_decoder_audio_is_unchanged_by_reading_windows_in_place(monkeypatch) -> None:
    """The int8 decoder's audio, full pass and streamed in chunks of 1, 2, 5 and 12 frames, is
    the same bit for bit whether its convs copy their rows (the code before the in-place
    windows) or the kernel reads them, at 1 and 2 threads."""
    decoder = _int8_decoder()
    codes = _codes(24, decoder.config.codebook_size, seed=11)
    for count in (1, 2):
        with _threads(count):
            in_place = [decoder(codes)[:, 0], _stream(decoder, codes, [1, 2, 5, 12])]
            with monkeypatch.context() as patch:
                _copied_rows(patch)
                copied = [decoder(codes)[:, 0], _stream(decoder, codes, [1, 2, 5, 12])]
        assert all(torch.equal(a, b) for a, b in zip(in_place, copied, strict=True)), count


def test_int8_conv_refuses_what_it_does_not_compute() -> None:
    with pytest.raises(ValueError, match="groups 1"):
        Int8Conv1d(nn.Conv1d(8, 8, 7, groups=8))


def _int8_decoder():
    """The well-conditioned decoder of the streaming tests, every conv quantized (its convs are
    narrow: min_conv_channels=1)."""
    return quantize_decoder(copy.deepcopy(_well_conditioned_decoder()), min_conv_channels=1)


def test_int8_stream_equals_its_full_pass_long() -> None:
    """The stream in int8 against the int8 full pass, within the float32 stream's own bound
    (test_streaming_decoder): the int8 layers are functions of each step's window alone (exact
    int32 sums), so only the float layers' rounding can differ (measured: 0)."""
    decoder = _int8_decoder()
    codes = _codes(310, decoder.config.codebook_size, seed=3)
    full = decoder(codes)[:, 0]
    assert float(full.std()) > 1e-3  # a real signal, not silence
    assert _max_diff(_stream(decoder, codes, [1, 2, 5, 12]), full) <= _float32_tolerance()


@pytest.mark.parametrize("chunk", [1, 2, 5, 12])
def test_int8_stream_each_chunk_size(chunk: int) -> None:
    decoder = _int8_decoder()
    codes = _codes(30, decoder.config.codebook_size, seed=4)
    error = _max_diff(_stream(decoder, codes, [chunk]), decoder(codes)[:, 0])
    assert error <= _float32_tolerance()


def test_int8_decoder_audio_holds_the_gate_on_a_well_conditioned_decoder() -> None:
    """int8 everywhere it applies: ~40 dB against float32 (measured 40.6; the real-size random
    decoder of the benchmark: ~43 dB), each layer's ~40 dB noise adding over the stages."""
    decoder = _well_conditioned_decoder()
    assert audio_snr_db(decoder, _int8_decoder()) >= MIN_AUDIO_SNR_DB
    assert _int8_decoder().dtype == torch.float32  # activations and states stay float32


def test_an_int8_decoder_keeps_float32() -> None:
    with pytest.raises(ValueError, match="int8 decoder stays float32"):
        _int8_decoder().set_dtype(torch.bfloat16)


def _tiny(name: str = "qwen3-tiny-a"):
    return SpeechTokenizer.from_folder(FIXTURES / name / "speech_tokenizer", dtype=torch.float32)


def test_auto_keeps_float32_where_int8_fails_the_gate() -> None:
    """The tiny checkpoints' decoders amplify rounding ~700x (test_streaming_decoder): int8
    audio is ~20 dB there, under the gate, so `auto` keeps a float32 decoder that decodes as
    the original does, bit for bit."""
    codec = _tiny()
    codes = _codes(8, codec.decoder.config.codebook_size, seed=6)
    before = codec.decoder(codes)
    choice = codec.choose_decoder_format(None)
    assert choice.startswith("float32"), choice
    assert not any(isinstance(m, Int8Conv1d | Int8Linear) for m in codec.decoder.modules())
    assert codec.decoder.dtype == torch.float32
    assert torch.equal(codec.decoder(codes), before)
    if VNNI:  # the gate measured it
        assert "SNR" in choice


@pytest.mark.skipif(not VNNI, reason="int8 is chosen on VNNI kernels only")
def test_auto_takes_int8_on_vnni_without_native_bf16() -> None:
    decoder, choice = choose_decoder_format(copy.deepcopy(_well_conditioned_decoder()), None)
    assert decoder.weight_format == "int8" and choice.startswith("int8"), choice
    # int8 off where the weights were asked to stay float
    decoder, choice = choose_decoder_format(
        copy.deepcopy(_well_conditioned_decoder()), None, int8=False
    )
    assert decoder.weight_format is None and choice.startswith("float32")


def test_auto_keeps_bfloat16_where_the_cpu_has_it() -> None:
    decoder, choice = choose_decoder_format(
        copy.deepcopy(_well_conditioned_decoder()), "AVX512_BF16"
    )
    assert decoder.dtype == torch.bfloat16 and choice.startswith("bfloat16")


def test_the_int8_decoder_streams_through_the_reference_path_too(monkeypatch) -> None:
    """Where no native kernel runs (TTS_CORE_NATIVE_ISA=torch: torch._int_mm) the int8 decoder
    gives the same audio: the native kernels equal the torch path bit for bit."""
    decoder = _int8_decoder()
    codes = _codes(12, decoder.config.codebook_size, seed=5)
    native_audio = decoder(codes)
    for module in decoder.modules():
        if hasattr(module, "_buffers_native"):
            monkeypatch.setattr(module, "_native_ready", lambda x: False)
    assert torch.equal(decoder(codes), native_audio)


@pytest.mark.skipif(not VNNI, reason="int8 is chosen on VNNI kernels only")
@pytest.mark.parametrize(("quantize", "want"), [("auto", "int8"), ("none", "float32")])
def test_the_backend_gives_the_decoder_int8_unless_quantize_is_none(
    monkeypatch, quantize, want
) -> None:
    """backends/qwen3.py on a CPU without native bf16: int8 where the audio holds the gate, float32
    where the weights were asked to stay float."""
    from types import SimpleNamespace

    from tts_core.backends import qwen3

    monkeypatch.setattr(qwen3, "_native_bf16_cpu", lambda: None)
    codec = _tiny()
    codec.decoder = copy.deepcopy(_well_conditioned_decoder())
    choice = qwen3._choose_decoder_dtype(
        SimpleNamespace(speech_tokenizer=codec), "cpu", "float32", quantize
    )
    assert choice.startswith(want), choice
    assert (codec.decoder.weight_format or "float32") == want


REAL_SIZE = Path(__file__).resolve().parents[2] / "assets/checkpoints/Qwen3-TTS-12Hz-0.6B-Base"


@pytest.mark.skipif(not VNNI, reason="the int8 decoder is built where auto takes it")
def test_int8_stream_is_its_full_pass_with_the_real_transformer_on_two_threads() -> None:
    """The real-size transformer (8 layers, 16 heads, window 72) ahead of a narrow conv stack,
    on 2 threads, where float GEMMs and oneDNN convs round by the number of steps they are given
    and the transformer's keys are rotated by their slot in the window: a float ulp ahead of an
    int8 layer can flip one of its roundings, and the flip grows through the stack (measured
    1.4e-3 between chunk 6 and 12 within 86 frames at real size, first with the quantizer's
    projection, pre-conv and transformer linears float, then with the attention in float32).
    Those linears are int8 (per row, exact) and the transformer runs in float64, so its output
    (the int8 stack's input) is the same bit for bit in every chunking, past the window; the
    audio within the float32 stream's bound (float layers after the last int8 one; measured 0).
    """
    from tts_core.models.qwen3_tts.codec import CodecDecoder

    cfg = load_speech_tokenizer_config(REAL_SIZE / "speech_tokenizer").decoder
    decoder = CodecDecoder.from_config(dataclasses.replace(cfg, decoder_dim=32), seed=3)
    decoder = quantize_decoder(decoder, min_conv_channels=1)
    outputs: list[torch.Tensor] = []
    decoder.pre_transformer.register_forward_hook(lambda m, i, out: outputs.append(out))
    codes = _codes(96, cfg.codebook_size, seed=8)
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        full = decoder(codes)[:, 0]
        hidden = outputs.pop()
        bound = 4e-7 * float(full.abs().max())
        for schedule in ([6], [12], [1, 5]):
            assert _max_diff(_stream(decoder, codes, schedule), full) <= bound, schedule
            assert torch.equal(torch.cat(outputs, dim=1), hidden), schedule
            outputs.clear()
    finally:
        torch.set_num_threads(threads)


@pytest.mark.parametrize(
    ("cap", "allowed"),
    [(None, True), ("ALL", True), ("AVX512_CORE_VNNI", False), ("AVX2", False),
     ("AVX512_CORE_BF16", True), ("avx512_core_amx", True)],
)  # fmt: skip
def test_onednn_cap_hides_native_bf16(monkeypatch, cap, allowed):
    """ONEDNN_MAX_CPU_ISA below AVX512_CORE_BF16 takes bf16 arithmetic from oneDNN, so `auto`
    must not pick a bf16 decoder there (how a CPU without native bf16 is emulated)."""
    from tts_core.backends import qwen3

    if cap is None:
        monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    else:
        monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", cap)
    assert qwen3._onednn_allows("AVX512_CORE_BF16") is allowed
    if not allowed:
        assert qwen3._native_bf16_cpu() is None


def test_onednn_cap_unknown_is_named(monkeypatch):
    from tts_core.backends import qwen3

    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX9000")
    with pytest.raises(ValueError, match="ONEDNN_MAX_CPU_ISA='AVX9000'"):
        qwen3._onednn_allows("AVX512_CORE_BF16")
