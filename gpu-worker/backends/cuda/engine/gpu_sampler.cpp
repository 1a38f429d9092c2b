#include "gpu-worker/backends/cuda/engine/gpu_sampler.h"

#include <algorithm>

#include "gpu-worker/backends/cuda/core/cuda_check.h"
#include "gpu-worker/backends/cuda/sampling/constraint_mask.h"
#include "gpu-worker/backends/cuda/sampling/logprobs.h"
#include "gpu-worker/backends/cuda/sampling/sampler.h"
#include "shared/sampling/token_constraint.h"

namespace ft::cuda {

struct GpuSampler::Impl {
  int64_t V = 0, max_rows = 0;
  struct SlotState {
    SequenceSpec spec;
    uint64_t seed = 0;
    uint64_t step = 0;  // tokens this sequence has drawn
  };
  std::vector<SlotState> slots;
  SamplingPenaltyState state;
  DeviceArray<uint8_t> state_mem, ws, lp_ws;
  DeviceArray<SamplingRowParams> params_d;
  DeviceArray<int32_t> tokens_d, top_ids_d;
  DeviceArray<float> chosen_lp_d, top_lp_d;
  size_t ws_bytes = 0, lp_ws_bytes = 0;
  // Pinned host mirrors.
  SamplingRowParams* params_h = nullptr;
  int32_t* tokens_h = nullptr;
  int32_t* top_ids_h = nullptr;
  float* chosen_lp_h = nullptr;
  float* top_lp_h = nullptr;
  // Constraints (allocated at the first constrained step): a masked copy of the rows (logprobs
  // stay those of the raw rows, as on the CPU), the rows' allowed-token words, flags and biases.
  VramBudget* budget = nullptr;
  DeviceArray<float> masked_d;
  DeviceArray<uint32_t> words_d;
  DeviceArray<uint8_t> has_mask_d;
  DeviceArray<LogitBiasEntry> bias_d;
  std::vector<uint32_t> words_h;
  std::vector<uint8_t> has_mask_h;
  std::vector<LogitBiasEntry> bias_h;

