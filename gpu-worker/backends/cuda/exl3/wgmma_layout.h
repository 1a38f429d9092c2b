#pragma once
// Where the wgmma prefill block (gemm_wgmma.cuh) puts the words of the permuted activation rows
// in its natural-order swizzled stage tile — host- and device-callable so a host test
// (tests/cuda/exl3/test_exl3_linear.cpp, Exl3WgmmaLayout) can check it against tile_offset.
//
// A stage is 128 rows × 64 inputs; thread tid copies the 16-byte chunks q = tid + 256 m (row
// n = q / 8 = tid / 8 + 32 m, chunk q % 8 = tid % 8 = 4b + quad of the permuted row). Word d of
// a chunk holds inputs 2·quad, 2·quad + 1 (+ 8 for odd d) of the stage's k16 step 2b + d / 2:
// byte 32·step + 16·(d % 2) + 4·quad of the row in natural order, 16-byte unit 4b + d, so it
// belongs at tile_offset(n, 4b + d) + 4·quad = (n·128 + 4·quad + ((4b ^ (n & 7)) << 4)) ^ (d << 4)
// (the fields occupy disjoint bits). n & 7 is the same for a thread's four chunks, 4096 bytes
// apart: four offsets per thread serve every chunk and stage.
#include <cuda_runtime.h>

#include <cstdint>

namespace ft::cuda::exl3dev {

constexpr uint32_t kWgRowChunkStride = 32 * 128;  // chunk m + 1 is 32 rows below chunk m

__host__ __device__ __forceinline__ uint32_t wg_row_word_offset(int tid, int d) {
  const int n0 = tid >> 3, c = tid & 7, b = c >> 2, quad = c & 3;
  const uint32_t base = static_cast<uint32_t>(n0 * 128 + 4 * quad + (((4 * b) ^ (n0 & 7)) << 4));
  return base ^ static_cast<uint32_t>(d << 4);
}

}  // namespace ft::cuda::exl3dev
