#include "shared/exl3/kernels.h"

#include <cstdlib>
#include <cstring>

#include "shared/core/error.h"

namespace ft::exl3 {

const char* simd_name(SimdPath p) {
  switch (p) {
    case SimdPath::Scalar: return "scalar";
    case SimdPath::Avx2: return "avx2";
    case SimdPath::Avx512: return "avx512";
    case SimdPath::Avx512Fp16: return "avx512fp16";
  }
  return "?";
}

bool simd_supported(SimdPath p) {
  switch (p) {
    case SimdPath::Scalar: return true;
    case SimdPath::Avx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
    case SimdPath::Avx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
             __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512vbmi") &&
             __builtin_cpu_supports("avx512vbmi2");
    case SimdPath::Avx512Fp16: return simd_supported(SimdPath::Avx512) && __builtin_cpu_supports("avx512fp16");
  }
  return false;
}

SimdPath best_simd_path() {
  static const SimdPath best = [] {
    SimdPath cap = SimdPath::Avx512Fp16;
    if (const char* e = std::getenv("FLASHTIER_SIMD")) {
      if (!std::strcmp(e, "scalar")) cap = SimdPath::Scalar;
      else if (!std::strcmp(e, "avx2")) cap = SimdPath::Avx2;
      else if (!std::strcmp(e, "avx512")) cap = SimdPath::Avx512;
    }
    for (SimdPath p : {SimdPath::Avx512Fp16, SimdPath::Avx512, SimdPath::Avx2})
      if (static_cast<int>(p) <= static_cast<int>(cap) && simd_supported(p)) return p;
    return SimdPath::Scalar;
  }();
  return best;
}

static void require(SimdPath path) {
  if (!simd_supported(path)) throw Error(std::string("EXL3 kernel path ") + simd_name(path) + " is not supported by this CPU");
}

void matmul_pairs(SimdPath path, const PackedProj& w, int64_t p0, int64_t npairs, const float* xh, int64_t xs, int n,
                  float* z, int64_t zs) {
  require(path);
  switch (path) {
    case SimdPath::Scalar: return detail::matmul_pairs_scalar(w, p0, npairs, xh, xs, n, z, zs);
    case SimdPath::Avx2: return detail::matmul_pairs_avx2(w, p0, npairs, xh, xs, n, z, zs);
    case SimdPath::Avx512: return detail::matmul_pairs_avx512(w, p0, npairs, xh, xs, n, z, zs);
    case SimdPath::Avx512Fp16: return detail::matmul_pairs_avx512fp16(w, p0, npairs, xh, xs, n, z, zs);
  }
}

void codebook_values(SimdPath path, Codebook cb, const uint32_t* states, int64_t n, float* out) {
  require(path);
  switch (path) {
    case SimdPath::Scalar:
      for (int64_t i = 0; i < n; ++i) out[i] = codebook_value(states[i], cb);
      return;
    case SimdPath::Avx2: return detail::codebook_values_avx2(cb, states, n, out);
    case SimdPath::Avx512: return detail::codebook_values_avx512(cb, states, n, out);
    case SimdPath::Avx512Fp16: return detail::codebook_values_avx512fp16(cb, states, n, out);
  }
}

}  // namespace ft::exl3
