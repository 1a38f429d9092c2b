// Host side of the fp16 linears: the chunk size of the reduction contract and the preparation
// of a weight for upload (ops/linear.h).
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "gpu-worker/backends/cuda/ops/linear.h"
#include "shared/core/error.h"

namespace ft::cuda {

// KC = max(256, ⌈in/16⌉ rounded up to 64): at most 16 chunks, which the skinny kernel splits
// over its 8 warps (parallelism along K for decode, where the output width alone gives too
// few blocks), and a multiple of the 64-wide stage of both kernels so that no stage straddles
// a chunk boundary. Depends on `in` only (allowed: (in, out)).
int linear_k_chunk(int64_t in, int64_t out) {
  if (in <= 0 || out <= 0) throw Error("linear_k_chunk: bad shape " + std::to_string(out) + "×" + std::to_string(in));
  const int64_t per16 = (in + 15) / 16;
  const int64_t kc = std::max<int64_t>(256, (per16 + 63) / 64 * 64);
  return static_cast<int>(kc);
}

// e = 15 − E where max|W| = f·2^E, f ∈ [0.5, 1): max|W|·2^e ∈ [2^14, 2^15). A bf16 weight has
// 8 significant bits and fp16 11, so every weight whose scaled magnitude is ≥ 2^−17 (i.e. within
// 2^31 of the largest) converts exactly; smaller ones round to fp16's subnormal grid (2^−24) and
// those below 2^−25 become 0. fp32 weights round to nearest even at 11 bits (relative error
// ≤ 2^−12 for scaled magnitudes ≥ 2^−14). e ≤ 126 keeps w_scale = 2^−e a normal float.
HostLinearF16 prepare_linear_f16(const float* W, int64_t out, int64_t in) {
  if (out <= 0 || in <= 0)
    throw Error("prepare_linear_f16: bad shape " + std::to_string(out) + "×" + std::to_string(in));
  HostLinearF16 h;
  h.out = out;
  h.in = in;
  h.in_pad = (in + 7) / 8 * 8;
  float m = 0.0f;
  for (int64_t i = 0; i < out * in; ++i) {
    const float a = std::fabs(W[i]);
    if (!std::isfinite(a))
      throw Error("prepare_linear_f16: non-finite weight at row " + std::to_string(i / in) + ", column " +
                  std::to_string(i % in));
    m = std::max(m, a);
  }
  int e = 0;
  if (m > 0.0f) {
    int E = 0;
    std::frexp(m, &E);
    e = std::min(15 - E, 126);
  }
  h.w_scale = std::ldexp(1.0f, -e);
  h.w.assign(static_cast<size_t>(out * h.in_pad), 0);
  for (int64_t r = 0; r < out; ++r) {
    const float* src = W + r * in;
    uint16_t* dst = h.w.data() + r * h.in_pad;
    for (int64_t c = 0; c < in; ++c) dst[c] = __half_as_ushort(__float2half_rn(std::ldexp(src[c], e)));
  }
  return h;
}

}  // namespace ft::cuda
