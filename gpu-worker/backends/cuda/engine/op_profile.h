#pragma once
// Where a step's time goes: CUDA events around each op group of the forward pass, summed by
// name (benchmarks only; a pass without a profile records nothing and stays graph-capturable).
#include <cuda_runtime.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace ft::cuda {

class OpProfile {
 public:
  ~OpProfile();
  // Marks the start of op group `name` on `stream` (ending the previous group).
  void mark(const char* name, cudaStream_t stream);
  // Ends the last group; after the stream is synchronised, folds the events into the totals.
  void finish(cudaStream_t stream);
  void collect();
  // Milliseconds per group over every collected step, in first-seen order.
  std::vector<std::pair<std::string, double>> totals() const;
  void clear();

 private:
  cudaEvent_t event();
  std::vector<cudaEvent_t> pool_;
  size_t used_ = 0;
  std::vector<std::pair<std::string, size_t>> marks_;  // group name, index of its start event
  std::vector<std::string> order_;
  std::map<std::string, double> ms_;
};

// RAII-free helper used by ForwardPass: p may be null.
inline void op_mark(OpProfile* p, const char* name, cudaStream_t s) {
  if (p) p->mark(name, s);
}

}  // namespace ft::cuda
