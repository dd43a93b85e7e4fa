/* What the two AVX-512 VNNI kernels (int8_linear.c, int4_linear.c) share: the CPU check, a row's
 * quantization to q + 128 (vpdpbusd multiplies unsigned by signed bytes) and the step from a
 * tile's int32 sums to its outputs. */
#ifndef TTS_CORE_INT8_AVX512_H
#define TTS_CORE_INT8_AVX512_H

#include <immintrin.h>

#include "int8_common.h"

#define KERNEL __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni")))

static int avx512vnni_supported(void) {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
}

/* The peak |x| over `width` floats, NaN where they hold a NaN: a row's peak is the max of its
 * steps' peaks (a conv's window reads `taps` steps), exact: max rounds nothing. */
KERNEL static float step_peak(const float *x, int64_t width) {
  __m512 peak = _mm512_setzero_ps();
  __mmask16 nan = 0;
  int64_t k = 0;
  for (; k + 16 <= width; k += 16) {
    __m512 v = _mm512_loadu_ps(x + k);
    peak = _mm512_max_ps(peak, _mm512_abs_ps(v));
    nan |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  }
  if (k < width) {
    __mmask16 m = (__mmask16)((1u << (width - k)) - 1);
    __m512 v = _mm512_maskz_loadu_ps(m, x + k);
    peak = _mm512_max_ps(peak, _mm512_abs_ps(v));
    nan |= _mm512_mask_cmp_ps_mask(m, v, v, _CMP_UNORD_Q);
  }
  return nan ? NAN : _mm512_reduce_max_ps(peak);
}

/* q + 128 of `width` floats at scale s. A NaN quotient converts to 0x80000000, whose low byte
 * + 128 is 128: a zero, as quantize_scalar gives. */
KERNEL static void quantize_segment(const float *x, int64_t width, __m512 s, uint8_t *q) {
  const __m512i offset = _mm512_set1_epi32(128);
  for (int64_t k = 0; k < width; k += 16) {
    __mmask16 m = width - k >= 16 ? 0xFFFF : (__mmask16)((1u << (width - k)) - 1);
    __m512 v = _mm512_div_ps(_mm512_maskz_loadu_ps(m, x + k), s);
    v = _mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512i u = _mm512_add_epi32(_mm512_cvtps_epi32(v), offset);
    _mm_mask_storeu_epi8(q + k, m, _mm512_cvtepi32_epi8(u));
  }
}

/* One row of `width` floats (a multiple of 4: no padding): its s_x and q + 128, as
 * int8_linear.c's quantize_window quantizes a one-step row (the same steps). */
KERNEL static void quantize_row(const float *x, int64_t width, uint8_t *q, float *s_x) {
  float peak = step_peak(x, width);
  *s_x = row_scale(peak, peak != peak);
  quantize_segment(x, width, _mm512_set1_ps(*s_x), q);
}

/* y[i][o0 .. o0 + 15] (those below out) of NR rows from their sums acc[i] of (q + 128) * W:
 * ((float)(acc - w_sum128) * s_x) * s_w (+ bias), as int8_common.h defines it. */
INLINE KERNEL void store_outputs(int NR, const __m512i *acc, const float *s_x,
                                 const int32_t *w_sum128, const float *s_w, const float *bias,
                                 float *y, int64_t out, int64_t o0) {
  int64_t valid = out - o0;
  __mmask16 m = valid >= 16 ? 0xFFFF : (__mmask16)((1u << valid) - 1);
  __m512i sums = _mm512_maskz_loadu_epi32(m, w_sum128 + o0);
  __m512 scale_w = _mm512_maskz_loadu_ps(m, s_w + o0);
  __m512 b = bias ? _mm512_maskz_loadu_ps(m, bias + o0) : _mm512_setzero_ps();
  for (int i = 0; i < NR; i++) {
    __m512 v = _mm512_cvtepi32_ps(_mm512_sub_epi32(acc[i], sums));
    v = _mm512_mul_ps(v, _mm512_set1_ps(s_x[i]));
    v = _mm512_mul_ps(v, scale_w);
    if (bias) v = _mm512_add_ps(v, b);
    _mm512_mask_storeu_ps(y + i * out + o0, m, v);
  }
}

#endif
