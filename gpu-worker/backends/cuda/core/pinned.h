#pragma once
// Page-locked host arrays that free themselves: a constructor that throws halfway leaks none of
// the ones it already made. Mapped ones also have a device address, for kernels and stream memory
// operations that read or write host memory in place.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>

#include "gpu-worker/backends/cuda/core/cuda_check.h"

namespace ft::cuda {

enum class PinnedKind { Plain, Mapped };

template <class T>
class PinnedArray {
 public:
  PinnedArray() = default;
  explicit PinnedArray(size_t n, PinnedKind k = PinnedKind::Plain) : n_(n) {
    void* p = nullptr;
    FT_CUDA_CHECK(cudaHostAlloc(&p, std::max<size_t>(n, 1) * sizeof(T),
                                k == PinnedKind::Mapped ? cudaHostAllocMapped : cudaHostAllocDefault));
    h_ = static_cast<T*>(p);
    if (k == PinnedKind::Mapped) {
      void* d = nullptr;
      const cudaError_t e = cudaHostGetDevicePointer(&d, p, 0);
      if (e != cudaSuccess) {
        cudaFreeHost(p);
        h_ = nullptr;
        FT_CUDA_CHECK(e);
      }
      d_ = static_cast<T*>(d);
    }
  }
  ~PinnedArray() { reset(); }
  PinnedArray(PinnedArray&& o) noexcept : n_(o.n_), h_(o.h_), d_(o.d_) { o.h_ = o.d_ = nullptr, o.n_ = 0; }
  PinnedArray& operator=(PinnedArray&& o) noexcept {
    if (this != &o) {
      reset();
      n_ = o.n_, h_ = o.h_, d_ = o.d_;
      o.h_ = o.d_ = nullptr, o.n_ = 0;
    }
    return *this;
  }
  PinnedArray(const PinnedArray&) = delete;
  PinnedArray& operator=(const PinnedArray&) = delete;
  void reset() {
    if (h_) cudaFreeHost(h_);
    h_ = d_ = nullptr;
    n_ = 0;
  }
  T* get() const { return h_; }
  T* device() const { return d_; }  // null unless mapped
  size_t size() const { return n_; }
  size_t bytes() const { return n_ * sizeof(T); }
  T& operator[](size_t i) const { return h_[i]; }

 private:
  size_t n_ = 0;
  T* h_ = nullptr;
  T* d_ = nullptr;
};

}  // namespace ft::cuda
