#pragma once
// Timing calls the way decode steps run them: captured in one CUDA graph and replayed.
#include <cuda_runtime.h>

#include <functional>
#include <vector>

#include "gpu-worker/backends/cuda/core/cuda_check.h"
#include "tools/bench-cuda/bench_util.h"

namespace ft::cuda::bench {

// Median ms per call: `per_graph` calls captured in one graph (call i gets index i), replayed
// `replays` times after one warm-up replay, each replay timed with events on `s`.
inline double graph_ms_per_call(const std::function<void(int, cudaStream_t)>& call, int per_graph, int replays,
                                cudaStream_t s) {
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  FT_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < per_graph; ++i) call(i, s);
  FT_CUDA_CHECK(cudaStreamEndCapture(s, &graph));
  FT_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  cudaEvent_t e0, e1;
  FT_CUDA_CHECK(cudaEventCreate(&e0));
  FT_CUDA_CHECK(cudaEventCreate(&e1));
  FT_CUDA_CHECK(cudaGraphLaunch(exec, s));  // warm-up
  std::vector<double> ms;
  for (int r = 0; r < replays; ++r) {
    FT_CUDA_CHECK(cudaEventRecord(e0, s));
    FT_CUDA_CHECK(cudaGraphLaunch(exec, s));
    FT_CUDA_CHECK(cudaEventRecord(e1, s));
    FT_CUDA_CHECK(cudaEventSynchronize(e1));
    float t = 0;
    FT_CUDA_CHECK(cudaEventElapsedTime(&t, e0, e1));
    ms.push_back(t / per_graph);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  return median(ms);
}

}  // namespace ft::cuda::bench
