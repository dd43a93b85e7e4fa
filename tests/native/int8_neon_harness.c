/* The NEON kernel (tts_core/models/native/int8_linear_neon.c) against the scalar reference
 * (int8_reference.c), bit for bit, on the model's shapes and odd ones, 0-17 rows, with and
 * without bias, rows over 6 decades of scale, an all-zero row, NaN and inf rows. Built for
 * aarch64 and run under qemu-user (or natively) by test_native_kernels_cross.py.
 *
 *   harness            every case; prints "ok N cases" (exit 0) or the mismatches (exit 1)
 *   harness supported  prints "supported 0|1": whether the kernel would run on this CPU
 */
#include <stdio.h>
#include <string.h>

#include "int8_linear_neon.c"
#include "int8_reference.c"

static uint64_t state = 0x9E3779B97F4A7C15ull;

static uint64_t next(void) { /* xorshift64* */
  state ^= state >> 12;
  state ^= state << 25;
  state ^= state >> 27;
  return state * 0x2545F4914F6CDD1Dull;
}

static float uniform(void) { return (float)(next() >> 40) * (1.0f / 16777216.0f); }
static float normalish(void) { return (uniform() + uniform() + uniform() + uniform() - 2.0f) * 1.7f; }

/* pack_for_kernel(q, 16, 4, 16) of ../../tts_core/quant/linear.py */
static int8_t *pack(const int8_t *w, int64_t out, int64_t in) {
  int64_t out16 = (out + 15) / 16 * 16, in16 = (in + 15) / 16 * 16;
  int8_t *packed = calloc((size_t)(out16 * in16), 1);
  for (int64_t o = 0; o < out; o++)
    for (int64_t k = 0; k < in; k++)
      packed[((o / 16 * (in16 / 4) + k / 4) * 16 + o % 16) * 4 + k % 4] = w[o * in + k];
  return packed;
}

static int same(float a, float b) {
  if (a != a && b != b) return 1; /* both NaN (payloads may differ) */
  return memcmp(&a, &b, sizeof a) == 0;
}

/* One layer, every row count in `counts`: mismatching outputs (printed, at most a few). */
static int64_t run_case(int64_t out, int64_t in, int bias_on, const int *counts, int ncounts) {
  int8_t *w = malloc((size_t)(out * in));
  float *s_w = malloc((size_t)out * sizeof(float)), *bias = malloc((size_t)out * sizeof(float));
  for (int64_t i = 0; i < out * in; i++) w[i] = (int8_t)((int)(next() % 255) - 127);
  for (int64_t o = 0; o < out; o++) {
    s_w[o] = uniform() * 0.01f + 1e-4f;
    bias[o] = normalish();
  }
  int8_t *packed = pack(w, out, in);
  int32_t *w_sum128 = calloc((size_t)out, sizeof(int32_t)); /* not read by this kernel */
  int64_t bad = 0;
  for (int c = 0; c < ncounts; c++) {
    int64_t rows = counts[c];
    float *x = malloc((size_t)((rows ? rows : 1) * in) * sizeof(float));
    float *y = malloc((size_t)((rows ? rows : 1) * out) * sizeof(float));
    float *ref = malloc((size_t)((rows ? rows : 1) * out) * sizeof(float));
    int8_t *q = malloc((size_t)in);
    for (int64_t r = 0; r < rows; r++) {
      float decade = rows > 1 ? -3.0f + 6.0f * (float)r / (float)(rows - 1) : 0.0f;
      float scale = powf(10.0f, decade);
      for (int64_t k = 0; k < in; k++) x[r * in + k] = normalish() * scale;
    }
    if (rows > 2) memset(x + 1 * in, 0, (size_t)in * sizeof(float)); /* all zero */
    if (rows > 3) x[3 * in + in - 1] = NAN;      /* the last input: a scalar tail if any */
    if (rows > 4) x[4 * in] = INFINITY;          /* scale inf: every output NaN */
    if (rows > 5) x[5 * in + in / 2] = -NAN;
    if (int8_linear_neon(x, rows, in, out, packed, w_sum128, s_w, bias_on ? bias : NULL, y, 2)) {
      printf("scratch allocation failed\n");
      return out * rows + 1;
    }
    int8_linear_reference(x, rows, in, out, w, s_w, bias_on ? bias : NULL, ref, q);
    for (int64_t i = 0; i < rows * out; i++) {
      if (!same(y[i], ref[i])) {
        if (bad < 5)
          printf("mismatch out %lld in %lld bias %d rows %lld: [%lld, %lld] kernel %.9g ref %.9g\n",
                 (long long)out, (long long)in, bias_on, (long long)rows, (long long)(i / out),
                 (long long)(i % out), (double)y[i], (double)ref[i]);
        bad++;
      }
    }
    free(x), free(y), free(ref), free(q);
  }
  free(w), free(s_w), free(bias), free(packed), free(w_sum128);
  return bad;
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "supported") == 0) {
    printf("supported %d\n", int8_linear_neon_supported());
    return 0;
  }
  if (!int8_linear_neon_supported()) {
    printf("this CPU has no dot product (asimddp): the kernel would not be chosen\n");
    return 2;
  }
  static const int all[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 15, 16, 17};
  static const int some[] = {1, 5, 8};
  /* the model's shapes (0.6B qkv, o, down), then odd ones: in not a multiple of 4 or 16, out not
   * one of 16, the vector loops' tails (in < 4, < 16, 16 + a few) */
  static const int64_t big[][2] = {{4096, 1024}, {1024, 2048}, {1024, 3072}};
  static const int64_t odd[][2] = {{17, 5}, {1, 3}, {40, 130}, {9, 15}, {8, 16},
                                   {33, 1023}, {16, 17}, {100, 31}, {64, 96}};
  int64_t bad = 0, cases = 0;
  for (int bias_on = 0; bias_on < 2; bias_on++) {
    for (size_t s = 0; s < sizeof big / sizeof big[0]; s++, cases += 3)
      bad += run_case(big[s][0], big[s][1], bias_on, some, 3);
    for (size_t s = 0; s < sizeof odd / sizeof odd[0]; s++, cases += 13)
      bad += run_case(odd[s][0], odd[s][1], bias_on, all, 13);
  }
  if (bad) {
    printf("FAILED: %lld outputs differ\n", (long long)bad);
    return 1;
  }
  printf("ok %lld cases\n", (long long)cases);
  return 0;
}
