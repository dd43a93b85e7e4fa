/* One decode step of a pre-norm Qwen3 decoder stack over 8-bit weights, in one call: every layer
   and the final norm for `rows` rows of one new position each (models/stack_step.py: its caller,
   and the same step in torch ops). AVX-512 VNNI + DQ.

   Row r, residual stream x (hidden,), at position p_r of its own keys and values, per layer:
     h = ln1 * (x * inv_rms(x))          inv_rms(v) = 1 / sqrt(eps + sum_i v_i^2 / n), the sum in
                                          16 lanes in order, then attend_one.h's lane tree
     q | k | v = int8_linear(h)          int8_common.h's definition: Int8Linear's bits exactly
                                          (a projection in 4 bits: Int4Linear's, int4_linear.c)
     each q head: rope(q_norm * (q * inv_rms(q))), each k head with k_norm; k and v written at p_r
                                          rope(y) = y * cos + roll(y, D / 2) * signed_sin
     a = attention over keys 0..p_r      attend_one.h, scale 1 / sqrt(D)
     x = x + int8_linear_o(a)
     h = ln2 * (x * inv_rms(x))
     g | u = int8_linear_gate_up(h)
     x = x + int8_linear_down((g / (1 + exp(-g))) * u)
   out_r = final * (x * inv_rms(x)). Each step rounds once (no fused multiply-add:
   -ffp-contract=off); exp is exp512 below. The torch path's order differs in the sums of the
   norms and in exp only (a few units in the last place, tests/test_stack_step.py).

   A row's numbers depend on that row alone: its norms, heads and attention are computed whole
   by one thread in one order, and the 8-bit sums are exact integers; so a row is the same alone,
   in any batch and at any thread count. The weights are read once per layer for every row.

   Threads share one parallel region; each stage is a worksharing loop over rows, heads or
   blocks of 16 output channels, with the loop's barrier between stages. */

#include "attend_one.h"
#include "int4_tile.h"
#include "int8_tile.h"

#define STEP __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx512dq")))
#define LAYER_WEIGHTS 20
#define MAX_ROWS 64

/* a layer's addresses, in this order (stack_step.py builds them); a projection's four: its
   packed weights, w_sum128, s_w, and its 4-bit group multipliers (0: an 8-bit projection) */
enum {
  LN1, Q_NORM, K_NORM, LN2, QKV_W, O_W = QKV_W + 4, GATE_UP_W = O_W + 4, DOWN_W = GATE_UP_W + 4
};

int decode_stack_supported(void) {
  return avx512vnni_supported() && __builtin_cpu_supports("avx512dq");
}

/* y = w * (x * inv_rms(x)) over n floats, n a multiple of 16 (y may be x). */
STEP static void rms_norm(const float *x, int64_t n, float eps, const float *w, float *y) {
  __m512 acc = _mm512_setzero_ps();
  for (int64_t i = 0; i < n; i += LANES) {
    __m512 v = _mm512_loadu_ps(x + i);
    acc = _mm512_add_ps(acc, _mm512_mul_ps(v, v));
  }
  float stats = eps + tree_sum(acc) / (float)n;
  __m512 inv = _mm512_set1_ps(1.0f / sqrtf(stats));
  for (int64_t i = 0; i < n; i += LANES) {
    __m512 v = _mm512_mul_ps(_mm512_loadu_ps(x + i), inv);
    _mm512_storeu_ps(y + i, _mm512_mul_ps(_mm512_loadu_ps(w + i), v));
  }
}

/* One head (d floats): rms_norm with w, then rope with the position's cos and signed_sin rows. */
STEP static void norm_rope(const float *x, int64_t d, float eps, const float *w,
                           const float *cos, const float *signed_sin, float *y) {
  float normed[MAX_CHUNKS * LANES];
  const int64_t half = d / 2;
  rms_norm(x, d, eps, w, normed);
  for (int64_t i = 0; i < half; ++i)
    y[i] = normed[i] * cos[i] + normed[i + half] * signed_sin[i];
  for (int64_t i = half; i < d; ++i)
    y[i] = normed[i] * cos[i] + normed[i - half] * signed_sin[i];
}

/* exp(x), 16 lanes, by exp_nonpositive's steps (attend_one.h) over x clamped to [-87.3, 88.3]
   (0 below -87.3; at the top 2^127 * exp(t) stays finite): under 4 u relative in between. */
STEP INLINE __m512 exp512(__m512 x) {
  const __m512 low = _mm512_set1_ps(-87.3f), round = _mm512_set1_ps(12582912.0f);
  __m512 v = _mm512_min_ps(_mm512_max_ps(x, low), _mm512_set1_ps(88.3f));
  __m512 k = _mm512_sub_ps(_mm512_add_ps(_mm512_mul_ps(v, _mm512_set1_ps(1.44269504f)), round),
                           round);
  __m512 t = _mm512_sub_ps(_mm512_sub_ps(v, _mm512_mul_ps(k, _mm512_set1_ps(0.693359375f))),
                           _mm512_mul_ps(k, _mm512_set1_ps(-2.12194440e-4f)));
  static const float taylor[] = {1.0f / 5040.0f, 1.0f / 720.0f, 1.0f / 120.0f, 1.0f / 24.0f,
                                 1.0f / 6.0f, 0.5f, 1.0f, 1.0f};
  __m512 p = _mm512_set1_ps(1.0f / 40320.0f);
  for (int i = 0; i < 8; ++i) p = _mm512_add_ps(_mm512_mul_ps(p, t), _mm512_set1_ps(taylor[i]));
  __m512i bits = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(k), _mm512_set1_epi32(127)), 23);
  __m512 e = _mm512_mul_ps(p, _mm512_castsi512_ps(bits));
  return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, low, _CMP_GE_OQ), e);
}

