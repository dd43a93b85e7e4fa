/* y[r, o] = float(sum_k q[r, k] * W[o, k]) * s_x[r] * s_w[o] (+ bias[o]): the 8-bit linear
 * layer of ../qwen3_tts/int8.py, bit for bit, with AVX-512 VNNI.
 *
 * Activations are quantized per row exactly as the torch path does it:
 *   s_x = max(max_k |x[r, k]|, 1e-30) * (float)(1/127);  q = round_half_even(x / s_x).
 * vpdpbusd multiplies unsigned by signed bytes, so q is stored as q + 128 (1..255) and
 * 128 * sum_k W[o, k] (w_sum128) is subtracted from each sum: integers, exact. The float
 * steps are the torch path's, in its order, one rounding each (no FMA: built with
 * -ffp-contract=off), so the output equals `Int8Linear.forward_reference` bit for bit and a row
 * never depends on the other rows of its batch.
 *
 * Weights are packed per 16 output channels and 4 inputs, the layout vpdpbusd reads:
 *   packed[ob][kg][j][t] = W[16 ob + j][4 kg + t]   (zero padded to out16 x in4)
 * Each 64-byte load of weights is used for every row of the batch (up to 8 at a time), so
 * the weights are read from memory once per call whatever the number of rows.
 */
#include <immintrin.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define KERNEL __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni")))
#define INLINE static inline __attribute__((always_inline))
#define MAX_TILE_ROWS 8
#define PREFETCH_BYTES 2048

int int8_linear_supported(void) {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
}

/* One row: s_x and q + 128, padded with 128 (a zero) to in4. NaN anywhere -> s_x = NaN, so the
 * row's output is NaN, as the torch path's is. */
KERNEL static void quantize_row(const float *x, int64_t in, int64_t in4, uint8_t *q, float *s_x) {
  __m512 peak = _mm512_setzero_ps();
  __mmask16 nan = 0;
  int64_t k = 0;
  for (; k + 16 <= in; k += 16) {
    __m512 v = _mm512_loadu_ps(x + k);
    peak = _mm512_max_ps(peak, _mm512_abs_ps(v));
    nan |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  }
  if (k < in) {
    __mmask16 m = (__mmask16)((1u << (in - k)) - 1);
    __m512 v = _mm512_maskz_loadu_ps(m, x + k);
    peak = _mm512_max_ps(peak, _mm512_abs_ps(v));
    nan |= _mm512_mask_cmp_ps_mask(m, v, v, _CMP_UNORD_Q);
  }
  float p = _mm512_reduce_max_ps(peak);
  float scale = (p < 1e-30f ? 1e-30f : p) * (float)(1.0 / 127.0);
  if (nan) scale = NAN;
  *s_x = scale;
  __m512 s = _mm512_set1_ps(scale);
  __m512i offset = _mm512_set1_epi32(128);
  for (k = 0; k < in4; k += 16) {
    int64_t left = in - k;
    __mmask16 m = left >= 16 ? 0xFFFF : left <= 0 ? 0 : (__mmask16)((1u << left) - 1);
    __m512 v = _mm512_div_ps(_mm512_maskz_loadu_ps(m, x + k), s);
    v = _mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512i u = _mm512_add_epi32(_mm512_cvtps_epi32(v), offset);
    u = _mm512_mask_mov_epi32(offset, m, u);  /* padding quantizes to zero */
    __mmask16 store = in4 - k >= 16 ? 0xFFFF : (__mmask16)((1u << (in4 - k)) - 1);
    _mm_mask_storeu_epi8(q + k, store, _mm512_cvtepi32_epi8(u));
  }
}

