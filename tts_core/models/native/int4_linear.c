/* The 4-bit linear layer of ../../quant/int4.py with AVX-512 VNNI: weights W_eff = m * w4 (w4 in
 * -8..7 as nibbles, m in 1..16 per group of 32 inputs), activations int8 per row. It computes
 * the definition of int8_common.h over W_eff, bit for bit:
 *   y[r, o] = ((float)(sum_k q[r, k] * W_eff[o, k]) * s_x[r]) * s_w[o]  (+ bias[o])
 * the integer sum taken per group with vpdpbusd and then m times it added: exact in int32
 * (each product (q + 128) * W_eff is at most 255 * 128 in size, so every partial sum < 2^31
 * for in < 65,000).
 *
 * vpdpbusd multiplies unsigned by signed bytes, so q is stored as q + 128 (1..255) and
 * w_sum128[o] = 128 * sum_k W_eff[o, k] is subtracted from each sum.
 *
 * Layout (int4.py pack_nibbles / pack_multipliers), per 16 output channels:
 *   nibbles[ob][g][p][4 j + t]: low nibble W[16 ob + j][32 g + 8 p + t] + 8,
 *                               high nibble W[16 ob + j][32 g + 8 p + 4 + t] + 8   (p = 0..3)
 *   mult[ob][g][j] = m[16 ob + j][g]
 * so one 64-byte load gives two vpdpbusd steps (16 channels x 4 inputs each) after masking. The
 * weights are read once per call whatever the number of rows (up to 8 rows share each load).
 */
#include "int8_avx512.h"

#define GROUP 32

int int4_linear_supported(void) { return avx512vnni_supported(); }

/* One row: s_x and q + 128 (in is a multiple of GROUP: no padding), as int8_linear.c's
 * quantize_window quantizes a one-step row (the same steps). */
KERNEL static void quantize_row(const float *x, int64_t in, uint8_t *q, float *s_x) {
  float peak = step_peak(x, in);
  *s_x = row_scale(peak, peak != peak);
  quantize_segment(x, in, _mm512_set1_ps(*s_x), q);
}

/* NR rows x 16 output channels over all groups. */
INLINE KERNEL void tile(int NR, const uint8_t *q, int64_t in, const uint8_t *nib,
                        const uint8_t *mult, const float *s_x, const int32_t *w_sum128,
                        const float *s_w, const float *bias, float *y, int64_t out, int64_t o0) {
  const __m512i low = _mm512_set1_epi8(0x0F), eight = _mm512_set1_epi8(8);
  __m512i acc[MAX_TILE_ROWS];
  for (int i = 0; i < NR; i++) acc[i] = _mm512_setzero_si512();
  for (int64_t g = 0; g < in / GROUP; g++) {
    /* two chains per row (low and high nibbles): vpdpbusd's latency, not its rate, bounds one */
    __m512i lo[MAX_TILE_ROWS], hi[MAX_TILE_ROWS];
    for (int i = 0; i < NR; i++) lo[i] = hi[i] = _mm512_setzero_si512();
    const uint8_t *ng = nib + 256 * g;
    for (int p = 0; p < 4; p++) {
      /* the address as an integer: near the end it lies past the weights (see int8_linear.c) */
      _mm_prefetch((const char *)((uintptr_t)(ng + 64 * p) + PREFETCH_BYTES), _MM_HINT_T0);
      __m512i v = _mm512_loadu_si512(ng + 64 * p);
      __m512i w0 = _mm512_sub_epi8(_mm512_and_si512(v, low), eight);
      __m512i w1 = _mm512_sub_epi8(_mm512_and_si512(_mm512_srli_epi16(v, 4), low), eight);
      for (int i = 0; i < NR; i++) {
        int32_t a0, a1; /* 4 activation bytes each; memcpy: no aliasing through an int32_t */
        memcpy(&a0, q + i * in + GROUP * g + 8 * p, sizeof a0);
        memcpy(&a1, q + i * in + GROUP * g + 8 * p + 4, sizeof a1);
        lo[i] = _mm512_dpbusd_epi32(lo[i], _mm512_set1_epi32(a0), w0);
        hi[i] = _mm512_dpbusd_epi32(hi[i], _mm512_set1_epi32(a1), w1);
      }
    }
    __m512i m = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(mult + 16 * g)));
    for (int i = 0; i < NR; i++)
      acc[i] = _mm512_add_epi32(acc[i], _mm512_mullo_epi32(_mm512_add_epi32(lo[i], hi[i]), m));
  }
  store_outputs(NR, acc, s_x, w_sum128, s_w, bias, y, out, o0);
}

/* x (rows, in) float32 contiguous, in a multiple of GROUP; nibbles, mult as above; w_sum128,
 * s_w, bias (or NULL) per output channel; y (rows, out). 0, or -1 when scratch ran out. */
KERNEL int int4_linear(const float *x, int64_t rows, int64_t in, int64_t out,
                       const uint8_t *nibbles, const uint8_t *mult, const int32_t *w_sum128,
                       const float *s_w, const float *bias, float *y, int threads) {
  if (in % GROUP) return -2;
  int64_t blocks = (out + 15) / 16, groups = in / GROUP;
  struct scratch *scratch = reserve(rows, rows * in);
  if (!scratch) return -1;
  uint8_t *q = scratch->q;
  float *s_x = scratch->s_x;
  for (int64_t r = 0; r < rows; r++) quantize_row(x + r * in, in, q + r * in, s_x + r);
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t ob = 0; ob < blocks; ob++) {
    const uint8_t *nb = nibbles + ob * in * 8, *mb = mult + ob * groups * 16;
    for (int64_t r0 = 0; r0 < rows; r0 += MAX_TILE_ROWS) {
      const uint8_t *qt = q + r0 * in;
      const float *st = s_x + r0;
      float *yt = y + r0 * out;
#define TILE(n) tile(n, qt, in, nb, mb, st, w_sum128, s_w, bias, yt, out, ob * 16)
      FOR_TILE_ROWS(rows - r0 >= MAX_TILE_ROWS ? MAX_TILE_ROWS : rows - r0, TILE)
#undef TILE
    }
  }
  return 0;
}
