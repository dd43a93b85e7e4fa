/* The 8-bit linear layer of ../../quant/linear.py with AVX-VNNI (the VEX-encoded, 256-bit
 * vpdpbusd of Intel Alder Lake and later, AMD Zen 5): the definition, bit for bit equal to the
 * torch path, is in int8_common.h. Built with target attributes (gcc >= 11, clang >= 12).
 *
 * vpdpbusd multiplies unsigned by signed bytes and adds each 4 products into an int32 lane
 * without saturation, so q is stored as q + 128 (1..255) and 128 * sum_k W[o, k] (w_sum128) is
 * subtracted from each sum: integers, exact.
 *
 * Weights are packed per 8 output channels and 4 inputs, the layout a 256-bit vpdpbusd reads:
 *   packed[ob][kg][j][t] = W[8 ob + j][4 kg + t]   (zero padded to out8 x in8)
 * 32 bytes a step, 64 (2 steps, one prefetch) a chunk; each load of weights is used for every
 * row of the batch (up to 8 at a time), so the weights are read from memory once per call.
 */
#include <immintrin.h>
#include <omp.h>

#include "int8_common.h"

#define KERNEL __attribute__((target("avx2,avxvnni")))
#include "int8_avx256.h"

int int8_linear_avxvnni_supported(void) {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("avxvnni");
}

/* One row: s_x and q + 128, padded with 128 (a zero) to in8. NaN anywhere -> s_x = NaN, so the
 * row's output is NaN, as the torch path's is. */
KERNEL static void quantize_row(const float *x, int64_t in, int64_t in8, uint8_t *q, float *s_x) {
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

/* NR rows x 8 output channels over all of in8. q: the tile's rows interleaved (quantize_rows),
 * so that one pointer walks them all. */
INLINE KERNEL void tile(int NR, const uint8_t *q, int64_t in8, const int8_t *w, const float *s_x,
                        const int32_t *w_sum128, const float *s_w, const float *bias, float *y,
                        int64_t out, int64_t o0) {
  __m256i acc[MAX_TILE_ROWS];
  for (int i = 0; i < NR; i++) acc[i] = _mm256_setzero_si256();
  for (int64_t c = 0; c < in8 / 8; c++) {
    const int8_t *wc = w + 64 * c;
    const uint8_t *qc = q + 8 * NR * c;
    /* the address as an integer: near the end it lies past the weights (see int8_linear.c) */
    _mm_prefetch((const char *)((uintptr_t)wc + PREFETCH_BYTES), _MM_HINT_T0);
    __m256i wv[2];
    for (int g = 0; g < 2; g++) wv[g] = _mm256_loadu_si256((const __m256i *)(wc + 32 * g));
    for (int i = 0; i < NR; i++) {
      for (int g = 0; g < 2; g++) {
        int32_t four; /* 4 activation bytes; memcpy: no aliasing through an int32_t pointer */
        memcpy(&four, qc + 4 * (g * NR + i), sizeof four);
        acc[i] = _mm256_dpbusd_avx_epi32(acc[i], _mm256_set1_epi32(four), wv[g]);
      }
    }
  }
  int valid = out - o0 >= 8 ? 8 : (int)(out - o0);
  __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32(valid), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  __m256i sums = _mm256_maskload_epi32(w_sum128 + o0, m);
  __m256 scale_w = _mm256_maskload_ps(s_w + o0, m);
  __m256 b = bias ? _mm256_maskload_ps(bias + o0, m) : _mm256_setzero_ps();
  for (int i = 0; i < NR; i++) {
    __m256 v = _mm256_cvtepi32_ps(_mm256_sub_epi32(acc[i], sums));
    v = _mm256_mul_ps(v, _mm256_set1_ps(s_x[i]));
    v = _mm256_mul_ps(v, scale_w);
    if (bias) v = _mm256_add_ps(v, b);
    _mm256_maskstore_ps(y + i * out + o0, m, v);
  }
}

/* Every row quantized into q, tile by tile (MAX_TILE_ROWS rows, the last one fewer): a tile of
 * nr rows starting at row r0 holds q[r0 + i][4 kg + t] + 128 at q + r0 in8 + 4 (kg nr + i) + t,
 * the 4-byte groups of its rows side by side. `row_buffers`: room for one row (in8) per thread:
 * rows are quantized on every thread past PARALLEL_QUANTIZE_BYTES. */
KERNEL static void quantize_rows(const float *x, int64_t rows, int64_t in, int64_t in8, uint8_t *q,
                                 uint8_t *row_buffers, float *s_x, int threads) {
#pragma omp parallel for schedule(static) num_threads(threads) \
    if (rows * in8 >= PARALLEL_QUANTIZE_BYTES)
  for (int64_t r = 0; r < rows; r++) {
    uint8_t *row = row_buffers + omp_get_thread_num() * in8;
    int64_t r0 = r / MAX_TILE_ROWS * MAX_TILE_ROWS, i = r - r0;
    int64_t nr = rows - r0 < MAX_TILE_ROWS ? rows - r0 : MAX_TILE_ROWS;
    uint8_t *tile_q = q + r0 * in8;
    if (nr == 1) {
      quantize_row(x + r * in, in, in8, tile_q, s_x + r);
      continue;
    }
    quantize_row(x + r * in, in, in8, row, s_x + r);
    for (int64_t kg = 0; kg < in8 / 4; kg++) memcpy(tile_q + 4 * (kg * nr + i), row + 4 * kg, 4);
  }
}

/* The entry point (int8_common.h): x (rows, in) float32 contiguous; packed weights as above. */
KERNEL int int8_linear_avxvnni(const float *x, int64_t rows, int64_t in, int64_t out,
                               const int8_t *packed, const int32_t *w_sum128, const float *s_w,
                               const float *bias, float *y, int threads) {
  int64_t in8 = (in + 7) / 8 * 8, blocks = (out + 7) / 8;
  struct scratch *scratch = reserve(rows, (rows + threads) * in8);
  if (!scratch) return -1;
  uint8_t *q = scratch->q;
  float *s_x = scratch->s_x;
  quantize_rows(x, rows, in, in8, q, q + rows * in8, s_x, threads);
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t ob = 0; ob < blocks; ob++) {
    const int8_t *w = packed + ob * in8 * 8;
    for (int64_t r0 = 0; r0 < rows; r0 += MAX_TILE_ROWS) {
      const uint8_t *qt = q + r0 * in8;
      const float *st = s_x + r0;
      float *yt = y + r0 * out;
#define TILE(n) tile(n, qt, in8, w, st, w_sum128, s_w, bias, yt, out, ob * 8)
      FOR_TILE_ROWS(rows - r0 >= MAX_TILE_ROWS ? MAX_TILE_ROWS : rows - r0, TILE)
#undef TILE
    }
  }
  return 0;
}
