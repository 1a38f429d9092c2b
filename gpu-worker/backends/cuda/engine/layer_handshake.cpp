#include "gpu-worker/backends/cuda/engine/layer_handshake.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "gpu-worker/backends/cuda/core/cuda_check.h"
#include "gpu-worker/backends/cuda/core/stream_memops.h"
#include "shared/core/cpu_relax.h"

namespace ft::cuda {
namespace {

constexpr int kStride = 16;  // uint32 per layer: 64 bytes
static_assert(std::atomic_ref<uint32_t>::is_always_lock_free);

}  // namespace

LayerHandshake::LayerHandshake(int layers)
    : layers_(layers), flags_(static_cast<size_t>(std::max(layers, 1)) * kStride, PinnedKind::Mapped) {
  reset();
}

LayerHandshake::~LayerHandshake() = default;

std::atomic_ref<uint32_t> LayerHandshake::flag(int layer, Flag f) const {
  return std::atomic_ref<uint32_t>(flags_[static_cast<size_t>(layer) * kStride + f]);
}

void LayerHandshake::post(int layer, cudaStream_t s) const {
  stream_write_u32(s, flags_.device() + static_cast<size_t>(layer) * kStride + Posted, 1);
}

void LayerHandshake::await(int layer, Flag f, cudaStream_t s) const {
  uint32_t* a = flags_.device() + static_cast<size_t>(layer) * kStride + f;
  stream_wait_u32(s, a, 1);
  stream_write_u32(s, a, 0);
}

bool LayerHandshake::wait_posted(int layer, const std::atomic<bool>& stop) const {
  const std::atomic_ref<uint32_t> p = flag(layer, Posted);
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
      cpu_relax();
  }
}

void LayerHandshake::signal(int layer, Flag f) const { flag(layer, f).store(1, std::memory_order_seq_cst); }

void LayerHandshake::reset() const {
  for (int l = 0; l < layers_; ++l)
    for (Flag f : {Posted, Ready, Done}) flag(l, f).store(0, std::memory_order_seq_cst);
}

}  // namespace ft::cuda
