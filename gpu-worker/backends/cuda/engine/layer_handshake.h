#pragma once
// Per-layer flags through which a step's GPU stream and a host thread hand work to each other
// mid-step without the host waiting on the stream, so the step can be one CUDA graph. The flags
// live in mapped pinned host memory; the stream side is stream memory operations
// (core/stream_memops.h), the host side plain atomics.
//
// One exchange per layer, every flag back at 0 after it (the values written are constants, as a
// graph's must be):
//   GPU:  post        Posted ← 1
//   host: wait_posted sees Posted = 1, sets it 0, reads what the stream's publish kernel wrote
//         before posting (host_publish.h: kernel writes, fenced, are ordered before the flag)
//   host: signal      Ready ← 1 (what the GPU needs next is written before)
//   GPU:  await Ready waits for 1, sets it 0
//   host: signal      Done ← 1
//   GPU:  await Done  waits for 1, sets it 0
// Each flag has one writer at a time: the host sets Ready/Done of layer m only after seeing
// Posted of m, which the GPU writes after it reset them in the previous step (its writes reach
// host memory in order).
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

#include "gpu-worker/backends/cuda/core/pinned.h"

namespace ft::cuda {

class LayerHandshake {
 public:
  enum Flag { Posted = 0, Ready = 1, Done = 2 };

  explicit LayerHandshake(int layers);
  ~LayerHandshake();
  LayerHandshake(const LayerHandshake&) = delete;
  LayerHandshake& operator=(const LayerHandshake&) = delete;

  // Stream side (enqueued on s, capturable).
  void post(int layer, cudaStream_t s) const;
  void await(int layer, Flag f, cudaStream_t s) const;  // Ready or Done

  // Host side. wait_posted spins (then naps) until the layer is posted and consumes the flag;
  // false when `stop` was set first.
  bool wait_posted(int layer, const std::atomic<bool>& stop) const;
  void signal(int layer, Flag f) const;  // Ready or Done
  // Every flag 0: after an abandoned step, once the stream is idle and no host thread serves it.
  void reset() const;

 private:
  std::atomic_ref<uint32_t> flag(int layer, Flag f) const;

  int layers_ = 0;
  PinnedArray<uint32_t> flags_;  // mapped [layers][16]: each layer's flags on a cache line of their own
};

}  // namespace ft::cuda
