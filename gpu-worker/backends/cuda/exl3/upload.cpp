// upload_exl3_linear (exl3_linear.h): host packing and the copies to the GPU (load time).
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "gpu-worker/backends/cuda/core/cuda_check.h"
#include "gpu-worker/backends/cuda/exl3/exl3_linear.h"
#include "shared/core/error.h"
#include "shared/core/half.h"
#include "shared/exl3/packed.h"

namespace ft::cuda {

Exl3LinearGpu upload_exl3_linear(const ft::exl3::Exl3Linear& q, int64_t out, int64_t in, VramBudget& budget) {
  if (q.in_p != ft::exl3::pad128(in) || q.out_p != ft::exl3::pad128(out))
    throw Error(q.where + ": EXL3 linear " + q.name + " is " + std::to_string(q.in_p) + " × " +
                std::to_string(q.out_p) + " (in × out, padded), expected " + std::to_string(in) + " → " +
                std::to_string(out));
  if (q.K < 1 || q.K > 8 || !q.trellis || static_cast<int64_t>(q.suh.size()) != q.in_p ||
      static_cast<int64_t>(q.svh.size()) != q.out_p || (!q.bias.empty() && static_cast<int64_t>(q.bias.size()) != q.out_p))
    throw Error(q.where + ": EXL3 linear " + q.name + " is incomplete (K, trellis, suh, svh or bias)");
  Exl3LinearGpu g;
  const size_t words = static_cast<size_t>(q.trellis_bytes() / 4);
  std::unique_ptr<uint32_t, void (*)(void*)> packed(static_cast<uint32_t*>(std::aligned_alloc(64, words * 4)),
                                                     std::free);
  if (!packed) throw Error("upload_exl3_linear: out of host memory packing " + q.name);
  ft::exl3::pack_trellis(q.trellis, q.in_p, q.out_p, q.K, packed.get());
  g.trellis_ = DeviceArray<uint32_t>(budget, words, VramCategory::Weights, q.name + ".trellis");
  FT_CUDA_CHECK(cudaMemcpy(g.trellis_.get(), packed.get(), words * 4, cudaMemcpyHostToDevice));

  std::vector<uint16_t> scales(static_cast<size_t>(q.in_p + q.out_p));
  for (int64_t i = 0; i < q.in_p; ++i) scales[i] = f32_to_f16(q.suh[i]);  // read from fp16: exact
  for (int64_t i = 0; i < q.out_p; ++i) scales[q.in_p + i] = f32_to_f16(q.svh[i]);
  g.scales_ = DeviceArray<__half>(budget, scales.size(), VramCategory::Weights, q.name + ".suh/svh");
  FT_CUDA_CHECK(cudaMemcpy(g.scales_.get(), scales.data(), scales.size() * 2, cudaMemcpyHostToDevice));
  if (!q.bias.empty()) {
    g.bias_ = DeviceArray<float>(budget, q.bias.size(), VramCategory::Weights, q.name + ".bias");
    FT_CUDA_CHECK(cudaMemcpy(g.bias_.get(), q.bias.data(), q.bias.size() * 4, cudaMemcpyHostToDevice));
  }
  g.dev_ = exl3_linear_view(q.K, q.codebook, in, out, g.trellis_.get(), g.scales_.get(), g.scales_.get() + q.in_p,
                            q.bias.empty() ? nullptr : g.bias_.get());
  return g;
}

}  // namespace ft::cuda
