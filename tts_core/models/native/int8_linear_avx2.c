/* The 8-bit linear layer of ../../quant/linear.py with AVX2 (256-bit): the definition, bit for
 * bit equal to the torch path, is in int8_common.h. For CPUs with neither AVX-512 VNNI nor
 * AVX-VNNI (AMD Zen 1-3, Intel before Ice Lake / Alder Lake).
 *
 * Exact int32 sums: activations are kept as int16 q (|q| <= 127) and each weight byte is widened
 * to int16 (vpmovsxbw); vpmaddwd then adds pairs of int16 products into int32 lanes, exactly
 * (|pair| <= 2 * 127 * 127). (vpmaddubsw would take bytes directly but saturates its pair sums
 * at int16 with the unsigned form, so it is not used.) No offset: w_sum128 is not read.
 *
 * Weights are packed per 8 output channels and 2 inputs, the layout vpmaddwd reads once widened:
 *   packed[ob][kg][j][t] = W[8 ob + j][2 kg + t]   (zero padded to out8 x in8)
 * 16 bytes a step, 64 (4 steps, one prefetch) a chunk; each load of weights is used for every
 * row of the batch (up to 8 at a time), so the weights are read from memory once per call.
 */
#include <immintrin.h>
#include <omp.h>

#include "int8_common.h"

#define KERNEL __attribute__((target("avx2")))
#include "int8_avx256.h"

int int8_linear_avx2_supported(void) {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2");
}

/* One row: s_x and int16 q, padded with zeros to in8. NaN anywhere -> s_x = NaN, so the row's
 * output is NaN, as the torch path's is. */
KERNEL static void quantize_row(const float *x, int64_t in, int64_t in8, int16_t *q, float *s_x) {
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

/* NR rows x 8 output channels over all of in8. q: the tile's rows interleaved (quantize_rows),
 * so that one pointer walks them all. */
INLINE KERNEL void tile(int NR, const int16_t *q, int64_t in8, const int8_t *w, const float *s_x,
                        const float *s_w, const float *bias, float *y, int64_t out, int64_t o0) {
  __m256i acc[MAX_TILE_ROWS];
  for (int i = 0; i < NR; i++) acc[i] = _mm256_setzero_si256();
  for (int64_t c = 0; c < in8 / 8; c++) {
    const int8_t *wc = w + 64 * c;
    const int16_t *qc = q + 8 * NR * c;
    /* the address as an integer: near the end it lies past the weights (see int8_linear.c) */
    _mm_prefetch((const char *)((uintptr_t)wc + PREFETCH_BYTES), _MM_HINT_T0);
    /* the chunk's 4 steps of weights widened once, then row by row: 8 accumulators, 4 weights
     * and a product stay within the 16 registers (step by step, gcc spills) */
    __m256i wv[4];
    for (int g = 0; g < 4; g++)
      wv[g] = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(wc + 16 * g)));
    for (int i = 0; i < NR; i++) {
      __m256i sum = acc[i];
      for (int g = 0; g < 4; g++) {
        int32_t two; /* q[2 kg], q[2 kg + 1]; memcpy: no aliasing through an int32_t pointer */
        memcpy(&two, qc + 2 * (g * NR + i), sizeof two);
        sum = _mm256_add_epi32(sum, _mm256_madd_epi16(_mm256_set1_epi32(two), wv[g]));
      }
      acc[i] = sum;
    }
  }
  int valid = out - o0 >= 8 ? 8 : (int)(out - o0);
  __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32(valid), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  __m256 scale_w = _mm256_maskload_ps(s_w + o0, m);
  __m256 b = bias ? _mm256_maskload_ps(bias + o0, m) : _mm256_setzero_ps();
  for (int i = 0; i < NR; i++) {
    __m256 v = _mm256_cvtepi32_ps(acc[i]);
    v = _mm256_mul_ps(v, _mm256_set1_ps(s_x[i]));
    v = _mm256_mul_ps(v, scale_w);
    if (bias) v = _mm256_add_ps(v, b);
    _mm256_maskstore_ps(y + i * out + o0, m, v);
  }
}

/* Every row quantized into q, tile by tile (MAX_TILE_ROWS rows, the last one fewer): a tile of
 * nr rows starting at row r0 holds q[r0 + i][2 kg + t] at q + r0 in8 + 2 (kg nr + i) + t, the
 * pairs of its rows side by side. `row_buffers`: room for one row (in8) per thread:
 * rows are quantized on every thread past PARALLEL_QUANTIZE_BYTES. */
KERNEL static void quantize_rows(const float *x, int64_t rows, int64_t in, int64_t in8, int16_t *q,
                                 int16_t *row_buffers, float *s_x, int threads) {
#pragma omp parallel for schedule(static) num_threads(threads) \
    if (rows * in8 >= PARALLEL_QUANTIZE_BYTES)
  for (int64_t r = 0; r < rows; r++) {
    int16_t *row = row_buffers + omp_get_thread_num() * in8;
    int64_t r0 = r / MAX_TILE_ROWS * MAX_TILE_ROWS, i = r - r0;
    int64_t nr = rows - r0 < MAX_TILE_ROWS ? rows - r0 : MAX_TILE_ROWS;
    int16_t *tile_q = q + r0 * in8;
    if (nr == 1) {
      quantize_row(x + r * in, in, in8, tile_q, s_x + r);
      continue;
    }
    quantize_row(x + r * in, in, in8, row, s_x + r);
    for (int64_t kg = 0; kg < in8 / 2; kg++) memcpy(tile_q + 2 * (kg * nr + i), row + 2 * kg, 4);
  }
}

/* The entry point (int8_common.h): x (rows, in) float32 contiguous; packed weights as above;
 * w_sum128 is not read. */
KERNEL int int8_linear_avx2(const float *x, int64_t rows, int64_t in, int64_t out,
                            const int8_t *packed, const int32_t *w_sum128, const float *s_w,
                            const float *bias, float *y, int threads) {
  (void)w_sum128;
  int64_t in8 = (in + 7) / 8 * 8, blocks = (out + 7) / 8;
  struct scratch *scratch = reserve(rows, (rows + threads) * in8 * (int64_t)sizeof(int16_t));
  if (!scratch) return -1;
  int16_t *q = scratch->q;
  float *s_x = scratch->s_x;
  quantize_rows(x, rows, in, in8, q, q + rows * in8, s_x, threads);
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t ob = 0; ob < blocks; ob++) {
    const int8_t *w = packed + ob * in8 * 8;
    for (int64_t r0 = 0; r0 < rows; r0 += MAX_TILE_ROWS) {
      const int16_t *qt = q + r0 * in8;
      const float *st = s_x + r0;
      float *yt = y + r0 * out;
#define TILE(n) tile(n, qt, in8, w, st, s_w, bias, yt, out, ob * 8)
      FOR_TILE_ROWS(rows - r0 >= MAX_TILE_ROWS ? MAX_TILE_ROWS : rows - r0, TILE)
#undef TILE
    }
  }
  return 0;
}
