/* The two 256-bit x86 kernels (int8_linear_avx2.c, int8_linear_avxvnni.c), written once. They
 * differ only in how a step's products are summed; the including file defines, before it:
 *   KERNEL          its target attribute (each file's copies are compiled for its own ISA);
 *   ENTRY           its entry point's name;
 *   q_t, OFFSET     an activation as stored: q + OFFSET (int16 q, or q + 128 as unsigned bytes);
 *   PAIR            inputs per weight group (a step: 8 output channels x PAIR inputs, fed
 *                   PAIR activations = 4 bytes at a time);
 *   LOAD_STEP(w)    a step's weights from the packed bytes at w (64 / STEPS of them);
 *   DOT(acc, a, w)  acc + the products of a (the 4 activation bytes in every lane) and w;
 * and after it quantize_row (declared below).
 *
 * Weights: packed[ob][kg][j][t] = W[8 ob + j][PAIR kg + t] (zero padded to out8 x in8), 64 bytes
 * (STEPS steps, one prefetch) a chunk of 8 inputs; each load of weights is used for every row of
 * the batch (up to 8 at a time), so the weights are read from memory once per call.
 */
#ifndef TTS_CORE_INT8_AVX256_H
#define TTS_CORE_INT8_AVX256_H

#include <immintrin.h>
#include <omp.h>

#include "int8_common.h"

#define STEPS (8 / PAIR) /* steps a chunk of 8 inputs */

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

/* One row: s_x and its in8 activations (q + OFFSET, padded with OFFSET: a zero). NaN anywhere ->
 * s_x = NaN, so the row's output is NaN, as the torch path's is. */
KERNEL static void quantize_row(const float *x, int64_t in, int64_t in8, q_t *q, float *s_x);

/* NR rows x 8 output channels over all of in8. q: the tile's rows interleaved (quantize_rows),
 * so that one pointer walks them all. */
INLINE KERNEL void tile(int NR, const q_t *q, int64_t in8, const int8_t *w, const float *s_x,
                        const int32_t *w_sum128, const float *s_w, const float *bias, float *y,
                        int64_t out, int64_t o0) {
  __m256i acc[MAX_TILE_ROWS];
  for (int i = 0; i < NR; i++) acc[i] = _mm256_setzero_si256();
  for (int64_t c = 0; c < in8 / 8; c++) {
    const int8_t *wc = w + 64 * c;
    const q_t *qc = q + 8 * NR * c;
    /* the address as an integer: near the end it lies past the weights (see int8_linear.c) */
    _mm_prefetch((const char *)((uintptr_t)wc + PREFETCH_BYTES), _MM_HINT_T0);
    /* the chunk's steps of weights loaded once, then row by row: 8 accumulators, the weights
     * and a product stay within the 16 registers (step by step, gcc spills) */
    __m256i wv[STEPS];
    for (int g = 0; g < STEPS; g++) wv[g] = LOAD_STEP(wc + 64 / STEPS * g);
    for (int i = 0; i < NR; i++) {
      for (int g = 0; g < STEPS; g++) {
        int32_t four; /* 4 activation bytes; memcpy: no aliasing through an int32_t pointer */
        memcpy(&four, qc + PAIR * (g * NR + i), sizeof four);
        acc[i] = DOT(acc[i], _mm256_set1_epi32(four), wv[g]);
      }
    }
  }
  int valid = out - o0 >= 8 ? 8 : (int)(out - o0);
  __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32(valid), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  /* activations fed as q + 128: 128 * sum_k W[o, k] (w_sum128) is subtracted from each sum */
  __m256i sums = OFFSET ? _mm256_maskload_epi32(w_sum128 + o0, m) : _mm256_setzero_si256();
  __m256 scale_w = _mm256_maskload_ps(s_w + o0, m);
  __m256 b = bias ? _mm256_maskload_ps(bias + o0, m) : _mm256_setzero_ps();
  for (int i = 0; i < NR; i++) {
    __m256 v = _mm256_cvtepi32_ps(OFFSET ? _mm256_sub_epi32(acc[i], sums) : acc[i]);
    v = _mm256_mul_ps(v, _mm256_set1_ps(s_x[i]));
    v = _mm256_mul_ps(v, scale_w);
    if (bias) v = _mm256_add_ps(v, b);
    _mm256_maskstore_ps(y + i * out + o0, m, v);
  }
}

/* Every row quantized into q, tile by tile (MAX_TILE_ROWS rows, the last one fewer): a tile of
 * nr rows starting at row r0 holds row i's activations PAIR kg .. PAIR kg + PAIR - 1 at
 * q + r0 in8 + PAIR (kg nr + i), the 4-byte groups of its rows side by side. `row_buffers`: room
 * for one row (in8) per thread: rows are quantized on every thread past
 * PARALLEL_QUANTIZE_BYTES. */
KERNEL static void quantize_rows(const float *x, int64_t rows, int64_t in, int64_t in8, q_t *q,
                                 q_t *row_buffers, float *s_x, int threads) {
#pragma omp parallel for schedule(static) num_threads(threads) \
    if (rows * in8 >= PARALLEL_QUANTIZE_BYTES)
  for (int64_t r = 0; r < rows; r++) {
    q_t *row = row_buffers + omp_get_thread_num() * in8;
    int64_t r0 = r / MAX_TILE_ROWS * MAX_TILE_ROWS, i = r - r0;
    int64_t nr = rows - r0 < MAX_TILE_ROWS ? rows - r0 : MAX_TILE_ROWS;
    q_t *tile_q = q + r0 * in8;
    if (nr == 1) {
      quantize_row(x + r * in, in, in8, tile_q, s_x + r);
      continue;
    }
    quantize_row(x + r * in, in, in8, row, s_x + r);
    for (int64_t kg = 0; kg < in8 / PAIR; kg++)
      memcpy(tile_q + PAIR * (kg * nr + i), row + PAIR * kg, 4);
  }
}

/* The entry point (int8_common.h): x (rows, in) float32 contiguous; packed weights as above. */
KERNEL int ENTRY(const float *x, int64_t rows, int64_t in, int64_t out, const int8_t *packed,
                 const int32_t *w_sum128, const float *s_w, const float *bias, float *y,
                 int threads) {
  int64_t in8 = (in + 7) / 8 * 8, blocks = (out + 7) / 8;
  struct scratch *scratch = reserve(rows, (rows + threads) * in8 * (int64_t)sizeof(q_t));
  if (!scratch) return -1;
  q_t *q = scratch->q;
  float *s_x = scratch->s_x;
  quantize_rows(x, rows, in, in8, q, q + rows * in8, s_x, threads);
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t ob = 0; ob < blocks; ob++) {
    const int8_t *w = packed + ob * in8 * 8;
    for (int64_t r0 = 0; r0 < rows; r0 += MAX_TILE_ROWS) {
      const q_t *qt = q + r0 * in8;
      const float *st = s_x + r0;
      float *yt = y + r0 * out;
#define TILE(n) tile(n, qt, in8, w, st, w_sum128, s_w, bias, yt, out, ob * 8)
      FOR_TILE_ROWS(rows - r0 >= MAX_TILE_ROWS ? MAX_TILE_ROWS : rows - r0, TILE)
#undef TILE
    }
  }
  return 0;
}

#endif
