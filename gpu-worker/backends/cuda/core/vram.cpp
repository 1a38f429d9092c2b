#include "gpu-worker/backends/cuda/core/vram.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>

#include "gpu-worker/backends/cuda/core/cuda_check.h"

namespace ft::cuda {

namespace {
std::string gib(uint64_t b) {
  char s[32];
  std::snprintf(s, sizeof s, "%.3f GiB", b / 1073741824.0);
  return s;
}
}  // namespace

const char* vram_category_name(VramCategory c) {
  switch (c) {
    case VramCategory::Weights: return "weights";
    case VramCategory::KdaState: return "kda_state";
    case VramCategory::KvCache: return "kv_cache";
    case VramCategory::Workspace: return "workspace";
    case VramCategory::Graphs: return "graphs";
    case VramCategory::ExpertCache: return "expert_cache";
    case VramCategory::Staging: return "staging";
    case VramCategory::Other: return "other";
    case VramCategory::kCount: break;
  }
  return "?";
}

VramBudget::VramBudget(uint64_t budget_bytes, bool poison) : budget_(budget_bytes), poison_(poison) {
  if (budget_ == 0) {
    size_t fr = 0, tot = 0;
    FT_CUDA_CHECK(cudaMemGetInfo(&fr, &tot));
    budget_ = fr;
  }
}

VramBudget::~VramBudget() {
  for (auto& [p, info] : live_) cudaFree(p);
}

void* VramBudget::allocate(uint64_t bytes, VramCategory c, const std::string& what) {
  std::lock_guard<std::mutex> l(m_);
  uint64_t total = 0;
  for (int64_t u : used_) total += static_cast<uint64_t>(std::max<int64_t>(u, 0));
  if (total + bytes > budget_)
    throw VramExhausted("VRAM budget exhausted: " + what + " needs " + gib(bytes) + " (" +
                        vram_category_name(c) + "), " + gib(total) + " of the " + gib(budget_) +
                        " budget in use");
  void* p = nullptr;
  const cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    size_t fr = 0, tot = 0;
    cudaMemGetInfo(&fr, &tot);
    (void)cudaGetLastError();
    throw VramExhausted("the GPU refused " + gib(bytes) + " for " + what + " (" + cudaGetErrorString(e) + "; " +
                        gib(fr) + " free on the card, " + gib(total) + " in use by this worker)");
  }
  if (poison_) {
    // Done before the caller's first write on any stream (the legacy stream orders no
    // non-blocking one): a poison landing after an initialisation would fake a bug.
    FT_CUDA_CHECK(cudaMemset(p, 0xFF, bytes ? bytes : 1));
    FT_CUDA_CHECK(cudaDeviceSynchronize());
  }
  used_[static_cast<int>(c)] += static_cast<int64_t>(bytes);
  live_[p] = {bytes, c};
  return p;
}

void VramBudget::release(void* p) {
  if (!p) return;
  std::lock_guard<std::mutex> l(m_);
  auto it = live_.find(p);
  if (it == live_.end()) return;
  used_[static_cast<int>(it->second.second)] -= static_cast<int64_t>(it->second.first);
  live_.erase(it);
  cudaFree(p);
}

void VramBudget::charge(VramCategory c, int64_t bytes) {
  std::lock_guard<std::mutex> l(m_);
  used_[static_cast<int>(c)] += bytes;
}

uint64_t VramBudget::used() const {
  std::lock_guard<std::mutex> l(m_);
  uint64_t t = 0;
  for (int64_t u : used_) t += static_cast<uint64_t>(std::max<int64_t>(u, 0));
  return t;
}

uint64_t VramBudget::used(VramCategory c) const {
  std::lock_guard<std::mutex> l(m_);
  return static_cast<uint64_t>(std::max<int64_t>(used_[static_cast<int>(c)], 0));
}

uint64_t VramBudget::available() const {
  const uint64_t u = used();
  return u >= budget_ ? 0 : budget_ - u;
}

std::array<uint64_t, kVramCategories> VramBudget::by_category() const {
  std::lock_guard<std::mutex> l(m_);
  std::array<uint64_t, kVramCategories> r{};
  for (int i = 0; i < kVramCategories; ++i) r[i] = static_cast<uint64_t>(std::max<int64_t>(used_[i], 0));
  return r;
}

std::string VramBudget::report() const {
  const auto b = by_category();
  std::string s;
  uint64_t t = 0;
  for (int i = 0; i < kVramCategories; ++i) {
    t += b[i];
    if (b[i] == 0) continue;
    s += std::string(vram_category_name(static_cast<VramCategory>(i))) + "=" + gib(b[i]) + " ";
  }
  return s + "total=" + gib(t) + " budget=" + gib(budget_);
}

}  // namespace ft::cuda
