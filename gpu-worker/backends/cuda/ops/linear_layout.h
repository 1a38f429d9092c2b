#pragma once
// The index arithmetic of the tiled linear kernels' stages, host- and device-callable so the
// host tests can replay it (tests/cuda/ops/test_linear.cpp): the swizzled shared-memory tile
// and the K geometry of the reduction contract (ops/linear.h). No device instructions here.
#include <cuda_runtime.h>

#include <cstdint>

namespace ft::cuda::lin {

// Shared-memory tiles hold rows of kStageK = 64 halves (128 bytes = 8 16-byte units). Unit u of
// row r sits at unit position u ^ (r & 7): the 8 rows an ldmatrix phase reads (same logical
// unit, 8 consecutive rows) and the 8 units a group of copies writes land in 8 different bank
// groups, so neither side has conflicts.
constexpr int kStageK = 64;
constexpr int kRowBytes = kStageK * 2;
__host__ __device__ __forceinline__ uint32_t tile_offset(int row, int unit) {
  return static_cast<uint32_t>(row * kRowBytes + ((unit ^ (row & 7)) << 4));
}

// The K geometry of one weight shape.
struct KGeom {
  int64_t in = 0;   // true input width: the last chunk ends here
  int64_t in8 = 0;  // in rounded up to 8: weight row stride, and where real data ends
  int kc = 0;       // KC (a multiple of kStageK)
  int chunks = 0;   // ⌈in / KC⌉
};

inline KGeom make_kgeom(int64_t in, int kc) {
  KGeom g;
  g.in = in;
  g.in8 = (in + 7) / 8 * 8;
  g.kc = kc;
  g.chunks = static_cast<int>((in + kc - 1) / kc);
  return g;
}

__host__ __device__ __forceinline__ int64_t chunk_end(const KGeom& g, int c) {
  const int64_t e = static_cast<int64_t>(c + 1) * g.kc;
  return e < g.in ? e : g.in;
}
// 64-wide stages of chunk c (all but the last chunk have kc / 64).
__host__ __device__ __forceinline__ int chunk_stages(const KGeom& g, int c) {
  return static_cast<int>((chunk_end(g, c) - static_cast<int64_t>(c) * g.kc + kStageK - 1) / kStageK);
}
// Stages over all chunks: chunks are contiguous, so stage s covers k ∈ [64 s, 64 s + 64).
__host__ __device__ __forceinline__ int total_stages(const KGeom& g) {
  return (g.chunks - 1) * (g.kc / kStageK) + chunk_stages(g, g.chunks - 1);
}

}  // namespace ft::cuda::lin
