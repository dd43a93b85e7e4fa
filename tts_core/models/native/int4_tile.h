/* The 4-bit linear kernel's tile (int4_linear.c; also decode_stack.c, which runs whole decode
 * steps over the same packed weights): NR rows by 16 output channels, AVX-512 VNNI. The layout
 * and the arithmetic are int4_linear.c's (its header comment). */
#ifndef TTS_CORE_INT4_TILE_H
#define TTS_CORE_INT4_TILE_H

#include "int8_avx512.h"

#define GROUP 32

/* NR rows x 16 output channels over all groups. */
INLINE KERNEL void tile4(int NR, const uint8_t *q, int64_t in, const uint8_t *nib,
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

#endif
