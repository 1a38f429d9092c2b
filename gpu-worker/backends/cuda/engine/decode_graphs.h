#pragma once
// CUDA graphs of decode steps, one per batch size, captured on first use. A graph holds the
// launches of a whole step over the fixed step buffers; per-row data (tokens, slots, positions,
// sampling parameters) lives in device arrays the engine fills before each replay, so one graph
// serves any B sequences. The memory a graph holds is charged to the VRAM budget (Graphs).
#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <utility>

#include "gpu-worker/backends/cuda/core/vram.h"

namespace ft::cuda {

// What a captured step holds: its nodes, how many of them are kernels, and its dependency
// edges (what programmatic launch acts on: the latency between dependent kernels).
struct GraphShape {
  int64_t nodes = 0, kernels = 0, edges = 0;
};

class DecodeGraphs {
 public:
  explicit DecodeGraphs(VramBudget& budget) : budget_(budget) {}
  ~DecodeGraphs();
  DecodeGraphs(const DecodeGraphs&) = delete;
  DecodeGraphs& operator=(const DecodeGraphs&) = delete;

  // Replays the graph for batch size b on `stream`, capturing `launches(stream)` first if none
  // exists yet. The launches must be pure (no synchronisation, no host reads of device data).
  // `variant` tells apart steps of one size whose launches differ (the tier split's exchanges).
  // False, with nothing enqueued, when this (b, variant) cannot be captured or instantiated (a
  // driver without graph support for a node kind, say): said once, and the caller runs the step
  // eagerly from then on. A failed launch of a captured graph throws.
  bool run(int b, int variant, cudaStream_t stream, const std::function<void(cudaStream_t)>& launches);
  size_t size() const { return graphs_.size(); }
  // The shape of the (b, variant) graph once captured (zeros before).
  GraphShape shape(int b, int variant) const;

 private:
  VramBudget& budget_;
  std::map<std::pair<int, int>, cudaGraphExec_t> graphs_;
  std::map<std::pair<int, int>, GraphShape> shapes_;
  std::set<std::pair<int, int>> uncapturable_;
};

}  // namespace ft::cuda
