/* The 8-bit linear layer of ../../quant/linear.py with AVX-512 VNNI (512-bit vpdpbusd): the
 * definition, bit for bit equal to the torch path, is in int8_common.h.
 *
 * vpdpbusd multiplies unsigned by signed bytes, so q is stored as q + 128 (1..255) and
 * 128 * sum_k W[o, k] (w_sum128) is subtracted from each sum: integers, exact.
 *
 * Weights are packed per 16 output channels and 4 inputs, the layout vpdpbusd reads:
 *   packed[ob][kg][j][t] = W[16 ob + j][4 kg + t]   (zero padded to out16 x in4)
 * Each 64-byte load of weights is used for every row of the batch (up to 8 at a time), so
 * the weights are read from memory once per call whatever the number of rows.
 *
 * int8_linear_windows (int8_common.h) reads a conv's rows as windows of its input: a
 * channel-major input is transposed once (16 x 16 in registers; a time-major one is read as it
 * is), each step's peak taken once, and each window quantized straight from it, on every
 * thread, with the same arithmetic per row as int8_linear (its one-tap case): no k-fold float
 * im2col copy.
 */
#include "int8_tile.h"

int int8_linear_supported(void) { return avx512vnni_supported(); }

/* Row t, the window of steps t, t + gap, ..., t + (taps - 1) gap of x (steps, width; steps
 * `stride` floats apart) laid end to end: its s_x from the steps' peaks, and q + 128 padded with
 * 128 (a zero) to in4. A NaN anywhere -> s_x = NaN, so the row's output is NaN, as the torch
 * path's is. */
KERNEL static void quantize_window(const float *x, const float *peaks, int64_t t, int64_t width,
                                   int64_t stride, int64_t taps, int64_t gap, int64_t in4,
                                   uint8_t *q, float *s_x) {
  float peak = 0.0f;
  int has_nan = 0;
  for (int64_t j = 0; j < taps; j++) {
    float p = peaks[t + j * gap];
    if (p != p) has_nan = 1;
    else if (p > peak) peak = p;
  }
  float scale = row_scale(peak, has_nan);
  *s_x = scale;
  __m512 s = _mm512_set1_ps(scale);
  for (int64_t j = 0; j < taps; j++)
    quantize_segment(x + (t + j * gap) * stride, width, s, q + j * width);
  for (int64_t k = taps * width; k < in4; k++) q[k] = 128;
}

/* 16 vectors of 16 floats transposed in registers: r[i][j] -> r[j][i]. */
INLINE KERNEL void transpose16(__m512 r[16]) {
  __m512 t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    r[i] = _mm512_shuffle_ps(t[i], t[i + 2], 0x44);
    r[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], 0xEE);
    r[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0x44);
    r[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
  }
  for (int i = 0; i < 16; i += 8) {
    for (int j = 0; j < 4; j++) {
      t[i + j] = _mm512_shuffle_f32x4(r[i + j], r[i + j + 4], 0x88);
      t[i + j + 4] = _mm512_shuffle_f32x4(r[i + j], r[i + j + 4], 0xDD);
    }
  }
  for (int j = 0; j < 8; j++) {
    r[j] = _mm512_shuffle_f32x4(t[j], t[j + 8], 0x88);
    r[j + 8] = _mm512_shuffle_f32x4(t[j], t[j + 8], 0xDD);
  }
}

/* Steps t0 .. t0 + 15 (those below `steps`) of a channel-major x (width, steps; rows `stride`
 * floats apart) into the time-major xt (steps, width), 16 x 16 floats at a time, and their
 * peaks (step_peak's: the same maxima over the same values). */
KERNEL static void transpose_steps(const float *x, int64_t steps, int64_t width, int64_t stride,
                                   int64_t t0, float *xt, float *peaks) {
  int64_t n = steps - t0 < 16 ? steps - t0 : 16;
  __mmask16 step_mask = (__mmask16)((1u << n) - 1);
  __m512 peak[16];
  __mmask16 nan = 0; /* bit i: step t0 + i holds a NaN */
  for (int i = 0; i < 16; i++) peak[i] = _mm512_setzero_ps();
  for (int64_t c0 = 0; c0 < width; c0 += 16) {
    int64_t nc = width - c0 < 16 ? width - c0 : 16;
    __m512 r[16];
    for (int i = 0; i < 16; i++)
      r[i] = i < nc ? _mm512_maskz_loadu_ps(step_mask, x + (c0 + i) * stride + t0)
                    : _mm512_setzero_ps();
    for (int i = 0; i < 16; i++) nan |= _mm512_cmp_ps_mask(r[i], r[i], _CMP_UNORD_Q);
    transpose16(r);
    __mmask16 channel_mask = (__mmask16)((1u << nc) - 1);
    for (int i = 0; i < n; i++) {
      peak[i] = _mm512_max_ps(peak[i], _mm512_abs_ps(r[i]));
      _mm512_mask_storeu_ps(xt + (t0 + i) * width + c0, channel_mask, r[i]);
    }
  }
  for (int i = 0; i < n; i++) peaks[t0 + i] = nan >> i & 1 ? NAN : _mm512_reduce_max_ps(peak[i]);
}

