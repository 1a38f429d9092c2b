#include "gpu-worker/backends/cuda/engine/linear_apply.h"

#include "shared/core/error.h"

namespace ft::cuda {

void apply_linear(const LinearGroup& g, const float* x, int64_t ld_x, int64_t rows, float* y, int64_t ld_y,
                  const F16Staging& st, cudaStream_t stream, LinearStore store) {
  if (rows == 0) return;
  if (!g.all_dense()) throw Error("quantized linears are not wired into the CUDA engine yet");
  const int64_t ld = g.max_in_pad();
  if (rows > st.max_rows || ld > st.max_cols)
    throw Error("fp16 staging too small for a " + std::to_string(rows) + "×" + std::to_string(g.in) + " input");
  to_f16_rows(x, ld_x, rows, g.in, st.xh, ld, st.scale, stream);
  for (size_t i = 0; i < g.parts.size(); ++i)
    linear_f16(g.parts[i].dense, st.xh, ld, st.scale, rows, y + g.offset[i], ld_y, stream, store);
}

}  // namespace ft::cuda
