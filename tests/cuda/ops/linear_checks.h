#pragma once
// Helpers of the dense-linear and MoE GPU tests (test_linear.cpp, test_moe.cpp): bf16-valued
// random weights, fp16 weights and activations staged on the device, the double-precision
// reference on the same fp16-rounded operands, and comparisons that name the worst element.
#include <cuda_fp16.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "gpu-worker/backends/cuda/ops/linear.h"
#include "tests/cuda/support/gpu_test.h"

namespace ft::test::lin {

inline float bf16_round(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  std::memcpy(&f, &u, 4);
  return f;
}

// Fast seeded values for big tensors (splitmix64 → uniform [−scale, scale)), bf16-valued when
// asked: the real widths hold up to 50 M weights, too many for std::normal_distribution here.
inline std::vector<float> fast_uniform(size_t n, uint64_t seed, float scale, bool bf16) {
  std::vector<float> v(n);
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (size_t i = 0; i < n; ++i) {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    const float u = static_cast<float>(static_cast<double>(z >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
    v[i] = bf16 ? bf16_round(u * scale) : u * scale;
  }
  return v;
}

inline float h2f(uint16_t h) { return __half2float(__ushort_as_half(h)); }
inline int64_t pad8(int64_t n) { return (n + 7) / 8 * 8; }

// A prepared weight on the device.
struct DeviceWeight {
  cuda::HostLinearF16 host;
  DevBuf<uint16_t> w;
  DevBuf<float> bias;
  cuda::LinearF16 L;
};
inline DeviceWeight upload_weight(const std::vector<float>& W, int64_t out, int64_t in,
                                  const std::vector<float>* bias = nullptr) {
  DeviceWeight d;
  d.host = cuda::prepare_linear_f16(W.data(), out, in);
  d.w = DevBuf<uint16_t>(d.host.w);
  if (bias) d.bias = DevBuf<float>(*bias);
  d.L.out = out;
  d.L.in = in;
  d.L.w = reinterpret_cast<const __half*>(d.w.get());
  d.L.w_scale = d.host.w_scale;
  d.L.bias = bias ? d.bias.get() : nullptr;
  d.L.k_chunk = cuda::linear_k_chunk(in, out);
  return d;
}

// Rows on the device in fp32 and as to_f16_rows makes them (xh rows pad8(cols) apart).
struct DeviceRows {
  int64_t rows = 0, cols = 0, ld = 0;
  DevBuf<float> x;
  DevBuf<uint16_t> xh;
  DevBuf<float> rs;
  __half* h() const { return reinterpret_cast<__half*>(xh.get()); }
};
inline DeviceRows stage_rows(const std::vector<float>& X, int64_t rows, int64_t cols) {
  DeviceRows d;
  d.rows = rows;
  d.cols = cols;
  d.ld = pad8(cols);
  d.x = DevBuf<float>(X);
  d.xh = DevBuf<uint16_t>(static_cast<size_t>(rows * d.ld));
  d.rs = DevBuf<float>(static_cast<size_t>(rows));
  cuda::to_f16_rows(d.x.get(), cols, rows, cols, d.h(), d.ld, d.rs.get(), nullptr);
  return d;
}

// y[r][c] for the listed output columns, in double, from the fp16 operands the kernel read:
// (Σ_k xh·wh)·row_scale·w_scale + bias.
inline std::vector<double> reference_f16(const cuda::HostLinearF16& W, const std::vector<uint16_t>& xh, int64_t ld,
                                         const std::vector<float>& rs, const std::vector<int64_t>& rows,
                                         const std::vector<int64_t>& cols, const std::vector<float>* bias) {
  std::vector<float> xf(static_cast<size_t>(W.in));
  std::vector<double> y(rows.size() * cols.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    for (int64_t k = 0; k < W.in; ++k) xf[k] = h2f(xh[rows[i] * ld + k]);
    for (size_t j = 0; j < cols.size(); ++j) {
      const uint16_t* wr = W.w.data() + cols[j] * W.in_pad;
      double s = 0;
      for (int64_t k = 0; k < W.in; ++k) s += static_cast<double>(xf[k]) * h2f(wr[k]);
      s = s * rs[rows[i]] * W.w_scale;
      if (bias) s += (*bias)[cols[j]];
      y[i * cols.size() + j] = s;
    }
  }
  return y;
}

inline std::vector<int64_t> iota(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = i;
  return v;
}
// Every index when n ≤ limit, else a stride co-prime with every tile size (so all positions in
// a tile are visited) plus the last index.
inline std::vector<int64_t> sample(int64_t n, int64_t limit, int64_t stride) {
  if (n <= limit) return iota(n);
  std::vector<int64_t> v;
  for (int64_t i = 0; i < n; i += stride) v.push_back(i);
  if (v.back() != n - 1) v.push_back(n - 1);
  return v;
}

// ‖got − want‖ / ‖want‖ over got[rows[i]·ld + cols[j]]; on failure the message names the worst
// element.
struct Compare {
  double rel = 0;
  std::string worst;
};
inline Compare compare(const std::vector<float>& got, int64_t ld, const std::vector<int64_t>& rows,
                       const std::vector<int64_t>& cols, const std::vector<double>& want) {
  double num = 0, den = 0, worst = -1;
  Compare c;
  for (size_t i = 0; i < rows.size(); ++i)
    for (size_t j = 0; j < cols.size(); ++j) {
      const double g = got[rows[i] * ld + cols[j]], w = want[i * cols.size() + j];
      const double d = std::isfinite(g) ? g - w : INFINITY;
      num += d * d;
      den += w * w;
      if (!(std::fabs(d) <= worst)) {
        worst = std::fabs(d);
        c.worst = "row " + std::to_string(rows[i]) + " col " + std::to_string(cols[j]) + ": got " + std::to_string(g) +
                  ", want " + std::to_string(w);
      }
    }
  c.rel = std::isfinite(num) ? std::sqrt(num) / std::max(std::sqrt(den), 1e-300) : INFINITY;
  return c;
}

}  // namespace ft::test::lin
