/* The one-query attention of attend_one.c, each (row, kv head) in one fixed order (the order and
   the layout: attend_one.c's header comment); also decode_stack.c's attention. */
#ifndef TTS_CORE_ATTEND_ONE_H
#define TTS_CORE_ATTEND_ONE_H

#include <immintrin.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define LANES 16
#define MAX_CHUNKS 16 /* dim <= 256 */
#define STACK_SCORES 8192
#define AVX512 __attribute__((target("avx512f,avx512dq")))
#define INLINE static inline __attribute__((always_inline))


/* The 16 lanes' tree sum (the header's). */
AVX512 INLINE float tree_sum(__m512 acc) {
    __m256 eight = _mm256_add_ps(_mm512_castps512_ps256(acc), _mm512_extractf32x8_ps(acc, 1));
    __m128 four = _mm_add_ps(_mm256_castps256_ps128(eight), _mm256_extractf128_ps(eight, 1));
    __m128 two = _mm_add_ps(four, _mm_movehl_ps(four, four));
    return _mm_cvtss_f32(_mm_add_ss(two, _mm_shuffle_ps(two, two, 1)));
}

/* exp(x) for x <= 0 (0 below -87.3, where float32 has no normal result): x = k ln2 + t with
   |t| <= ln2 / 2 and k rounded by the add-and-subtract of 1.5 * 2^23, exp(t) by its Taylor
   series to t^8 (the next term < 2.1e-10 of the sum), times 2^k built in the exponent bits:
   under 4 u relative (the error model in tests/test_attend_one.py's _bound). */
INLINE void exp_nonpositive(float *x, int64_t n) {
    /* Cephes' split of ln 2: k * ln2_hi is exact for |k| < 2^15 */
    const float log2e = 1.44269504f, ln2_hi = 0.693359375f, ln2_lo = -2.12194440e-4f;
    const float round = 12582912.0f; /* 1.5 * 2^23 */
    for (int64_t i = 0; i < n; ++i) {
        float v = x[i] < -87.3f ? -87.3f : x[i];
        float k = (v * log2e + round) - round;
        float t = (v - k * ln2_hi) - k * ln2_lo;
        float p = 1.0f / 40320.0f;
        p = p * t + 1.0f / 5040.0f;
        p = p * t + 1.0f / 720.0f;
        p = p * t + 1.0f / 120.0f;
        p = p * t + 1.0f / 24.0f;
        p = p * t + 1.0f / 6.0f;
        p = p * t + 0.5f;
        p = p * t + 1.0f;
        p = p * t + 1.0f;
        int32_t bits = ((int32_t)k + 127) << 23;
        float scale;
        memcpy(&scale, &bits, sizeof scale);
        x[i] = x[i] < -87.3f ? 0.0f : p * scale;
    }
}

/* q . k_j of one query head over the 16 lanes (the header's order), for `keys` (<= 4) keys at
   once: independent chains, so the adds of one key wait on no other's. */
AVX512 INLINE void dots(const float *q, const float *k, int64_t keys, int64_t chunks,
                        int64_t k_pos, float scale, float *s) {
    __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                     _mm512_setzero_ps()};
    for (int64_t c = 0; c < chunks; ++c) {
        const __m512 qc = _mm512_loadu_ps(q + c * LANES);
        for (int64_t i = 0; i < keys; ++i)
            acc[i] = _mm512_add_ps(acc[i],
                                   _mm512_mul_ps(qc, _mm512_loadu_ps(k + i * k_pos + c * LANES)));
    }
    for (int64_t i = 0; i < keys; ++i) s[i] = tree_sum(acc[i]) * scale;
}

/* s[g * n + j] for the group's query heads over the n keys. */
AVX512 INLINE void scores_of(const float *q, const float *k, int64_t n, int64_t group,
                             int64_t chunks, int64_t k_pos, float scale, float *s) {
    for (int64_t j = 0; j < n; j += 4) {
        for (int64_t g = 0; g < group; ++g) {
            const float *qg = q + g * chunks * LANES, *kj = k + j * k_pos;
            if (n - j >= 4) /* a constant count: the four chains stay in registers */
                dots(qg, kj, 4, chunks, k_pos, scale, s + g * n + j);
            else
                dots(qg, kj, n - j, chunks, k_pos, scale, s + g * n + j);
        }
    }
}