/* g[i] = silu(g[i]) * u[i] = (g / (1 + exp(-g))) * u over n floats, a multiple of 16. */
STEP static void gated(float *g, const float *u, int64_t n) {
  const __m512 one = _mm512_set1_ps(1.0f);
  for (int64_t i = 0; i < n; i += LANES) {
    __m512 x = _mm512_loadu_ps(g + i);
    __m512 e = exp512(_mm512_sub_ps(_mm512_setzero_ps(), x));
    __m512 silu = _mm512_div_ps(x, _mm512_add_ps(one, e));
    _mm512_storeu_ps(g + i, _mm512_mul_ps(silu, _mm512_loadu_ps(u + i)));
  }
}

/* y (rows, out) = the quantized rows (rows, in) times a packed projection, 8 or 4 bits: the
   blocks of 16 outputs shared among the team (a worksharing loop: call it from every thread of
   the region). */
STEP static void multiply(const uint8_t *q, const float *s_x, int64_t rows, int64_t in,
                          int64_t out, const int64_t *layer, int w, float *y) {
  const int8_t *packed = (const int8_t *)(intptr_t)layer[w];
  const int32_t *sums = (const int32_t *)(intptr_t)layer[w + 1];
  const float *s_w = (const float *)(intptr_t)layer[w + 2];
  const uint8_t *mult = (const uint8_t *)(intptr_t)layer[w + 3];
  const int64_t blocks = (out + 15) / 16;
#pragma omp for schedule(static)
  for (int64_t ob = 0; ob < blocks; ob++) {
    for (int64_t r0 = 0; r0 < rows; r0 += MAX_TILE_ROWS) {
      const uint8_t *qt = q + r0 * in;
      const float *st = s_x + r0;
      float *yt = y + r0 * out;
      int64_t left = rows - r0 >= MAX_TILE_ROWS ? MAX_TILE_ROWS : rows - r0;
      if (mult) {
        const uint8_t *nb = (const uint8_t *)packed + ob * in * 8, *mb = mult + ob * in / 2;
#define TILE4(n) tile4(n, qt, in, nb, mb, st, sums, s_w, NULL, yt, out, ob * 16)
        FOR_TILE_ROWS(left, TILE4)
#undef TILE4
      } else {
        const int8_t *wb = packed + ob * in * 16;
#define TILE1(n) tile(n, 1, qt, in, wb, st, sums, s_w, NULL, yt, out, ob * 16)
        FOR_TILE_ROWS(left, TILE1)
#undef TILE1
      }
    }
  }
}

/* Working memory of one call (reserve_work). */
struct work {
  float *x, *h, *y, *q, *a, *s_x;
  uint8_t *bytes;
};

/* Working memory of one call, carved from the calling thread's scratch (int8_common.h's
   reserve: kept for its next call, freed when it ends) and shared by the team. */
static int reserve_work(struct work *w, int64_t rows, int64_t hidden, int64_t nq, int64_t wide,
                        int64_t inner) {
  /* floats: x, h (rows x hidden), y (rows x wide), q, a (rows x nq), s_x; bytes: the widest
     quantized rows */
  int64_t widest = hidden > nq ? hidden : nq;
  widest = widest > inner ? widest : inner;
  int64_t floats[] = {rows * hidden, rows * hidden, rows * wide, rows * nq, rows * nq, rows};
  int64_t total = 0;
  for (int i = 0; i < 6; ++i) total += floats[i];
  struct scratch *scratch = reserve(total, rows * widest);
  if (!scratch) return -1;
  float *base = scratch->s_x;
  float **parts[] = {&w->x, &w->h, &w->y, &w->q, &w->a, &w->s_x};
  for (int i = 0; i < 6; ++i) {
    *parts[i] = base;
    base += floats[i];
  }
  w->bytes = scratch->q;
  return 0;
}

/* The step (module comment). dims: hidden, heads, kv_heads, head_dim, inner (the MLP's), layers;
   weights: LAYER_WEIGHTS addresses per layer (the enum's order), then the final norm's;
   caches: per layer, per row, the addresses of its keys and values (kv head 0, position 0; kv
   head i at + i * k_head, position j at + j * k_pos floats; values likewise); cos, signed_sin:
   the (positions, head_dim) RoPE tables. x, out: (rows, hidden). 0, -1: no memory, -2: a shape
   it does not take. */
