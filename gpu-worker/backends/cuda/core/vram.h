#pragma once
// VRAM accounting: every byte the gpu-worker takes from the card goes through one VramBudget,
// tagged with what it is for, and `--vram-budget-gb` caps the total. An allocation past the cap,
// or one the card refuses, throws VramExhausted (an ft::Error naming what was asked for and what
// is in use) instead of crashing, so a load fails with a clear message and a request is refused.
#include <array>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>

#include "shared/core/error.h"

namespace ft::cuda {

enum class VramCategory : int {
  Weights,      // model parameters resident on the GPU
  KdaState,     // per-sequence KDA recurrent states and conv windows
  KvCache,      // MLA latent + indexer caches (fixed-size blocks)
  Workspace,    // activations and kernel scratch of one step
  Graphs,       // memory CUDA graphs hold (measured around instantiation)
  ExpertCache,  // VRAM expert cache slots
  Staging,      // prefill staging buffers
  Other,
  kCount
};
constexpr int kVramCategories = static_cast<int>(VramCategory::kCount);
const char* vram_category_name(VramCategory c);  // "weights", "kda_state", ...

class VramExhausted : public Error {
 public:
  using Error::Error;
};

class VramBudget {
 public:
  // `budget_bytes` 0: the card's free memory at construction is the limit. `poison`: every
  // allocation is filled with 0xFF bytes (tests: reads before writes show as NaN).
  explicit VramBudget(uint64_t budget_bytes = 0, bool poison = false);
  ~VramBudget();
  VramBudget(const VramBudget&) = delete;
  VramBudget& operator=(const VramBudget&) = delete;

  // cudaMalloc'ed, 256-byte aligned. `what` names the allocation in errors.
  void* allocate(uint64_t bytes, VramCategory c, const std::string& what);
  void release(void* p);  // nullptr is fine

  // Memory taken outside allocate (CUDA graphs): counted against the budget without a pointer.
  void charge(VramCategory c, int64_t bytes);

  uint64_t budget() const { return budget_; }
  uint64_t used() const;
  uint64_t used(VramCategory c) const;
  uint64_t available() const;  // budget − used (0 when over)
  std::array<uint64_t, kVramCategories> by_category() const;
  std::string report() const;  // "weights=1.2GiB kv_cache=..." for logs

 private:
  mutable std::mutex m_;
  uint64_t budget_ = 0;
  bool poison_ = false;
  std::array<int64_t, kVramCategories> used_{};
  std::unordered_map<void*, std::pair<uint64_t, VramCategory>> live_;
};

// RAII device array of T from a budget.
template <class T>
class DeviceArray {
 public:
  DeviceArray() = default;
  DeviceArray(VramBudget& b, size_t n, VramCategory c, const std::string& what)
      : b_(&b), n_(n), p_(static_cast<T*>(n ? b.allocate(n * sizeof(T), c, what) : nullptr)) {}
  ~DeviceArray() { reset(); }
  DeviceArray(DeviceArray&& o) noexcept : b_(o.b_), n_(o.n_), p_(o.p_) { o.p_ = nullptr, o.n_ = 0; }
  DeviceArray& operator=(DeviceArray&& o) noexcept {
    if (this != &o) {
      reset();
      b_ = o.b_, n_ = o.n_, p_ = o.p_;
      o.p_ = nullptr, o.n_ = 0;
    }
    return *this;
  }
  void reset() {
    if (p_ && b_) b_->release(p_);
    p_ = nullptr;
    n_ = 0;
  }
  T* get() const { return p_; }
  size_t size() const { return n_; }
  size_t bytes() const { return n_ * sizeof(T); }
  explicit operator bool() const { return p_ != nullptr; }

 private:
  VramBudget* b_ = nullptr;
  size_t n_ = 0;
  T* p_ = nullptr;
};

}  // namespace ft::cuda