  // Masks and biases of the constrained rows applied to a copy of `logits`; returns the rows to
  // sample from. The host work (TokenConstraint::mask) overlaps the forward pass still running
  // on the stream.
  const float* constrain(const float* logits, int64_t n, std::span<const int> slot_ids, cudaStream_t stream);
};

const float* GpuSampler::Impl::constrain(const float* logits, int64_t n, std::span<const int> slot_ids, cudaStream_t stream) {
  const int64_t wpr = (V + 31) / 32;
  words_h.assign(static_cast<size_t>(n * wpr), ~0u);
  has_mask_h.assign(static_cast<size_t>(n), 0);
  bias_h.clear();
  for (int64_t r = 0; r < n; ++r) {
    TokenConstraint* c = slots.at(static_cast<size_t>(slot_ids[r])).spec.constraint.get();
    if (!c) continue;
    has_mask_h[r] = c->mask(std::span<uint32_t>(words_h.data() + r * wpr, static_cast<size_t>(wpr))) ? 1 : 0;
    for (const auto& [id, b] : c->bias()) bias_h.push_back({static_cast<int32_t>(r), id, b});
  }
  if (!masked_d.get()) {
    masked_d = DeviceArray<float>(*budget, static_cast<size_t>(max_rows * V), VramCategory::Workspace, "constrained logits");
    words_d = DeviceArray<uint32_t>(*budget, static_cast<size_t>(max_rows * wpr), VramCategory::Workspace, "constraint masks");
    has_mask_d = DeviceArray<uint8_t>(*budget, static_cast<size_t>(max_rows), VramCategory::Workspace, "constraint flags");
  }
  if (bias_d.size() < bias_h.size())
    bias_d = DeviceArray<LogitBiasEntry>(*budget, std::max<size_t>(bias_h.size(), 256), VramCategory::Workspace, "logit bias");
  // Pageable sources: each copy has read them when it returns, so the vectors may change after.
  FT_CUDA_CHECK(cudaMemcpyAsync(masked_d.get(), logits, static_cast<size_t>(n * V) * sizeof(float), cudaMemcpyDeviceToDevice, stream));
  FT_CUDA_CHECK(cudaMemcpyAsync(words_d.get(), words_h.data(), words_h.size() * 4, cudaMemcpyHostToDevice, stream));
  FT_CUDA_CHECK(cudaMemcpyAsync(has_mask_d.get(), has_mask_h.data(), has_mask_h.size(), cudaMemcpyHostToDevice, stream));
  if (!bias_h.empty())
    FT_CUDA_CHECK(cudaMemcpyAsync(bias_d.get(), bias_h.data(), bias_h.size() * sizeof(LogitBiasEntry), cudaMemcpyHostToDevice, stream));
  apply_token_constraints(masked_d.get(), V, n, V, words_d.get(), wpr, has_mask_d.get(), bias_d.get(),
                          static_cast<int64_t>(bias_h.size()), stream);
  return masked_d.get();
}

GpuSampler::GpuSampler(int slots, int64_t vocab, int64_t max_rows, VramBudget& b) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.V = vocab;
  m.max_rows = max_rows;
  m.budget = &b;
  m.slots.resize(static_cast<size_t>(slots));
  m.state_mem = DeviceArray<uint8_t>(b, sampling_penalty_state_bytes(slots, vocab), VramCategory::Workspace,
                                     "sampling penalty state");
  m.state.counts = reinterpret_cast<int32_t*>(m.state_mem.get());
  m.state.prompt_bits = reinterpret_cast<uint32_t*>(m.state_mem.get() + static_cast<size_t>(slots * vocab) * 4);
  m.state.slots = slots;
  m.state.vocab = vocab;
  FT_CUDA_CHECK(cudaMemset(m.state_mem.get(), 0, m.state_mem.bytes()));
  m.ws_bytes = sampling_workspace_bytes(max_rows, vocab);
  m.lp_ws_bytes = logprobs_workspace_bytes(max_rows, vocab);
  m.ws = DeviceArray<uint8_t>(b, m.ws_bytes, VramCategory::Workspace, "sampling workspace");
  m.lp_ws = DeviceArray<uint8_t>(b, m.lp_ws_bytes, VramCategory::Workspace, "logprobs workspace");
  m.params_d = DeviceArray<SamplingRowParams>(b, static_cast<size_t>(max_rows), VramCategory::Workspace, "sampling params");
  m.tokens_d = DeviceArray<int32_t>(b, static_cast<size_t>(max_rows), VramCategory::Workspace, "sampled tokens");
  m.top_ids_d = DeviceArray<int32_t>(b, static_cast<size_t>(max_rows * kMaxTopLogprobs), VramCategory::Workspace, "top ids");
  m.chosen_lp_d = DeviceArray<float>(b, static_cast<size_t>(max_rows), VramCategory::Workspace, "logprobs");
  m.top_lp_d = DeviceArray<float>(b, static_cast<size_t>(max_rows * kMaxTopLogprobs), VramCategory::Workspace, "top logprobs");
  FT_CUDA_CHECK(cudaMallocHost(&m.params_h, static_cast<size_t>(max_rows) * sizeof(SamplingRowParams)));
  FT_CUDA_CHECK(cudaMallocHost(&m.tokens_h, static_cast<size_t>(max_rows) * 4));
  FT_CUDA_CHECK(cudaMallocHost(&m.top_ids_h, static_cast<size_t>(max_rows * kMaxTopLogprobs) * 4));
  FT_CUDA_CHECK(cudaMallocHost(&m.chosen_lp_h, static_cast<size_t>(max_rows) * 4));
  FT_CUDA_CHECK(cudaMallocHost(&m.top_lp_h, static_cast<size_t>(max_rows * kMaxTopLogprobs) * 4));
}

GpuSampler::~GpuSampler() {
  Impl& m = *impl_;
  cudaFreeHost(m.params_h);
  cudaFreeHost(m.tokens_h);
  cudaFreeHost(m.top_ids_h);
  cudaFreeHost(m.chosen_lp_h);
  cudaFreeHost(m.top_lp_h);
}