/* NR rows x 16 output channels over all of in4. */
INLINE KERNEL void tile(int NR, const uint8_t *q, int64_t in4, const int8_t *w, const float *s_x,
                        const int32_t *w_sum128, const float *s_w, const float *bias, float *y,
                        int64_t out, int64_t o0) {
  __m512i acc[MAX_TILE_ROWS];
  for (int i = 0; i < NR; i++) acc[i] = _mm512_setzero_si512();
  for (int64_t kg = 0; kg < in4 / 4; kg++) {
    /* With several rows the vpdpbusd work per weight byte hides the memory stream from the
     * hardware prefetcher's pace: asking 2 KB ahead overlaps them again (0.6B code predictor's
     * layers, weights from memory, 8 rows: 12.3 -> 10.0 ms; 1 row unchanged). The address is
     * formed as an integer: near the end it lies past the weights, where a prefetch never
     * faults but a pointer may not point. */
    _mm_prefetch((const char *)((uintptr_t)(w + 64 * kg) + PREFETCH_BYTES), _MM_HINT_T0);
    __m512i wv = _mm512_loadu_si512(w + 64 * kg);
    for (int i = 0; i < NR; i++) {
      int32_t four;  /* 4 activation bytes; memcpy: no aliasing through an int32_t pointer */
      memcpy(&four, q + i * in4 + 4 * kg, sizeof four);
      __m512i a = _mm512_set1_epi32(four);
      acc[i] = _mm512_dpbusd_epi32(acc[i], a, wv);
    }
  }
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

/* Scratch for the quantized rows, one per calling thread (a few hundred KB at most), freed when
 * that thread ends. */
struct scratch {
  uint8_t *q;
  float *s_x;
  int64_t bytes, rows;
};
static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;

static void free_scratch(void *p) {
  struct scratch *s = p;
  free(s->q);
  free(s->s_x);
  free(s);
}

static void make_scratch_key(void) { pthread_key_create(&scratch_key, free_scratch); }

static struct scratch *reserve(int64_t rows, int64_t in4) {
  pthread_once(&scratch_once, make_scratch_key);
  struct scratch *s = pthread_getspecific(scratch_key);
  if (!s) {
    s = calloc(1, sizeof *s);
    if (!s || pthread_setspecific(scratch_key, s)) {
      free(s);
      return NULL;
    }
  }
  if (rows * in4 > s->bytes) {
    free(s->q);
    s->q = aligned_alloc(64, (size_t)((rows * in4 + 63) / 64 * 64));
    s->bytes = s->q ? rows * in4 : 0;
  }
  if (rows > s->rows) {
    free(s->s_x);
    s->s_x = malloc((size_t)rows * sizeof(float));
    s->rows = s->s_x ? rows : 0;
  }
  return s->q && s->s_x ? s : NULL;
}

/* x (rows, in) float32 contiguous; packed weights as above; w_sum128, s_w (out); bias (out)
 * or NULL; y (rows, out); threads: torch.get_num_threads() (OpenMP's own default would be every
 * core, whatever torch was told). Returns 0, or -1 if scratch memory ran out. */
KERNEL int int8_linear(const float *x, int64_t rows, int64_t in, int64_t out,
                       const int8_t *packed, const int32_t *w_sum128, const float *s_w,
                       const float *bias, float *y, int threads) {
  int64_t in4 = (in + 3) / 4 * 4, blocks = (out + 15) / 16;
  struct scratch *scratch = reserve(rows, in4);
  if (!scratch) return -1;
  uint8_t *q = scratch->q;
  float *s_x = scratch->s_x;
  for (int64_t r = 0; r < rows; r++) quantize_row(x + r * in, in, in4, q + r * in4, s_x + r);
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t ob = 0; ob < blocks; ob++) {
    const int8_t *w = packed + ob * in4 * 16;
    for (int64_t r0 = 0; r0 < rows; r0 += MAX_TILE_ROWS) {
      const uint8_t *qt = q + r0 * in4;
      const float *st = s_x + r0;
      float *yt = y + r0 * out;
      switch (rows - r0 >= MAX_TILE_ROWS ? MAX_TILE_ROWS : rows - r0) {
        case 8: tile(8, qt, in4, w, st, w_sum128, s_w, bias, yt, out, ob * 16); break;
        case 7: tile(7, qt, in4, w, st, w_sum128, s_w, bias, yt, out, ob * 16); break;
        case 6: tile(6, qt, in4, w, st, w_sum128, s_w, bias, yt, out, ob * 16); break;
        case 5: tile(5, qt, in4, w, st, w_sum128, s_w, bias, yt, out, ob * 16); break;
        case 4: tile(4, qt, in4, w, st, w_sum128, s_w, bias, yt, out, ob * 16); break;
        case 3: tile(3, qt, in4, w, st, w_sum128, s_w, bias, yt, out, ob * 16); break;
        case 2: tile(2, qt, in4, w, st, w_sum128, s_w, bias, yt, out, ob * 16); break;
        default: tile(1, qt, in4, w, st, w_sum128, s_w, bias, yt, out, ob * 16); break;
      }
    }
  }
  return 0;
}
