#include "cpu-expert-worker/dense_kernel.h"

#include <cstdlib>
#include <cstring>

#include "shared/core/error.h"

namespace ft::cew {

const char* dense_simd_name(DenseSimd s) { return s == DenseSimd::Avx2 ? "avx2" : "scalar"; }

bool dense_simd_supported(DenseSimd s) {
  if (s == DenseSimd::Scalar) return true;
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
}

DenseSimd best_dense_simd() {
  static const DenseSimd best = [] {
    const char* e = std::getenv("FLASHTIER_SIMD");
    if (e && !std::strcmp(e, "scalar")) return DenseSimd::Scalar;
    return dense_simd_supported(DenseSimd::Avx2) ? DenseSimd::Avx2 : DenseSimd::Scalar;
  }();
  return best;
}

void dense_rows(DenseSimd simd, DenseType type, const void* W, int64_t in, int64_t r0, int64_t rows, const float* x,
                int64_t xs, int n, float* y, int64_t ys) {
  if (simd == DenseSimd::Avx2) {
    if (!dense_simd_supported(simd)) throw Error("the AVX2 dense kernel is not supported by this CPU");
    detail::dense_rows_avx2(type, W, in, r0, rows, x, xs, n, y, ys);
  } else {
    detail::dense_rows_scalar(type, W, in, r0, rows, x, xs, n, y, ys);
  }
}

}  // namespace ft::cew
