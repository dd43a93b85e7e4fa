/* The 8-bit linear layer of tts_core/quant/linear.py (Int8Linear.forward_reference, the
 * torch path), one scalar step at a time in torch's order: the reference the native kernels are
 * held to where torch cannot run (an ARM kernel under qemu-user). Build with -ffp-contract=off:
 * each float step rounds once, as torch's separate ops do. Tested against torch itself by
 * tests/native/test_native_kernels_cross.py on the build machine.
 *
 * x (rows, in) float32; w (out, in) int8, unpacked; s_w (out); bias (out) or NULL; y (rows, out).
 */
#include <math.h>
#include <stdint.h>

void int8_linear_reference(const float *x, int64_t rows, int64_t in, int64_t out,
                           const int8_t *w, const float *s_w, const float *bias, float *y,
                           int8_t *q /* scratch: in */) {
  for (int64_t r = 0; r < rows; r++) {
    const float *xr = x + r * in;
    /* peak = rows.abs().amax(dim=1) (NaN propagates); scale = peak.clamp_min_(1e-30) * (1/127) */
    float peak = 0.0f;
    int nan = 0;
    for (int64_t k = 0; k < in; k++) {
      float a = fabsf(xr[k]);
      if (a != a) nan = 1;
      else if (a > peak) peak = a;
    }
    float scale = (peak < 1e-30f ? 1e-30f : peak) * (float)(1.0 / 127.0);
    if (nan) scale = NAN;
    /* q = torch.round(rows / scale).to(torch.int8): half to even; NaN converts to 0 */
    for (int64_t k = 0; k < in; k++) {
      float v = rintf(xr[k] / scale);
      q[k] = v == v ? (int8_t)v : 0;
    }
    /* torch._int_mm(q, W^T) * scale, then * s_w, then + bias */
    for (int64_t o = 0; o < out; o++) {
      int32_t sum = 0;
      for (int64_t k = 0; k < in; k++) sum += (int32_t)q[k] * (int32_t)w[o * in + k];
      float v = (float)sum * scale;
      v = v * s_w[o];
      if (bias) v = v + bias[o];
      y[r * out + o] = v;
    }
  }
}
