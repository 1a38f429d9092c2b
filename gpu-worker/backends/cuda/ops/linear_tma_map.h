#pragma once
// Tensor maps (the copy engine's description of a global tensor) for the fp16 operands of the
// wgmma linear kernel: tiles of 64 halves along k × box_rows rows, written to shared memory in
// the 128-byte swizzle of linear_layout.h, zero past the tensor's edges.
#include <cuda.h>

#include <cstdint>

namespace ft::cuda::lin {

// A (k, rows, groups) fp16 tensor: row r of group g starts at base + g·group_stride + r·ld
// (in halves). False — and the caller keeps its per-thread copies — where the copy engine cannot
// read it (a base not 16-byte aligned, ld or group_stride not a multiple of 8 halves, a size
// past its limits) or the driver offers no tensor maps.
bool encode_f16_tile_map(CUtensorMap& map, const void* base, int64_t k, int64_t rows, int64_t groups, int64_t ld,
                         int64_t group_stride, int box_rows);

}  // namespace ft::cuda::lin
