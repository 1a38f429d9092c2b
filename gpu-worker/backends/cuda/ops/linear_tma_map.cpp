#include "gpu-worker/backends/cuda/ops/linear_tma_map.h"

#include <cudaTypedefs.h>

#include "gpu-worker/backends/cuda/core/driver_entry.h"

namespace ft::cuda::lin {
namespace {

// The driver's encoder, looked up once: the libraries link cudart only.
PFN_cuTensorMapEncodeTiled_v12000 encoder() {
  static const auto fn = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(driver_entry_point("cuTensorMapEncodeTiled"));
  return fn;
}

}  // namespace

bool encode_f16_tile_map(CUtensorMap& map, const void* base, int64_t k, int64_t rows, int64_t groups, int64_t ld,
                         int64_t group_stride, int box_rows) {
  constexpr int64_t kMaxDim = int64_t{1} << 32, kMaxStride = int64_t{1} << 40;
  if (!base || reinterpret_cast<uintptr_t>(base) % 16 != 0 || k <= 0 || rows <= 0 || groups <= 0) return false;
  if (k >= kMaxDim || rows >= kMaxDim || groups >= kMaxDim || ld < k || ld % 8 != 0) return false;
  // A single group's stride is never followed; any legal value serves.
  const int64_t gs = groups > 1 ? group_stride : ld * rows;
  if (gs <= 0 || gs % 8 != 0 || 2 * gs >= kMaxStride || 2 * ld >= kMaxStride) return false;
  const PFN_cuTensorMapEncodeTiled_v12000 encode = encoder();
  if (!encode) return false;
  const cuuint64_t dim[3] = {static_cast<cuuint64_t>(k), static_cast<cuuint64_t>(rows),
                             static_cast<cuuint64_t>(groups)};
  const cuuint64_t stride[2] = {static_cast<cuuint64_t>(2 * ld), static_cast<cuuint64_t>(2 * gs)};
  const cuuint32_t box[3] = {64, static_cast<cuuint32_t>(box_rows), 1};
  const cuuint32_t step[3] = {1, 1, 1};
  return encode(&map, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 3, const_cast<void*>(base), dim, stride, box, step,
                CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

}  // namespace ft::cuda::lin
