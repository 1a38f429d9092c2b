#include "gpu-worker/backends/cuda/engine/linear_apply.h"

#include "gpu-worker/backends/cuda/exl3/exl3_linear.h"
#include "shared/core/error.h"

namespace ft::cuda {

void apply_linear(const LinearGroup& g, const float* x, int64_t ld_x, int64_t rows, float* y, int64_t ld_y,
                  const F16Staging& st, cudaStream_t stream, LinearStore store) {
  if (rows == 0) return;
  const int64_t ld = g.max_in_pad();
  // Only dense fp16 parts read the fp16 staging (EXL3 linears transform their input themselves,
  // fp32 ones read it as it is).
  if (g.any_f16() && (rows > st.max_rows || ld > st.max_cols))
    throw Error("fp16 staging too small for a " + std::to_string(rows) + "×" + std::to_string(g.in) + " input");
  bool converted = false;  // the fp16 copy serves every dense part
  for (size_t i = 0; i < g.parts.size(); ++i) {
    const GpuLinear& p = g.parts[i];
    if (p.exl3) {
      exl3_linear(p.exl3->dev(), x, ld_x, rows, y + g.offset[i], ld_y, st.exl3_ws, stream, store);
      continue;
    }
    if (p.fp32) {
      linear_f32(p.exact, x, ld_x, rows, y + g.offset[i], ld_y, stream, store);
      continue;
    }
    if (!converted) to_f16_rows(x, ld_x, rows, g.in, st.xh, ld, st.scale, stream);
    converted = true;
    linear_f16(p.dense, st.xh, ld, st.scale, rows, y + g.offset[i], ld_y, stream, store);
  }
}

}  // namespace ft::cuda