/* The windows of the time-major xt (rows `stride` floats apart) quantized (peaks: each step's),
 * then multiplied: y (rows, out) with rows = steps - (taps - 1) gap, in = taps width. */
KERNEL static int multiply_windows(const float *xt, int64_t steps, int64_t width, int64_t stride,
                                   int64_t taps, int64_t gap, int64_t out, const int8_t *packed,
                                   const int32_t *w_sum128, const float *s_w, const float *bias,
                                   float *y, int threads, struct scratch *scratch) {
  int64_t rows = steps - (taps - 1) * gap, in4 = (taps * width + 3) / 4 * 4;
  int64_t blocks = (out + 15) / 16;
  uint8_t *q = scratch->q;
  float *s_x = scratch->s_x, *peaks = s_x + rows;
#pragma omp parallel for schedule(static) num_threads(threads) \
    if (rows * in4 >= PARALLEL_QUANTIZE_BYTES)
  for (int64_t t = 0; t < rows; t++)
    quantize_window(xt, peaks, t, width, stride, taps, gap, in4, q + t * in4, s_x + t);
  /* many rows: blocks in pairs (a last odd one alone); a decode step's few rows: one at a time,
   * as measured for the talker */
  int64_t per = rows > 2 * MAX_TILE_ROWS ? 2 : 1, groups = (blocks + per - 1) / per;
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t g = 0; g < groups; g++) {
    int64_t ob = g * per;
    const int8_t *w = packed + ob * in4 * 16;
    int two = ob + 1 < blocks && per == 2;
    for (int64_t r0 = 0; r0 < rows; r0 += MAX_TILE_ROWS) {
      const uint8_t *qt = q + r0 * in4;
      const float *st = s_x + r0;
      float *yt = y + r0 * out;
      int64_t left = rows - r0 >= MAX_TILE_ROWS ? MAX_TILE_ROWS : rows - r0;
#define TILE1(n) tile(n, 1, qt, in4, w, st, w_sum128, s_w, bias, yt, out, ob * 16)
#define TILE2(n) tile(n, 2, qt, in4, w, st, w_sum128, s_w, bias, yt, out, ob * 16)
      if (two) {
        FOR_TILE_ROWS(left, TILE2)
      } else {
        FOR_TILE_ROWS(left, TILE1)
      }
#undef TILE1
#undef TILE2
    }
  }
  return 0;
}

/* Every window of a conv's input x, its rows read in place: row t is steps t, t + gap, ...,
 * t + (taps - 1) gap end to end (a stride-1 conv's im2col row, tap-major), quantized straight
 * from x, each as int8_linear quantizes a row (the same bits), on every thread where there are
 * enough of them. x holds (width, steps) channel-major (step_stride 1, rows channel_stride
 * apart: a torch (C, T) slice; transposed here 16 x 16 at a time) or time-major
 * (channel_stride 1, steps step_stride apart). y (steps - (taps - 1) gap, out). */
KERNEL int int8_linear_windows(const float *x, int64_t steps, int64_t width,
                               int64_t step_stride, int64_t channel_stride, int64_t taps,
                               int64_t gap, int64_t out, const int8_t *packed,
                               const int32_t *w_sum128, const float *s_w, const float *bias,
                               float *y, int threads) {
  int64_t rows = steps - (taps - 1) * gap, in4 = (taps * width + 3) / 4 * 4;
  int channel_major = channel_stride != 1;
  if (rows <= 0) return 0;
  if (channel_major && step_stride != 1) return -2;
  /* floats: s_x (rows), peaks (steps), the time-major copy of a channel-major x */
  struct scratch *scratch = reserve(rows + steps + (channel_major ? steps * width : 0), rows * in4);
  if (!scratch) return -1;
  float *peaks = scratch->s_x + rows, *xt = peaks + steps;
#pragma omp parallel num_threads(threads) if (rows * in4 >= PARALLEL_QUANTIZE_BYTES)
  if (channel_major) {
#pragma omp for schedule(static)
    for (int64_t t0 = 0; t0 < steps; t0 += 16)
      transpose_steps(x, steps, width, channel_stride, t0, xt, peaks);
  } else {
#pragma omp for schedule(static)
    for (int64_t t = 0; t < steps; t++) peaks[t] = step_peak(x + t * step_stride, width);
  }
  if (channel_major) x = xt, step_stride = width;
  return multiply_windows(x, steps, width, step_stride, taps, gap, out, packed, w_sum128, s_w,
                          bias, y, threads, scratch);
}

/* The entry point (int8_common.h): x (rows, in) float32 contiguous; packed weights as above.
 * Each row is a window of one step. */
KERNEL int int8_linear(const float *x, int64_t rows, int64_t in, int64_t out,
                       const int8_t *packed, const int32_t *w_sum128, const float *s_w,
                       const float *bias, float *y, int threads) {
  return int8_linear_windows(x, rows, in, in, 1, 1, 1, out, packed, w_sum128, s_w, bias, y,
                             threads);
}
