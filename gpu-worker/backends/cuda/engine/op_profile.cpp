#include "gpu-worker/backends/cuda/engine/op_profile.h"

#include <algorithm>

#include "gpu-worker/backends/cuda/core/cuda_check.h"

namespace ft::cuda {

OpProfile::~OpProfile() {
  for (cudaEvent_t e : pool_) cudaEventDestroy(e);
}

cudaEvent_t OpProfile::event() {
  if (used_ == pool_.size()) {
    cudaEvent_t e;
    FT_CUDA_CHECK(cudaEventCreate(&e));
    pool_.push_back(e);
  }
  return pool_[used_++];
}

void OpProfile::mark(const char* name, cudaStream_t stream) {
  const size_t at = used_;
  FT_CUDA_CHECK(cudaEventRecord(event(), stream));
  marks_.emplace_back(name, at);
}

void OpProfile::finish(cudaStream_t stream) {
  const size_t at = used_;
  FT_CUDA_CHECK(cudaEventRecord(event(), stream));
  marks_.emplace_back("", at);
}

void OpProfile::collect() {
  for (size_t i = 0; i + 1 < marks_.size(); ++i) {
    const std::string& name = marks_[i].first;
    if (name.empty()) continue;
    float ms = 0;
    FT_CUDA_CHECK(cudaEventElapsedTime(&ms, pool_[marks_[i].second], pool_[marks_[i + 1].second]));
    if (!ms_.count(name)) order_.push_back(name);
    ms_[name] += ms;
  }
  marks_.clear();
  used_ = 0;
}

std::vector<std::pair<std::string, double>> OpProfile::totals() const {
  std::vector<std::pair<std::string, double>> r;
  for (const std::string& n : order_) r.emplace_back(n, ms_.at(n));
  return r;
}

void OpProfile::clear() {
  ms_.clear();
  order_.clear();
  marks_.clear();
  used_ = 0;
}

}  // namespace ft::cuda
