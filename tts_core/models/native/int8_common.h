/* What the 8-bit linear kernels (int8_linear*.c, one per instruction set) share: the
 * definition they compute, the per-thread scratch for quantized rows, and the scalar steps.
 *
 * Each kernel computes, for x (rows, in) float32 and int8 weights W (out, in):
 *   s_x[r] = max(max_k |x[r, k]|, 1e-30) * (float)(1/127)     (NaN anywhere in the row: NaN)
 *   q[r, k] = round_half_even(x[r, k] / s_x[r])               (a NaN quotient quantizes to 0)
 *   y[r, o] = ((float)(sum_k q[r, k] * W[o, k]) * s_x[r]) * s_w[o]  (+ bias[o])
 * with an exact int32 sum and each float step rounded once, in this order (no FMA: built with
 * -ffp-contract=off), which is the torch path of ../../quant/linear.py (torch._int_mm) bit for
 * bit. A row's output therefore never depends on the other rows of its batch.
 *
 * Entry points, one pair per kernel (the prefix names the instruction set):
 *   int <prefix>_supported(void): 1 where this CPU (and OS) can run it;
 *   int <prefix>(x, rows, in, out, packed, w_sum128, s_w, bias or NULL, y, threads): 0, or -1
 *   when scratch memory ran out. `packed` is W in the kernel's own layout (see its file);
 *   w_sum128[o] = 128 * sum_k W[o, k] (used by the kernels that feed activations as q + 128).
 * A kernel may also offer
 *   int <prefix>_windows(x, steps, width, step_stride, channel_stride, taps, gap, out, packed,
 *   w_sum128, s_w, bias, y, threads): the rows are the windows of x (a conv's input, steps x
 *   width, one of the strides 1), row t being steps t, t + gap, ..., t + (taps - 1) gap end to
 *   end (a stride-1 conv's im2col row), read in place (-2: neither stride is 1).
 * Threads: torch.get_num_threads() (OpenMP's own default would be every core).
 */
#ifndef TTS_CORE_INT8_COMMON_H
#define TTS_CORE_INT8_COMMON_H

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define INLINE static inline __attribute__((always_inline))
#define MAX_TILE_ROWS 8     /* rows sharing each load of weights */
#define PREFETCH_BYTES 2048 /* how far ahead of the weight stream to ask for it */
#define MIN_SCALE 1e-30f
/* quantized bytes from which the rows are quantized on every thread: below it (a decode step's
 * few rows) the fork costs more than it saves */
#define PARALLEL_QUANTIZE_BYTES (64 << 10)

/* The row's scale from its peak |x| and whether it held a NaN (torch's amax propagates it). */
INLINE float row_scale(float peak, int has_nan) {
  float scale = (peak < MIN_SCALE ? MIN_SCALE : peak) * (float)(1.0 / 127.0);
  return has_nan ? NAN : scale;
}

/* One element, as the vector code quantizes it (rintf: round half to even in the default
 * rounding mode). A NaN quotient (NaN or inf in the row) becomes 0, as torch's float -> int8
 * conversion gives; the row's scale is NaN or inf then, and so is its output. */
INLINE int32_t quantize_scalar(float x, float scale) {
  float v = __builtin_rintf(x / scale);
  return v == v ? (int32_t)v : 0;
}

/* Scratch for the quantized rows, one per calling thread (a few hundred KB at most), freed when
 * that thread ends. Each kernel library has its own. */
struct scratch {
  void *q;
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

/* At least `bytes` (64-byte aligned) for the quantized rows and `rows` floats for s_x. */
static struct scratch *reserve(int64_t rows, int64_t bytes) {
  pthread_once(&scratch_once, make_scratch_key);
  struct scratch *s = pthread_getspecific(scratch_key);
  if (!s) {
    s = calloc(1, sizeof *s);
    if (!s || pthread_setspecific(scratch_key, s)) {
      free(s);
      return NULL;
    }
  }
  if (bytes > s->bytes) {
    free(s->q);
    s->q = aligned_alloc(64, (size_t)((bytes + 63) / 64 * 64));
    s->bytes = s->q ? bytes : 0;
  }
  if (rows > s->rows) {
    free(s->s_x);
    s->s_x = malloc((size_t)rows * sizeof(float));
    s->rows = s->s_x ? rows : 0;
  }
  return s->q && s->s_x ? s : NULL;
}

/* `CALL(n)` for n = the rows left (at most MAX_TILE_ROWS): each tile size its own unrolled
 * copy of the kernel's tile function. */
#define FOR_TILE_ROWS(left, CALL)  \
  switch (left) {                  \
    case 8: CALL(8); break;        \
    case 7: CALL(7); break;        \
    case 6: CALL(6); break;        \
    case 5: CALL(5); break;        \
    case 4: CALL(4); break;        \
    case 3: CALL(3); break;        \
    case 2: CALL(2); break;        \
    default: CALL(1); break;       \
  }

#endif
