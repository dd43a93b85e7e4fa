/* The 8-bit linear kernel's tile (int8_linear.c; also decode_stack.c, which runs whole decode
 * steps over the same packed weights): NR rows by NB blocks of 16 output channels, AVX-512 VNNI.
 * The layout and the arithmetic are int8_linear.c's (its header comment). */
#ifndef TTS_CORE_INT8_TILE_H
#define TTS_CORE_INT8_TILE_H

#include "int8_avx512.h"

/* NR rows x NB blocks of 16 output channels (NB blocks side by side in `packed`) over all of
 * in4. Two blocks (calls of many rows: a conv's windows) give each load of activations twice
 * the independent sums, enough to hide vpdpbusd's latency; the sums are exact integers either
 * way, so the outputs are the same bits. */
INLINE KERNEL void tile(int NR, int NB, const uint8_t *q, int64_t in4, const int8_t *w,
                        const float *s_x, const int32_t *w_sum128, const float *s_w,
                        const float *bias, float *y, int64_t out, int64_t o0) {
  __m512i acc[2][MAX_TILE_ROWS];
  for (int h = 0; h < NB; h++)
    for (int i = 0; i < NR; i++) acc[h][i] = _mm512_setzero_si512();
  for (int64_t kg = 0; kg < in4 / 4; kg++) {
    __m512i wv[2];
    for (int h = 0; h < NB; h++) {
      const int8_t *wk = w + h * in4 * 16 + 64 * kg;
      /* With several rows the vpdpbusd work per weight byte hides the memory stream from the
       * hardware prefetcher's pace: asking 2 KB ahead overlaps them again (0.6B code
       * predictor's layers, weights from memory, 8 rows: 12.3 -> 10.0 ms; 1 row unchanged).
       * The address is formed as an integer: near the end it lies past the weights, where a
       * prefetch never faults but a pointer may not point. */
      _mm_prefetch((const char *)((uintptr_t)wk + PREFETCH_BYTES), _MM_HINT_T0);
      wv[h] = _mm512_loadu_si512(wk);
    }
    for (int i = 0; i < NR; i++) {
      int32_t four;  /* 4 activation bytes; memcpy: no aliasing through an int32_t pointer */
      memcpy(&four, q + i * in4 + 4 * kg, sizeof four);
      __m512i a = _mm512_set1_epi32(four);
      for (int h = 0; h < NB; h++) acc[h][i] = _mm512_dpbusd_epi32(acc[h][i], a, wv[h]);
    }
  }
  store_outputs(NR, acc[0], s_x, w_sum128, s_w, bias, y, out, o0);
  if (NB == 2) store_outputs(NR, acc[1], s_x, w_sum128, s_w, bias, y, out, o0 + 16);
}

#endif