void GpuSampler::open(int slot, const SequenceSpec& spec, cudaStream_t stream) {
  Impl::SlotState& s = impl_->slots.at(static_cast<size_t>(slot));
  s.spec = spec;
  s.seed = spec.sampling.seed ? *spec.sampling.seed : sampling_random_seed();
  s.step = 0;
  sampling_reset_slot(impl_->state, slot, stream);
}

void GpuSampler::add_prompt(int slot, const int32_t* tokens_device, int64_t n, cudaStream_t stream) {
  if (n > 0) sampling_mark_prompt(impl_->state, slot, tokens_device, n, stream);
}

void GpuSampler::sample(const float* logits, std::span<const int> slots, std::span<StepResult*> out,
                        cudaStream_t stream) {
  Impl& m = *impl_;
  const int64_t n = static_cast<int64_t>(slots.size());
  if (n == 0) return;
  bool any_lp = false, any_constraint = false;
  for (int64_t r = 0; r < n; ++r) {
    const Impl::SlotState& s = m.slots.at(static_cast<size_t>(slots[r]));
    any_constraint |= s.spec.constraint != nullptr;
    const int32_t lp = s.spec.top_logprobs > 0 ? s.spec.top_logprobs : (s.spec.logprobs ? 0 : -1);
    any_lp |= lp >= 0;
    m.params_h[r] = sampling_row_params(s.spec.sampling, slots[r], s.seed, s.step, lp);
  }
  FT_CUDA_CHECK(cudaMemcpyAsync(m.params_d.get(), m.params_h, n * sizeof(SamplingRowParams), cudaMemcpyHostToDevice,
                                stream));
  const float* rows = any_constraint ? m.constrain(logits, n, slots, stream) : logits;
  sample_tokens(rows, m.V, n, m.V, m.params_d.get(), m.state, m.ws.get(), m.ws_bytes, m.tokens_d.get(), nullptr,
                stream);
  FT_CUDA_CHECK(cudaMemcpyAsync(m.tokens_h, m.tokens_d.get(), n * 4, cudaMemcpyDeviceToHost, stream));
  if (any_lp) {
    token_logprobs(logits, m.V, n, m.V, m.params_d.get(), m.tokens_d.get(), m.lp_ws.get(), m.lp_ws_bytes,
                   m.chosen_lp_d.get(), m.top_ids_d.get(), m.top_lp_d.get(), stream);
    FT_CUDA_CHECK(cudaMemcpyAsync(m.chosen_lp_h, m.chosen_lp_d.get(), n * 4, cudaMemcpyDeviceToHost, stream));
    FT_CUDA_CHECK(cudaMemcpyAsync(m.top_ids_h, m.top_ids_d.get(), n * kMaxTopLogprobs * 4, cudaMemcpyDeviceToHost, stream));
    FT_CUDA_CHECK(cudaMemcpyAsync(m.top_lp_h, m.top_lp_d.get(), n * kMaxTopLogprobs * 4, cudaMemcpyDeviceToHost, stream));
  }
  FT_CUDA_CHECK(cudaStreamSynchronize(stream));
  for (int64_t r = 0; r < n; ++r) {
    Impl::SlotState& s = m.slots.at(static_cast<size_t>(slots[r]));
    StepResult& res = *out[r];
    res.token = m.tokens_h[r];
    if (s.spec.constraint) s.spec.constraint->accept(res.token);
    if (m.params_h[r].logprobs >= 0) {
      res.logprob = m.chosen_lp_h[r];
      res.top.clear();
      for (int k = 0; k < s.spec.top_logprobs && k < kMaxTopLogprobs; ++k) {
        const int32_t id = m.top_ids_h[r * kMaxTopLogprobs + k];
        if (id < 0) break;
        res.top.emplace_back(id, m.top_lp_h[r * kMaxTopLogprobs + k]);
      }
    }
    ++s.step;
  }
}

}  // namespace ft::cuda