STEP int decode_stack(const float *x, int64_t rows, const int64_t *dims, float eps, float scale,
                      const int64_t *weights, const int64_t *caches, int64_t k_head,
                      int64_t k_pos, int64_t v_head, int64_t v_pos, const int64_t *positions,
                      const float *cos, const float *signed_sin, float *out, int threads) {
  const int64_t hidden = dims[0], heads = dims[1], kv = dims[2], d = dims[3], inner = dims[4];
  const int64_t layers = dims[5], nq = heads * d, nk = kv * d, wide_qkv = nq + 2 * nk;
  const int64_t group = heads / kv;
  int64_t wide = wide_qkv > 2 * inner ? wide_qkv : 2 * inner; /* y's row: any projection's out */
  wide = wide > hidden ? wide : hidden;
  if (rows < 1 || rows > MAX_ROWS || d % LANES || d / LANES > MAX_CHUNKS || hidden % LANES ||
      inner % LANES || heads % kv)
    return -2;
  struct work w;
  if (reserve_work(&w, rows, hidden, nq, wide, inner)) return -1;
  const float *final_norm = (const float *)(intptr_t)weights[LAYER_WEIGHTS * layers];
  int failed = 0;
  memcpy(w.x, x, sizeof(float) * rows * hidden);
#pragma omp parallel num_threads(threads)
  {
    int64_t table[3 * MAX_ROWS]; /* attend_one.h's: (k, v) per row, then key counts */
    for (int64_t l = 0; l < layers; ++l) {
      const int64_t *layer = weights + LAYER_WEIGHTS * l;
#define AT(i) ((const float *)(intptr_t)layer[i])
#pragma omp for schedule(static)
      for (int64_t r = 0; r < rows; ++r) {
        float *xr = w.x + r * hidden, *hr = w.h + r * hidden;
        if (l > 0) /* the previous layer's down projection */
          for (int64_t i = 0; i < hidden; ++i) xr[i] = xr[i] + w.y[r * hidden + i];
        rms_norm(xr, hidden, eps, AT(LN1), hr);
        quantize_row(hr, hidden, w.bytes + r * hidden, w.s_x + r);
      }
      multiply(w.bytes, w.s_x, rows, hidden, wide_qkv, layer, QKV_W, w.y);
#pragma omp for schedule(static)
      for (int64_t item = 0; item < rows * (heads + kv); ++item) {
        const int64_t r = item / (heads + kv), j = item % (heads + kv), p = positions[r];
        const float *yr = w.y + r * wide_qkv, *c = cos + p * d, *s = signed_sin + p * d;
        if (j < heads) {
          norm_rope(yr + j * d, d, eps, AT(Q_NORM), c, s, w.q + r * nq + j * d);
        } else {
          const int64_t h = j - heads, *row = caches + 2 * (l * rows + r);
          float *k = (float *)(intptr_t)row[0] + h * k_head + p * k_pos;
          float *v = (float *)(intptr_t)row[1] + h * v_head + p * v_pos;
          norm_rope(yr + j * d, d, eps, AT(K_NORM), c, s, k);
          memcpy(v, yr + nq + nk + h * d, sizeof(float) * d);
        }
      }
      for (int64_t r = 0; r < rows; ++r) {
        table[2 * r] = caches[2 * (l * rows + r)];
        table[2 * r + 1] = caches[2 * (l * rows + r) + 1];
        table[2 * rows + r] = positions[r] + 1;
      }
#pragma omp for schedule(static)
      for (int64_t item = 0; item < rows * kv; ++item)
        if (attend_item(w.q, item, rows, kv, group, d, table, k_head, k_pos, v_head, v_pos,
                        scale, w.a)) {
#pragma omp atomic write
          failed = 1;
        }
#pragma omp for schedule(static)
      for (int64_t r = 0; r < rows; ++r)
        quantize_row(w.a + r * nq, nq, w.bytes + r * nq, w.s_x + r);
      multiply(w.bytes, w.s_x, rows, nq, hidden, layer, O_W, w.y);
#pragma omp for schedule(static)
      for (int64_t r = 0; r < rows; ++r) {
        float *xr = w.x + r * hidden, *hr = w.h + r * hidden;
        for (int64_t i = 0; i < hidden; ++i) xr[i] = xr[i] + w.y[r * hidden + i];
        rms_norm(xr, hidden, eps, AT(LN2), hr);
        quantize_row(hr, hidden, w.bytes + r * hidden, w.s_x + r);
      }
      multiply(w.bytes, w.s_x, rows, hidden, 2 * inner, layer, GATE_UP_W, w.y);
#pragma omp for schedule(static)
      for (int64_t r = 0; r < rows; ++r) {
        float *g = w.y + r * 2 * inner;
        gated(g, g + inner, inner);
        quantize_row(g, inner, w.bytes + r * inner, w.s_x + r);
      }
      multiply(w.bytes, w.s_x, rows, inner, hidden, layer, DOWN_W, w.y);
#undef AT
    }
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      float *xr = w.x + r * hidden;
      for (int64_t i = 0; i < hidden; ++i) xr[i] = xr[i] + w.y[r * hidden + i];
      rms_norm(xr, hidden, eps, final_norm, out + r * hidden);
    }
  }
  return failed ? -1 : 0;
}
