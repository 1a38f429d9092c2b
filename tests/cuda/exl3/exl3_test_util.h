#pragma once
// Shared pieces of the EXL3 GPU tests: random EXL3 linears (random trellis bits are always a valid
// stream, spec §4.8), their CPU reference forward, and short names for the test parameters.
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gpu-worker/backends/cuda/exl3/exl3_linear.h"
#include "shared/core/half.h"
#include "shared/exl3/codebook.h"
#include "shared/exl3/exl3_linear.h"
#include "shared/exl3/reference.h"
#include "shared/exl3/trellis.h"

namespace ft::test::exl3gpu {

using ft::exl3::Codebook;

inline std::string case_name(int K, Codebook cb) {
  std::string s = "K";
  s += std::to_string(K);
  s += '_';
  s += ft::exl3::codebook_name(cb);
  return s;
}

// An Exl3Linear that owns its trellis bytes. suh/svh are fp16-representable, svh exactly 0 on
// padded output channels (as the quantizer writes them), bias optional.
struct RandomLinear {
  std::vector<uint8_t> bytes;
  ft::exl3::Exl3Linear q;
  int64_t in = 0, out = 0;

  RandomLinear(int K, Codebook cb, int64_t in_, int64_t out_, uint64_t seed, bool bias = false) : in(in_), out(out_) {
    std::mt19937_64 g(seed);
    q.name = "test." + case_name(K, cb);
    q.where = "random";
    q.K = K;
    q.codebook = cb;
    q.in_p = ft::exl3::pad128(in);
    q.out_p = ft::exl3::pad128(out);
    bytes.resize(static_cast<size_t>(q.trellis_bytes()));
    for (auto& b : bytes) b = static_cast<uint8_t>(g());
    q.trellis = bytes.data();
    std::uniform_real_distribution<float> mag(0.5f, 1.5f);
    auto f16 = [](float v) { return f16_to_f32(f32_to_f16(v)); };
    // Scales ~ 1/sqrt(in) so outputs stay O(1) whatever the width.
    const float s_in = 1.0f / std::sqrt(static_cast<float>(q.in_p));
    q.suh.resize(q.in_p);
    for (auto& v : q.suh) v = f16((g() & 1 ? -1.0f : 1.0f) * mag(g) * s_in);
    q.svh.assign(q.out_p, 0.0f);
    for (int64_t i = 0; i < out; ++i) q.svh[i] = f16((g() & 1 ? -1.0f : 1.0f) * mag(g));
    if (bias) {
      q.bias.assign(q.out_p, 0.0f);
      for (int64_t i = 0; i < out; ++i) q.bias[i] = f16(0.25f * (mag(g) - 1.0f));
    }
  }
  RandomLinear(const RandomLinear&) = delete;
  RandomLinear& operator=(const RandomLinear&) = delete;

  // Decoded Wq [in_p][out_p] (fp32 of the fp16 values).
  std::vector<float> wq() const {
    std::vector<float> w(static_cast<size_t>(q.in_p * q.out_p));
    ft::exl3::decode_trellis_f32(q.trellis, q.in_p, q.out_p, q.K, q.codebook, w.data());
    return w;
  }
  // Reference forward of x [rows][in] → y [rows][out] (fp32 math, reference.h).
  std::vector<float> forward(const std::vector<float>& wq, const std::vector<float>& x, int64_t rows) const {
    std::vector<float> xp(static_cast<size_t>(rows * q.in_p), 0.0f), yp(static_cast<size_t>(rows * q.out_p));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < in; ++c) xp[r * q.in_p + c] = x[r * in + c];
    ft::exl3::forward_reference(q, wq.data(), xp.data(), rows, yp.data());
    std::vector<float> y(static_cast<size_t>(rows * out));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < out; ++c) y[r * out + c] = yp[r * q.out_p + c];
    return y;
  }
};

// Runs its scope with the wide prefill shape on (or off), then restores the policy.
class WidePrefill {
 public:
  // on: every prefill call wide where it fits (Exl3Wide::On, whatever Auto would pick); off: none.
  explicit WidePrefill(bool on) : was_(cuda::exl3_wide_prefill()) {
    cuda::exl3_set_wide_prefill(on ? cuda::Exl3Wide::On : cuda::Exl3Wide::Off);
  }
  ~WidePrefill() { cuda::exl3_set_wide_prefill(was_); }
  WidePrefill(const WidePrefill&) = delete;
  WidePrefill& operator=(const WidePrefill&) = delete;

 private:
  cuda::Exl3Wide was_;
};

}  // namespace ft::test::exl3gpu
