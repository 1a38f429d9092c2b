#pragma once
// Fast EXL3 matmul kernels of the cpu-expert-worker: trellis decode fused into the GEMV/GEMM,
// one kernel per instruction set, picked at run time. Every path produces the reference codebook
// values bit for bit; sums differ from the reference only in accumulation order.
#include <cstdint>

#include "shared/exl3/codebook.h"
#include "shared/exl3/packed.h"

namespace ft::exl3 {

enum class SimdPath : uint8_t {
  Scalar,  // portable fallback (reference decode per tile)
  Avx2,    // AVX2 + FMA + F16C: the baseline of every supported host
  Avx512,  // AVX-512 F/BW/VL/DQ + VNNI + VBMI/VBMI2 (Ice Lake, Sapphire Rapids, Zen 4 and later)
  Avx512Fp16,  // Avx512 + AVX512-FP16 (Sapphire Rapids and later Xeons): MUL1 decoded on 32 word lanes
               // with the GPU's own fp16 fma; other codebooks run the Avx512 kernels
};

const char* simd_name(SimdPath p);
bool simd_supported(SimdPath p);  // by this CPU
SimdPath best_simd_path();        // the fastest supported one, unless FLASHTIER_SIMD overrides it
// FLASHTIER_SIMD=scalar|avx2|avx512|avx512fp16 caps the choice (for comparisons); unsupported
// values are ignored.

// z[r][j] = Σ_i xh[r][i] · Wq[i][32·p0 + j] for r < n, i < in_p, j < 32·npairs: the decoded
// trellis times already-transformed inputs (xh = (x ⊙ suh)·Ĥ), before the output transform.
// xh rows are xs floats apart, z rows zs floats apart. The path must be supported.
void matmul_pairs(SimdPath path, const PackedProj& w, int64_t p0, int64_t npairs, const float* xh, int64_t xs,
                  int n, float* z, int64_t zs);

// Codebook values of `n` 16-bit states through the path's vector decoder (a test hook: it lets
// the tests check the SIMD arithmetic on all 65536 states).
void codebook_values(SimdPath path, Codebook cb, const uint32_t* states, int64_t n, float* out);

namespace detail {
// Per-ISA entry points (kernel_*.cpp).
void matmul_pairs_scalar(const PackedProj& w, int64_t p0, int64_t npairs, const float* xh, int64_t xs, int n, float* z,
                         int64_t zs);
void matmul_pairs_avx2(const PackedProj& w, int64_t p0, int64_t npairs, const float* xh, int64_t xs, int n, float* z,
                       int64_t zs);
void matmul_pairs_avx512(const PackedProj& w, int64_t p0, int64_t npairs, const float* xh, int64_t xs, int n, float* z,
                         int64_t zs);
void matmul_pairs_avx512fp16(const PackedProj& w, int64_t p0, int64_t npairs, const float* xh, int64_t xs, int n,
                             float* z, int64_t zs);
void codebook_values_avx2(Codebook cb, const uint32_t* states, int64_t n, float* out);
void codebook_values_avx512(Codebook cb, const uint32_t* states, int64_t n, float* out);
void codebook_values_avx512fp16(Codebook cb, const uint32_t* states, int64_t n, float* out);
}  // namespace detail

}  // namespace ft::exl3
