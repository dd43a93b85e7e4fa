/* The codec decoder's SnakeBeta, y = x + sin(x a)^2 b per channel, in one pass over memory
   (qwen3_tts/codec/layers.py, kernels.py).

   Bit for bit torch's five operations (mul, sin, mul, mul, add): each step rounds as torch's
   does (float32; bfloat16: computed in float32 and rounded to bfloat16 to nearest even after
   every step). float32: sin is the function torch's AVX-512 sin calls, MKL's vmsSin (its
   address passed by the caller: libtorch exports it); bfloat16: sin(t)^2 is a table made by
   torch itself. Built with -ffp-contract=off: no fused multiply-adds.

   x and y: `rows` rows of `n` samples, row r at r * stride (y may be x). Channel-major
   (per_sample 0): a row is one channel's samples, the channel of row r is r % channels;
   time-major (per_sample 1, n = channels): a row is every channel at one time step. */

#include <immintrin.h>
#include <stdint.h>

int snake_beta_supported(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl");
}

static inline __mmask16 tail_mask(int64_t left) {
    return left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1u);
}

/* torch's float32 sin: MKL's vmsSin (n, in, out, mode) in torch's mode, over blocks of a row
   (element by element the same result whatever the block). */
typedef void (*vms_sin_t)(int, const float *, float *, long long);
#define VML_MODE 0x140102LL /* VML_HA | VML_FTZDAZ_OFF | VML_ERRMODE_IGNORE, as ATen/cpu/vml.h */
#define BLOCK 4096

/* The per-channel constant of 16 samples: one per row, or one per sample (time-major). */
__attribute__((target("avx512f"))) static inline __m512 constant_f32(
    const float *c, int64_t r, int64_t channels, int64_t i, __mmask16 m, int per_sample) {
    return per_sample ? _mm512_maskz_loadu_ps(m, c + i) : _mm512_set1_ps(c[r % channels]);
}

__attribute__((target("avx512f"))) void snake_beta_f32(
    const float *x, int64_t x_stride, float *y, int64_t y_stride, int64_t rows,
    int64_t channels, int64_t n, const float *alpha, const float *inv_beta, void *sin_fn,
    int per_sample, int threads) {
    vms_sin_t vms_sin = (vms_sin_t)sin_fn;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
        const float *in = x + r * x_stride;
        float *out = y + r * y_stride;
        float t[BLOCK] __attribute__((aligned(64)));
        for (int64_t start = 0; start < n; start += BLOCK) {
            int64_t len = n - start < BLOCK ? n - start : BLOCK;
            for (int64_t i = 0; i < len; i += 16) {
                __mmask16 m = tail_mask(len - i);
                __m512 a = constant_f32(alpha, r, channels, start + i, m, per_sample);
                _mm512_mask_storeu_ps(t + i, m,
                                      _mm512_mul_ps(_mm512_maskz_loadu_ps(m, in + start + i), a));
            }
            vms_sin((int)len, t, t, VML_MODE);
            for (int64_t i = 0; i < len; i += 16) {
                __mmask16 m = tail_mask(len - i);
                __m512 b = constant_f32(inv_beta, r, channels, start + i, m, per_sample);
                __m512 s = _mm512_maskz_loadu_ps(m, t + i);
                s = _mm512_mul_ps(_mm512_mul_ps(s, s), b);
                __m512 v = _mm512_maskz_loadu_ps(m, in + start + i);
                _mm512_mask_storeu_ps(out + start + i, m, _mm512_add_ps(v, s));
            }
        }
    }
}

/* float32 -> nearest even bfloat16 (as float32: the low 16 bits cleared), as torch rounds;
   NaN stays a NaN. */
__attribute__((target("avx512f,avx512bw,avx512vl"))) static inline __m512 round_bf16(__m512 f) {
    __m512i bits = _mm512_castps_si512(f);
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
    __m512i rounded = _mm512_add_epi32(bits, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7FFF)));
    rounded = _mm512_and_si512(rounded, _mm512_set1_epi32((int)0xFFFF0000u));
    __mmask16 nan = _mm512_cmp_ps_mask(f, f, _CMP_UNORD_Q);
    return _mm512_mask_blend_ps(nan, _mm512_castsi512_ps(rounded), f);
}

__attribute__((target("avx512f,avx512bw,avx512vl"))) static inline __m512 load_bf16(
    const uint16_t *p, __mmask16 m) {
    __m256i half = _mm256_maskz_loadu_epi16(m, p);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(half), 16));
}

/* bfloat16: t = x a rounded to bfloat16 takes one of 65,536 values, so sin(t)^2 (each step
   rounded) is looked up: `square_sin` holds torch's own bf16 sin(t) * sin(t) at index bits(t)
   (65,537 entries: a lane reads 4 bytes). */
__attribute__((target("avx512f,avx512bw,avx512vl"))) void snake_beta_bf16(
    const uint16_t *x, int64_t x_stride, uint16_t *y, int64_t y_stride, int64_t rows,
    int64_t channels, int64_t n, const uint16_t *alpha, const uint16_t *inv_beta,
    const void *square_sin, int per_sample, int threads) {
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
        const uint16_t *in = x + r * x_stride;
        uint16_t *out = y + r * y_stride;
        __m512 a = load_bf16(alpha + r % channels, 1);  /* lane 0; broadcast below */
        __m512 b = load_bf16(inv_beta + r % channels, 1);
        a = _mm512_broadcastss_ps(_mm512_castps512_ps128(a));
        b = _mm512_broadcastss_ps(_mm512_castps512_ps128(b));
        for (int64_t i = 0; i < n; i += 16) {
            __mmask16 m = tail_mask(n - i);
            if (per_sample) {
                a = load_bf16(alpha + i, m);
                b = load_bf16(inv_beta + i, m);
            }
            __m512 v = load_bf16(in + i, m);
            __m512i t = _mm512_srli_epi32(_mm512_castps_si512(round_bf16(_mm512_mul_ps(v, a))), 16);
            __m512i q = _mm512_i32gather_epi32(t, square_sin, 2);
            __m512 s = _mm512_castsi512_ps(_mm512_slli_epi32(q, 16));
            s = round_bf16(_mm512_mul_ps(s, b));
            __m512i sum = _mm512_castps_si512(round_bf16(_mm512_add_ps(v, s)));
            _mm256_mask_storeu_epi16(out + i, m, _mm512_cvtepi32_epi16(_mm512_srli_epi32(sum, 16)));
        }
    }
}
