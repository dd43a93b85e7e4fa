/* The 8-bit linear layer of ../../quant/linear.py with AVX-VNNI (the VEX-encoded, 256-bit
 * vpdpbusd of Intel Alder Lake and later, AMD Zen 5): the definition, bit for bit equal to the
 * torch path, is in int8_common.h; the kernel, in int8_avx256.h. Built with target attributes
 * (gcc >= 11, clang >= 12).
 *
 * vpdpbusd multiplies unsigned by signed bytes and adds each 4 products into an int32 lane
 * without saturation, so q is stored as q + 128 (1..255) and 128 * sum_k W[o, k] (w_sum128) is
 * subtracted from each sum: integers, exact. Weights per 8 output channels and 4 inputs: 32
 * bytes a step, the layout a 256-bit vpdpbusd reads.
 */
#include <stdint.h>

#define KERNEL __attribute__((target("avx2,avxvnni")))
#define ENTRY int8_linear_avxvnni
typedef uint8_t q_t;
#define OFFSET 128
#define PAIR 4
#define LOAD_STEP(w) _mm256_loadu_si256((const __m256i *)(w))
#define DOT(acc, a, w) _mm256_dpbusd_avx_epi32(acc, a, w)
#include "int8_avx256.h"

int int8_linear_avxvnni_supported(void) {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("avxvnni");
}

KERNEL static void quantize_row(const float *x, int64_t in, int64_t in8, q_t *q, float *s_x) {
  float scale = avx256_row_scale(x, in);
  int64_t k;
  *s_x = scale;
  __m256 s = _mm256_set1_ps(scale);
  const __m256i offset = _mm256_set1_epi32(128);
  /* byte 0 of each int32 to the low 4 bytes of its 128-bit lane, then both lanes' to the low 8 */
  const __m256i low_bytes = _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
                                             -1, -1, 0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1,
                                             -1, -1, -1, -1);
  const __m256i gather = _mm256_setr_epi32(0, 4, 0, 0, 0, 0, 0, 0);
  for (k = 0; k + 8 <= in; k += 8) {
    __m256i u = _mm256_add_epi32(quantize8(x + k, s), offset); /* 1..255 */
    u = _mm256_permutevar8x32_epi32(_mm256_shuffle_epi8(u, low_bytes), gather);
    _mm_storel_epi64((__m128i *)(q + k), _mm256_castsi256_si128(u));
  }
  for (; k < in; k++) q[k] = (uint8_t)(quantize_scalar(x[k], scale) + 128);
  for (; k < in8; k++) q[k] = 128;
}
