#include "gpu-worker/backends/cuda/engine/decode_graphs.h"

#include <iostream>
#include <vector>

#include "gpu-worker/backends/cuda/core/cuda_check.h"

namespace ft::cuda {

namespace {

// A failed query must not leave its error behind: the runtime keeps it as the thread's last
// error, and the next launch check (cudaGetLastError) would report it as that launch's failure.
// (The tier's stream-memory-operation nodes are driver-only node types: the runtime's
// cudaGraphNodeGetType answers cudaErrorUnknown for them — it made the sampler's launch check
// fail after the first capture of a decode graph with the CPU tier.)
bool query_ok(cudaError_t e) {
  if (e == cudaSuccess) return true;
  (void)cudaGetLastError();
  return false;
}

GraphShape shape_of(cudaGraph_t g) {
  GraphShape sh;
  size_t n = 0;
  if (!query_ok(cudaGraphGetNodes(g, nullptr, &n))) return sh;
  std::vector<cudaGraphNode_t> nodes(n);
  if (n > 0 && !query_ok(cudaGraphGetNodes(g, nodes.data(), &n))) return sh;
  sh.nodes = static_cast<int64_t>(n);
  for (cudaGraphNode_t node : nodes) {
    cudaGraphNodeType t{};
    if (query_ok(cudaGraphNodeGetType(node, &t)) && t == cudaGraphNodeTypeKernel) ++sh.kernels;
  }
  size_t e = 0;
  if (query_ok(cudaGraphGetEdges(g, nullptr, nullptr, nullptr, &e))) sh.edges = static_cast<int64_t>(e);
  return sh;
}

}  // namespace

GraphShape DecodeGraphs::shape(int b, int variant) const {
  const auto it = shapes_.find({b, variant});
  return it == shapes_.end() ? GraphShape{} : it->second;
}

DecodeGraphs::~DecodeGraphs() {
  for (auto& [key, g] : graphs_) cudaGraphExecDestroy(g);
}

bool DecodeGraphs::run(int b, int variant, cudaStream_t stream, const std::function<void(cudaStream_t)>& launches) {
  const std::pair<int, int> key{b, variant};
  if (uncapturable_.count(key)) return false;
  auto it = graphs_.find(key);
  if (it == graphs_.end()) {
    size_t free_before = 0, free_after = 0, total = 0;
    FT_CUDA_CHECK(cudaStreamSynchronize(stream));
    FT_CUDA_CHECK(cudaMemGetInfo(&free_before, &total));
    cudaGraph_t g = nullptr;
    cudaGraphExec_t exec = nullptr;
    // A capture that failed is ended and dropped; nothing ran (a capture only records), and its
    // errors are not sticky.
    auto drop_capture = [&] {
      cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
      if (cudaStreamIsCapturing(stream, &st) == cudaSuccess && st != cudaStreamCaptureStatusNone) {
        cudaGraph_t dropped = nullptr;
        cudaStreamEndCapture(stream, &dropped);
        if (dropped) cudaGraphDestroy(dropped);
      }
      (void)cudaGetLastError();
    };
    FT_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    try {
      launches(stream);
      FT_CUDA_CHECK(cudaStreamEndCapture(stream, &g));
      shapes_[key] = shape_of(g);
      const cudaError_t e = cudaGraphInstantiate(&exec, g, 0);
      cudaGraphDestroy(g);
      FT_CUDA_CHECK(e);
    } catch (const std::exception& e) {
      drop_capture();
      uncapturable_.insert(key);
      std::cerr << "cuda engine: decode steps of " << b << " rows (variant " << variant
                << ") cannot be captured as a CUDA graph (" << e.what() << "); they run eagerly" << std::endl;
      return false;
    } catch (...) {
      drop_capture();
      throw;
    }
    FT_CUDA_CHECK(cudaGraphUpload(exec, stream));
    FT_CUDA_CHECK(cudaStreamSynchronize(stream));
    FT_CUDA_CHECK(cudaMemGetInfo(&free_after, &total));
    if (free_before > free_after) budget_.charge(VramCategory::Graphs, static_cast<int64_t>(free_before - free_after));
    it = graphs_.emplace(key, exec).first;
  }
  FT_CUDA_CHECK(cudaGraphLaunch(it->second, stream));
  return true;
}

}  // namespace ft::cuda
