#include "gpu-worker/backends/cuda/engine/decode_graphs.h"

#include "gpu-worker/backends/cuda/core/cuda_check.h"

namespace ft::cuda {

DecodeGraphs::~DecodeGraphs() {
  for (auto& [key, g] : graphs_) cudaGraphExecDestroy(g);
}

void DecodeGraphs::run(int b, int variant, cudaStream_t stream, const std::function<void(cudaStream_t)>& launches) {
  const std::pair<int, int> key{b, variant};
  auto it = graphs_.find(key);
  if (it == graphs_.end()) {
    size_t free_before = 0, free_after = 0, total = 0;
    FT_CUDA_CHECK(cudaStreamSynchronize(stream));
    FT_CUDA_CHECK(cudaMemGetInfo(&free_before, &total));
    cudaGraph_t g = nullptr;
    FT_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    try {
      launches(stream);
    } catch (...) {
      cudaGraph_t dropped = nullptr;
      cudaStreamEndCapture(stream, &dropped);
      if (dropped) cudaGraphDestroy(dropped);
      (void)cudaGetLastError();
      throw;
    }
    FT_CUDA_CHECK(cudaStreamEndCapture(stream, &g));
    cudaGraphExec_t exec = nullptr;
    const cudaError_t e = cudaGraphInstantiate(&exec, g, 0);
    cudaGraphDestroy(g);
    FT_CUDA_CHECK(e);
    FT_CUDA_CHECK(cudaGraphUpload(exec, stream));
    FT_CUDA_CHECK(cudaStreamSynchronize(stream));
    FT_CUDA_CHECK(cudaMemGetInfo(&free_after, &total));
    if (free_before > free_after) budget_.charge(VramCategory::Graphs, static_cast<int64_t>(free_before - free_after));
    it = graphs_.emplace(key, exec).first;
  }
  FT_CUDA_CHECK(cudaGraphLaunch(it->second, stream));
}

}  // namespace ft::cuda
