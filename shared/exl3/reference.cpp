#include "shared/exl3/reference.h"

#include "shared/exl3/hadamard.h"
#include "shared/exl3/trellis.h"

namespace ft::exl3 {

namespace {

// Unnormalised FWHT over 128 elements spaced `stride` apart, in double.
void fwht128_strided(double* v, int64_t stride) {
  for (int w = 1; w < kHad; w *= 2)
    for (int i = 0; i < kHad; i += 2 * w)
      for (int j = i; j < i + w; ++j) {
        const double a = v[j * stride], b = v[(j + w) * stride];
        v[j * stride] = a + b;
        v[(j + w) * stride] = a - b;
      }
}

}  // namespace

std::vector<float> effective_weight(const Exl3Linear& q) {
  const int64_t in = q.in_p, out = q.out_p;
  std::vector<float> wq(static_cast<size_t>(in * out));
  decode_trellis_f32(q.trellis, in, out, q.K, q.codebook, wq.data());
  std::vector<double> w(wq.begin(), wq.end());
  for (int64_t c = 0; c < out; ++c)
    for (int64_t r0 = 0; r0 < in; r0 += kHad) fwht128_strided(w.data() + r0 * out + c, out);
  for (int64_t r = 0; r < in; ++r) {
    double* row = w.data() + r * out;
    for (int64_t c0 = 0; c0 < out; c0 += kHad) fwht128_strided(row + c0, 1);
    const double s = static_cast<double>(q.suh[r]) / 128.0;  // (1/sqrt(128))² from both sides
    for (int64_t c = 0; c < out; ++c) wq[r * out + c] = static_cast<float>(row[c] * s * q.svh[c]);
  }
  return wq;
}

std::vector<float> dense_weight(const Exl3Linear& q, int64_t out, int64_t in) {
  const std::vector<float> weff = effective_weight(q);
  std::vector<float> w(static_cast<size_t>(out * in));
  for (int64_t k = 0; k < out; ++k)
    for (int64_t i = 0; i < in; ++i) w[k * in + i] = weff[i * q.out_p + k];
  return w;
}

void input_transform(const float* x, const float* suh, int64_t in_p, float* xh) {
  for (int64_t i = 0; i < in_p; ++i) xh[i] = x[i] * suh[i];
  hadamard_blocks(xh, in_p);
}

void output_transform(float* z, const float* svh, const float* bias, int64_t out_p) {
  hadamard_blocks(z, out_p);
  for (int64_t c = 0; c < out_p; ++c) z[c] *= svh[c];
  if (bias)
    for (int64_t c = 0; c < out_p; ++c) z[c] += bias[c];
}

void forward_reference(const Exl3Linear& q, const float* wq, const float* x, int64_t rows, float* y,
                       Operands operands) {
  const int64_t in = q.in_p, out = q.out_p;
  std::vector<float> xh(static_cast<size_t>(in));
  for (int64_t n = 0; n < rows; ++n) {
    input_transform(x + n * in, q.suh.data(), in, xh.data());
    const float row_scale = operands == Operands::F16Rows ? round_row_to_f16(xh.data(), in) : 1.0f;
    float* z = y + n * out;
    for (int64_t c = 0; c < out; ++c) z[c] = 0.0f;
    for (int64_t r = 0; r < in; ++r) {
      const float xr = xh[r];
      const float* wr = wq + r * out;
      for (int64_t c = 0; c < out; ++c) z[c] += xr * wr[c];
    }
    // ·row_scale after svh, before bias (a power of two, exact; 1 for F32).
    output_transform(z, q.svh.data(), nullptr, out);
    for (int64_t c = 0; c < out; ++c) {
      z[c] *= row_scale;
      if (!q.bias.empty()) z[c] += q.bias[c];
    }
  }
}

}  // namespace ft::exl3
