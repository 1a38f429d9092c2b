#pragma once
// What every KDA kernel file shares: the activations of shared/ops/activations.h as device code
// (same formulas, IEEE expf/log1pf/division: the build has no fast-math), the head sizes the kernels
// are compiled for, and the host-side shape checks.
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>

#include "gpu-worker/backends/cuda/ops/kda.h"
#include "shared/core/error.h"

namespace ft::cuda::kda_detail {

__device__ __forceinline__ float sigmoid(float z) { return 1.0f / (1.0f + expf(-z)); }
__device__ __forceinline__ float silu(float z) { return z * sigmoid(z); }
// torch softplus with beta 1, threshold 20 (as shared/ops/activations.h).
__device__ __forceinline__ float softplus(float y) { return y > 20.0f ? y : log1pf(expf(y)); }

inline void require(bool ok, const char* fn, const std::string& what) {
  if (!ok) throw Error(std::string(fn) + ": " + what);
}

inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// The chunked prefill's head sizes (its key slices are 16 channels wide); the per-token kernels
// (prepare, decode step, gated norm) also run 8.
inline void check_shape(const KdaShape& s, const char* fn, bool per_token = false) {
  require(s.heads > 0, fn, "heads must be positive");
  require((per_token && s.head_dim == 8) || kda_chunked_head_dim(s.head_dim), fn,
          "head_dim " + std::to_string(s.head_dim) + " not supported (" + (per_token ? "8, " : "") + "16, 32, 64 or 128)");
}

// Calls f(std::integral_constant<int, DL>{}) for the shape's head size (checked before).
template <class F>
void dispatch_head_dim(int64_t head_dim, F&& f) {
  switch (head_dim) {
    case 16:
      f(std::integral_constant<int, 16>{});
      break;
    case 32:
      f(std::integral_constant<int, 32>{});
      break;
    case 64:
      f(std::integral_constant<int, 64>{});
      break;
    default:
      f(std::integral_constant<int, 128>{});
      break;
  }
}

// dispatch_head_dim with head size 8 as well (the per-token kernels; checked before).
template <class F>
void dispatch_token_head_dim(int64_t head_dim, F&& f) {
  if (head_dim == 8) f(std::integral_constant<int, 8>{});
  else dispatch_head_dim(head_dim, std::forward<F>(f));
}

}  // namespace ft::cuda::kda_detail