/* out (dim,) = (sum_j p_j v_j) / total for one query head, or two sharing each v_j read. */
AVX512 INLINE void weighted_values(const float *p, const float *v, int64_t n, int64_t heads,
                                   int64_t chunks, int64_t v_pos, const float *total,
                                   float *out) {
    __m512 acc[2][MAX_CHUNKS];
    for (int64_t h = 0; h < heads; ++h)
        for (int64_t c = 0; c < chunks; ++c) acc[h][c] = _mm512_setzero_ps();
    for (int64_t j = 0; j < n; ++j) {
        const float *vj = v + j * v_pos;
        for (int64_t c = 0; c < chunks; ++c) {
            const __m512 vc = _mm512_loadu_ps(vj + c * LANES);
            for (int64_t h = 0; h < heads; ++h)
                acc[h][c] = _mm512_add_ps(acc[h][c], _mm512_mul_ps(_mm512_set1_ps(p[h * n + j]), vc));
        }
    }
    for (int64_t h = 0; h < heads; ++h)
        for (int64_t c = 0; c < chunks; ++c)
            _mm512_storeu_ps(out + (h * chunks + c) * LANES,
                             _mm512_div_ps(acc[h][c], _mm512_set1_ps(total[h])));
}

/* One (row, kv head): its `group` query heads over the row's n keys; s: group * n floats. */
AVX512 INLINE void attend_head(const float *q, const float *k, const float *v, int64_t n,
                               int64_t group, int64_t chunks, int64_t k_pos, int64_t v_pos,
                               float scale, float *s, float *out) {
    scores_of(q, k, n, group, chunks, k_pos, scale, s);
    float totals[group];
    for (int64_t g = 0; g < group; ++g) {
        float *sg = s + g * n;
        float top = sg[0];
        for (int64_t j = 1; j < n; ++j) top = sg[j] > top ? sg[j] : top;
        for (int64_t j = 0; j < n; ++j) sg[j] -= top;
        exp_nonpositive(sg, n);
        float total = 0.0f;
        for (int64_t j = 0; j < n; ++j) total += sg[j];
        totals[g] = total;
    }
    for (int64_t g = 0; g < group; g += 2) {
        float *o = out + g * chunks * LANES;
        if (group - g >= 2) /* a constant count: the accumulators stay in registers */
            weighted_values(s + g * n, v, n, 2, chunks, v_pos, totals + g, o);
        else
            weighted_values(s + g * n, v, n, 1, chunks, v_pos, totals + g, o);
    }
}

/* One (row, kv head) of the call; 1 where its scores found no memory. */
AVX512 INLINE int attend_item(const float *q, int64_t item, int64_t rows, int64_t kv_heads,
                              int64_t group, int64_t dim, const int64_t *table, int64_t k_head,
                              int64_t k_pos, int64_t v_head, int64_t v_pos, float scale,
                              float *out) {
    const int64_t r = item / kv_heads, h = item % kv_heads, n = table[2 * rows + r];
    const float *k = (const float *)(intptr_t)table[2 * r] + h * k_head;
    const float *v = (const float *)(intptr_t)table[2 * r + 1] + h * v_head;
    const int64_t head = (r * kv_heads + h) * group, chunks = dim / LANES;
    const float *qh = q + head * dim;
    float *oh = out + head * dim;
    float stack[STACK_SCORES];
    float *s = group * n <= STACK_SCORES ? stack : malloc(sizeof(float) * group * n);
    if (s == NULL) return 1;
    if (chunks == 8) /* dim 128 (Qwen3-TTS, ...) as a constant: loops unrolled */
        attend_head(qh, k, v, n, group, 8, k_pos, v_pos, scale, s, oh);
    else
        attend_head(qh, k, v, n, group, chunks, k_pos, v_pos, scale, s, oh);
    if (s != stack) free(s);
    return 0;
}

#endif
