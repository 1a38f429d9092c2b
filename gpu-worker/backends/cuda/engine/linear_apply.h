#pragma once
// The engine's linear op: dispatches a LinearGroup on its format. Dense fp16 parts share one
// conversion of the input to fp16 (ops/linear.h's per-row scales); fp32 parts (fp32 precision)
// read the fp32 input; quantized parts transform their input themselves.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "gpu-worker/backends/cuda/engine/device_model.h"

namespace ft::cuda {

// Staging for the fp16 copy of a linear's input: rows × cols halves and one scale per row; and
// the EXL3 kernels' workspace (zeroed once; the kernels leave it zeroed).
struct F16Staging {
  __half* xh = nullptr;
  float* scale = nullptr;
  int64_t max_rows = 0, max_cols = 0;
  void* exl3_ws = nullptr;
};

// y[r][offset_i …] = part_i(x[r]) for every part, r < rows.
void apply_linear(const LinearGroup& g, const float* x, int64_t ld_x, int64_t rows, float* y, int64_t ld_y,
                  const F16Staging& st, cudaStream_t stream, LinearStore store = LinearStore::Overwrite);

}  // namespace ft::cuda
