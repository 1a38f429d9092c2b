#pragma once
// Sampling of the engine's logit rows, next to the logits: per-slot penalty state and seeded
// random streams on the GPU; a step copies back token ids (and logprobs when asked).
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "gpu-worker/backends/cuda/core/vram.h"
#include "shared/engine/engine.h"

namespace ft::cuda {

class GpuSampler {
 public:
  GpuSampler(int slots, int64_t vocab, int64_t max_rows, VramBudget& budget);
  ~GpuSampler();

  void open(int slot, const SequenceSpec& spec, cudaStream_t stream);
  // Tokens the slot was fed as prompt (the repetition penalty looks at them): n ids in device
  // memory (the step's token rows).
  void add_prompt(int slot, const int32_t* tokens_device, int64_t n, cudaStream_t stream);

  // Rows r < n of `logits` ([n, V] device, row r belongs to slots[r]) → a token per row (and
  // logprobs where the slot asked), written into out[r]. Synchronises the stream once.
  void sample(const float* logits, std::span<const int> slots, std::span<StepResult*> out, cudaStream_t stream);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ft::cuda
