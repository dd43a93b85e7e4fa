/* What the two 256-bit x86 kernels (int8_linear_avx2.c, int8_linear_avxvnni.c) share: the
 * vector steps of a row's quantization. Include after defining KERNEL (the target attribute of
 * the including kernel: each file's copies are compiled for its own instruction set). */
#ifndef TTS_CORE_INT8_AVX256_H
#define TTS_CORE_INT8_AVX256_H

#include <immintrin.h>

#include "int8_common.h"

/* 8 floats -> 8 int32 q: x / s (one IEEE division, as torch's), rounded half to even; a NaN
 * quotient becomes 0 (quantize_scalar). */
INLINE KERNEL __m256i quantize8(const float *x, __m256 s) {
  __m256 v = _mm256_div_ps(_mm256_loadu_ps(x), s);
  v = _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  v = _mm256_and_ps(v, _mm256_cmp_ps(v, v, _CMP_ORD_Q));
  return _mm256_cvtps_epi32(v);
}

INLINE KERNEL float max8(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
  return _mm_cvtss_f32(m);
}

/* A row's scale s_x (int8_common.h): its peak |x| and whether it holds a NaN, 8 lanes at a
 * time, then row_scale. */
KERNEL static float avx256_row_scale(const float *x, int64_t in) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 peak = _mm256_setzero_ps(), nan = _mm256_setzero_ps();
  int64_t k = 0;
  for (; k + 8 <= in; k += 8) {
    __m256 v = _mm256_loadu_ps(x + k);
    peak = _mm256_max_ps(peak, _mm256_andnot_ps(sign, v));
    nan = _mm256_or_ps(nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  }
  float p = max8(peak);
  int has_nan = _mm256_movemask_ps(nan) != 0;
  for (; k < in; k++) {
    float a = fabsf(x[k]);
    if (a != a) has_nan = 1;
    else if (a > p) p = a;
  }
  return row_scale(p, has_nan);
}

#endif
