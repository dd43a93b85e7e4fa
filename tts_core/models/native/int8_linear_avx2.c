/* The 8-bit linear layer of ../../quant/linear.py with AVX2 (256-bit): the definition, bit for
 * bit equal to the torch path, is in int8_common.h; the kernel, in int8_avx256.h. For CPUs with
 * neither AVX-512 VNNI nor AVX-VNNI (AMD Zen 1-3, Intel before Ice Lake / Alder Lake).
 *
 * Exact int32 sums: activations are kept as int16 q (|q| <= 127) and each weight byte is widened
 * to int16 (vpmovsxbw); vpmaddwd then adds pairs of int16 products into int32 lanes, exactly
 * (|pair| <= 2 * 127 * 127). (vpmaddubsw would take bytes directly but saturates its pair sums
 * at int16 with the unsigned form, so it is not used.) No offset: w_sum128 is not read.
 * Weights per 8 output channels and 2 inputs: 16 bytes a step, widened to 8 x 2 int16.
 */
#include <stdint.h>

#define KERNEL __attribute__((target("avx2")))
#define ENTRY int8_linear_avx2
typedef int16_t q_t;
#define OFFSET 0
#define PAIR 2
#define LOAD_STEP(w) _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(w)))
#define DOT(acc, a, w) _mm256_add_epi32(acc, _mm256_madd_epi16(a, w))
#include "int8_avx256.h"

int int8_linear_avx2_supported(void) {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2");
}

KERNEL static void quantize_row(const float *x, int64_t in, int64_t in8, q_t *q, float *s_x) {
  float scale = avx256_row_scale(x, in);
  int64_t k;
  *s_x = scale;
  __m256 s = _mm256_set1_ps(scale);
  for (k = 0; k + 16 <= in; k += 16) {
    /* packs works within 128-bit lanes: [a0-3 b0-3 a4-7 b4-7] -> [a0-7 b0-7] */
    __m256i ab = _mm256_packs_epi32(quantize8(x + k, s), quantize8(x + k + 8, s));
    _mm256_storeu_si256((__m256i *)(q + k), _mm256_permute4x64_epi64(ab, 0xD8));
  }
  for (; k < in; k++) q[k] = (int16_t)quantize_scalar(x[k], scale);
  for (; k < in8; k++) q[k] = 0;
}
