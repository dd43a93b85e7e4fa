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
#include "int4_tile.h"

int int4_linear_supported(void) { return avx512vnni_supported(); }

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
#define TILE(n) tile4(n, qt, in, nb, mb, st, w_sum128, s_w, bias, yt, out, ob * 16)
      FOR_TILE_ROWS(rows - r0 >= MAX_TILE_ROWS ? MAX_TILE_ROWS : rows - r0, TILE)
#undef TILE
    }
  }
  return 0;
}
