#pragma once
// The swizzled shared-memory tile of the fp16 linear kernels, host- and device-callable so a
// host test can check the layouts built on it (tests/cuda/exl3/test_exl3_linear.cpp,
// Exl3WgmmaLayout). No device instructions here.
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

}  // namespace ft::cuda::lin
