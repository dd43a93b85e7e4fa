/* The 8-bit linear layer of ../../quant/linear.py on 64-bit ARM with NEON and the ARMv8.2 dot
 * product (sdot: Graviton 2+, Ampere Altra, Apple M, Cortex-A76+, Neoverse): the definition, bit
 * for bit equal to the torch path, is in int8_common.h. Built with target attributes.
 *
 * sdot multiplies signed by signed bytes and adds each 4 products into an int32 lane, exactly,
 * so q (|q| <= 127) is used as it is: no offset, w_sum128 is not read.
 *
 * Weights are packed as for the AVX-512 VNNI kernel, per 16 output channels and 4 inputs, the
 * inputs padded to a multiple of 16 (16 activation bytes per load):
 *   packed[ob][kg][j][t] = W[16 ob + j][4 kg + t]   (zero padded to out16 x in16)
 * A 64-byte group is 4 vectors of 4 outputs x 4 inputs; each row's 16 activation bytes are
 * loaded once and sdot picks its 4 groups by lane. Tiles of up to 4 rows (16 accumulators):
 * each load of weights is used for every row of the batch.
 *
 * Tested under qemu-user against a scalar reference (tests/native/), which is tested against
 * the torch path on the build machine.
 */
#include <arm_neon.h>

#include "int8_common.h"

#if defined(__linux__)
#include <sys/auxv.h>
#endif

#define KERNEL __attribute__((target("arch=armv8.2-a+dotprod")))
#define NEON_TILE_ROWS 4

int int8_linear_neon_supported(void) {
#if defined(__linux__) && defined(HWCAP_ASIMDDP)
  return (getauxval(AT_HWCAP) & HWCAP_ASIMDDP) != 0;
#else
  return 0;
#endif
}

/* 4 floats -> 4 int32 q: x / s (one IEEE division, as torch's), rounded half to even; a NaN
 * quotient becomes 0 (quantize_scalar). */
INLINE KERNEL int32x4_t quantize4(const float *x, float32x4_t s) {
  float32x4_t v = vdivq_f32(vld1q_f32(x), s);
  int32x4_t q = vcvtnq_s32_f32(v);
  return vandq_s32(q, vreinterpretq_s32_u32(vceqq_f32(v, v)));
}

/* One row: s_x and q, padded with zeros to in16. NaN anywhere -> s_x = NaN, so the row's output
 * is NaN, as the torch path's is. */
KERNEL static void quantize_row(const float *x, int64_t in, int64_t in16, int8_t *q, float *s_x) {
  float32x4_t peak = vdupq_n_f32(0.0f);
  uint32x4_t nan = vdupq_n_u32(0);
  int64_t k = 0;
  for (; k + 4 <= in; k += 4) {
    float32x4_t v = vld1q_f32(x + k);
    peak = vmaxq_f32(peak, vabsq_f32(v));
    nan = vorrq_u32(nan, vmvnq_u32(vceqq_f32(v, v)));
  }
  float p = vmaxvq_f32(peak); /* NaN if the row has one: then the scale is NaN anyway */
  int has_nan = vmaxvq_u32(nan) != 0;
  for (; k < in; k++) {
    float a = fabsf(x[k]);
    if (a != a) has_nan = 1;
    else if (a > p) p = a;
  }
  float scale = row_scale(p, has_nan);
  *s_x = scale;
  float32x4_t s = vdupq_n_f32(scale);
  for (k = 0; k + 16 <= in; k += 16) {
    int16x8_t lo = vcombine_s16(vmovn_s32(quantize4(x + k, s)), vmovn_s32(quantize4(x + k + 4, s)));
    int16x8_t hi =
        vcombine_s16(vmovn_s32(quantize4(x + k + 8, s)), vmovn_s32(quantize4(x + k + 12, s)));
    vst1q_s8(q + k, vcombine_s8(vmovn_s16(lo), vmovn_s16(hi)));
  }
  for (; k < in; k++) q[k] = (int8_t)quantize_scalar(x[k], scale);
  for (; k < in16; k++) q[k] = 0;
}

