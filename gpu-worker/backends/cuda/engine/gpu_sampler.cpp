#include "gpu-worker/backends/cuda/engine/gpu_sampler.h"

#include <optional>

#include "gpu-worker/backends/cuda/core/cuda_check.h"
#include "shared/sampling/logprobs.h"
#include "shared/sampling/sampler.h"

namespace ft::cuda {

// Interim: logits rows come to the host and shared/sampling picks the token.
struct GpuSampler::Impl {
  int64_t V = 0;
  struct SlotState {
    SequenceSpec spec;
    std::optional<Sampler> sampler;
    TokenHistory history;
  };
  std::vector<SlotState> slots;
  std::vector<float> host;
};

GpuSampler::GpuSampler(int slots, int64_t vocab, int64_t max_rows, VramBudget&) : impl_(std::make_unique<Impl>()) {
  impl_->V = vocab;
  impl_->slots.resize(static_cast<size_t>(slots));
  impl_->host.resize(static_cast<size_t>(max_rows * vocab));
}

GpuSampler::~GpuSampler() = default;

void GpuSampler::open(int slot, const SequenceSpec& spec, cudaStream_t) {
  Impl::SlotState& s = impl_->slots.at(static_cast<size_t>(slot));
  s.spec = spec;
  s.sampler.emplace(spec.sampling);
  s.history = TokenHistory{};
}

void GpuSampler::add_prompt(int slot, std::span<const int32_t> tokens, cudaStream_t) {
  impl_->slots.at(static_cast<size_t>(slot)).history.add_prompt(tokens);
}

void GpuSampler::sample(const float* logits, std::span<const int> slots, std::span<StepResult*> out,
                        cudaStream_t stream) {
  const int64_t V = impl_->V, n = static_cast<int64_t>(slots.size());
  if (n == 0) return;
  FT_CUDA_CHECK(cudaMemcpyAsync(impl_->host.data(), logits, n * V * sizeof(float), cudaMemcpyDeviceToHost, stream));
  FT_CUDA_CHECK(cudaStreamSynchronize(stream));
  for (int64_t r = 0; r < n; ++r) {
    Impl::SlotState& s = impl_->slots.at(static_cast<size_t>(slots[r]));
    std::span<float> row(impl_->host.data() + r * V, static_cast<size_t>(V));
    std::vector<float> raw;
    if (s.spec.logprobs || s.spec.top_logprobs > 0) raw.assign(row.begin(), row.end());
    StepResult& res = *out[r];
    res.token = s.sampler->sample(row, s.history);
    if (!raw.empty()) {
      TokenLogprobs lp = token_logprobs(raw, res.token, s.spec.top_logprobs);
      res.logprob = lp.chosen;
      res.top = std::move(lp.top);
    }
    s.history.add_generated(res.token);
  }
}

}  // namespace ft::cuda
