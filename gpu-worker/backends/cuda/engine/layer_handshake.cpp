#include "gpu-worker/backends/cuda/engine/layer_handshake.h"

#include <immintrin.h>

#include <chrono>
#include <thread>

#include "gpu-worker/backends/cuda/core/cuda_check.h"
#include "gpu-worker/backends/cuda/core/stream_memops.h"

namespace ft::cuda {
namespace {

constexpr int kStride = 16;  // uint32 per layer: 64 bytes
static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t) && std::atomic<uint32_t>::is_always_lock_free);

}  // namespace

LayerHandshake::LayerHandshake(int layers) : layers_(layers) {
  void* p = nullptr;
  const size_t bytes = static_cast<size_t>(std::max(layers, 1)) * kStride * sizeof(uint32_t);
  FT_CUDA_CHECK(cudaHostAlloc(&p, bytes, cudaHostAllocMapped));
  host_ = static_cast<uint32_t*>(p);
  void* d = nullptr;
  FT_CUDA_CHECK(cudaHostGetDevicePointer(&d, p, 0));
  device_ = static_cast<uint32_t*>(d);
  reset();
}

LayerHandshake::~LayerHandshake() {
  if (host_) cudaFreeHost(host_);
}

std::atomic<uint32_t>* LayerHandshake::flag(int layer, Flag f) const {
  return reinterpret_cast<std::atomic<uint32_t>*>(host_ + static_cast<size_t>(layer) * kStride + f);
}

void LayerHandshake::post(int layer, cudaStream_t s) const {
  stream_write_u32(s, device_ + static_cast<size_t>(layer) * kStride + Posted, 1);
}

void LayerHandshake::await(int layer, Flag f, cudaStream_t s) const {
  uint32_t* a = device_ + static_cast<size_t>(layer) * kStride + f;
  stream_wait_u32(s, a, 1);
  stream_write_u32(s, a, 0);
}

bool LayerHandshake::wait_posted(int layer, const std::atomic<bool>& stop) const {
  std::atomic<uint32_t>& p = *flag(layer, Posted);
  // A layer's attention takes tens to hundreds of µs: spin through that (the answer is on the
  // GPU's critical path), nap once it is clearly longer (an eager or profiled step).
  const auto nap_after = std::chrono::steady_clock::now() + std::chrono::milliseconds(2);
  for (uint32_t spins = 0;; ++spins) {
    if (p.load(std::memory_order_acquire) == 1) {
      p.store(0, std::memory_order_relaxed);
      return true;
    }
    if (stop.load(std::memory_order_relaxed)) return false;
    if ((spins & 1023) == 1023 && std::chrono::steady_clock::now() > nap_after)
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    else
      _mm_pause();
  }
}

void LayerHandshake::signal(int layer, Flag f) const { flag(layer, f)->store(1, std::memory_order_seq_cst); }

void LayerHandshake::reset() const {
  for (int l = 0; l < layers_; ++l)
    for (Flag f : {Posted, Ready, Done}) flag(l, f)->store(0, std::memory_order_seq_cst);
}

}  // namespace ft::cuda