/* acc[i][v] += the 4 outputs of weight vector v . row i's inputs group `g` (a lane: constant) */
#define DOT_GROUP(g)                                                  \
  do {                                                                \
    const int8_t *wg = wc + 64 * (g);                                 \
    __builtin_prefetch(wg + PREFETCH_BYTES);                          \
    int8x16_t w0 = vld1q_s8(wg), w1 = vld1q_s8(wg + 16);              \
    int8x16_t w2 = vld1q_s8(wg + 32), w3 = vld1q_s8(wg + 48);         \
    for (int i = 0; i < NR; i++) {                                    \
      acc[i][0] = vdotq_laneq_s32(acc[i][0], w0, a[i], (g));          \
      acc[i][1] = vdotq_laneq_s32(acc[i][1], w1, a[i], (g));          \
      acc[i][2] = vdotq_laneq_s32(acc[i][2], w2, a[i], (g));          \
      acc[i][3] = vdotq_laneq_s32(acc[i][3], w3, a[i], (g));          \
    }                                                                 \
  } while (0)

/* NR rows x 16 output channels over all of in16. */
INLINE KERNEL void tile(int NR, const int8_t *q, int64_t in16, const int8_t *w, const float *s_x,
                        const float *s_w, const float *bias, float *y, int64_t out, int64_t o0) {
  int32x4_t acc[NEON_TILE_ROWS][4];
  for (int i = 0; i < NR; i++)
    for (int v = 0; v < 4; v++) acc[i][v] = vdupq_n_s32(0);
  for (int64_t c = 0; c < in16 / 16; c++) {
    const int8_t *wc = w + 256 * c; /* 4 groups of 4 inputs x 16 outputs */
    int8x16_t a[NEON_TILE_ROWS];
    for (int i = 0; i < NR; i++) a[i] = vld1q_s8(q + i * in16 + 16 * c);
    DOT_GROUP(0);
    DOT_GROUP(1);
    DOT_GROUP(2);
    DOT_GROUP(3);
  }
  int valid = out - o0 >= 16 ? 16 : (int)(out - o0);
  float scale_w[16] = {0}, b[16] = {0}, result[16];
  memcpy(scale_w, s_w + o0, (size_t)valid * sizeof(float));
  if (bias) memcpy(b, bias + o0, (size_t)valid * sizeof(float));
  for (int i = 0; i < NR; i++) {
    float32x4_t sx = vdupq_n_f32(s_x[i]);
    for (int v = 0; v < 4; v++) {
      float32x4_t f = vcvtq_f32_s32(acc[i][v]);
      f = vmulq_f32(f, sx);
      f = vmulq_f32(f, vld1q_f32(scale_w + 4 * v));
      if (bias) f = vaddq_f32(f, vld1q_f32(b + 4 * v));
      vst1q_f32(result + 4 * v, f);
    }
    memcpy(y + i * out + o0, result, (size_t)valid * sizeof(float));
  }
}

/* The entry point (int8_common.h): x (rows, in) float32 contiguous; packed weights as above;
 * w_sum128 is not read. */
KERNEL int int8_linear_neon(const float *x, int64_t rows, int64_t in, int64_t out,
                            const int8_t *packed, const int32_t *w_sum128, const float *s_w,
                            const float *bias, float *y, int threads) {
  (void)w_sum128;
  int64_t in16 = (in + 15) / 16 * 16, blocks = (out + 15) / 16;
  struct scratch *scratch = reserve(rows, rows * in16);
  if (!scratch) return -1;
  int8_t *q = scratch->q;
  float *s_x = scratch->s_x;
  for (int64_t r = 0; r < rows; r++) quantize_row(x + r * in, in, in16, q + r * in16, s_x + r);
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t ob = 0; ob < blocks; ob++) {
    const int8_t *w = packed + ob * in16 * 16;
    for (int64_t r0 = 0; r0 < rows; r0 += NEON_TILE_ROWS) {
      const int8_t *qt = q + r0 * in16;
      const float *st = s_x + r0;
      float *yt = y + r0 * out;
      switch (rows - r0 >= NEON_TILE_ROWS ? NEON_TILE_ROWS : rows - r0) {
        case 4: tile(4, qt, in16, w, st, s_w, bias, yt, out, ob * 16); break;
        case 3: tile(3, qt, in16, w, st, s_w, bias, yt, out, ob * 16); break;
        case 2: tile(2, qt, in16, w, st, s_w, bias, yt, out, ob * 16); break;
        default: tile(1, qt, in16, w, st, s_w, bias, yt, out, ob * 16); break;
      }
    }
  }
  return 0;
}
