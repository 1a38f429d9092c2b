#pragma once
// The CUDA forward pass of one step (the GPU twin of ReferenceEngine::forward): embedding, every
// layer's two mHC sites around its attention (KDA or MLA+DSA) and its MLP (dense or MoE), then
// the final norm and lm_head for the rows that need logits. Pure launches on one stream over
// the step's fixed buffers, so a decode step can be captured into a CUDA graph.
//
// Row order of a step: decode rows first (one token each, KDA through the decode kernels), then
// each prefill span's rows (KDA through the chunked kernel). Every other op treats rows alike,
// so a token's result depends only on its own sequence.
#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "gpu-worker/backends/cuda/engine/device_model.h"
#include "gpu-worker/backends/cuda/engine/expert_tier.h"
#include "gpu-worker/backends/cuda/engine/op_profile.h"
#include "gpu-worker/backends/cuda/engine/sequence_pool.h"
#include "gpu-worker/backends/cuda/engine/side_stream.h"
#include "gpu-worker/backends/cuda/engine/step_buffers.h"
#include "gpu-worker/backends/cuda/engine/tier_split.h"
#include "gpu-worker/backends/cuda/ops/mhc.h"
#include "shared/engine/expert_backend.h"

namespace ft::cuda {

struct PrefillSpan {
  int64_t row0 = 0, n = 0;  // its rows of the step
  int slot = 0;
  int64_t pos0 = 0;         // absolute position of its first token
};

// What the host knows of a step; the device row descriptors (tokens, slot, pos, logit_rows) are
// already in the step buffers.
struct StepPlan {
  int64_t rows = 0;
  int64_t decode_rows = 0;  // rows [0, decode_rows) are decode rows
  std::vector<PrefillSpan> prefill;
  int64_t logit_rows = 0;   // entries of StepBuffers::logit_rows
};

class ForwardPass {
 public:
  // `host_experts`: routed experts computed off the GPU (a host round trip per MoE layer: no
  // graphs); null when the model's experts are on the GPU.
  ForwardPass(const DeviceModel& m, SequencePool& pool, StepBuffers& b, ExpertBackend* host_experts);
  // Routed experts read from the cpu-expert-worker's segment (zero-copy + VRAM cache) instead of
  // the host round trip; null: none.
  void set_expert_tier(GpuExpertTier* t) { tier_ = t; }
  // Fast / cpu tier modes: the tier's misses split with the CPU tier in the steps it is active
  // (armed by the engine before the step's launches).
  void set_tier_split(CpuTierSplit* s) { split_ = s; }

  // Embedding → layers → final norm + lm_head of the logit rows (into StepBuffers::logits).
  void run(const StepPlan& p, cudaStream_t stream);
  // Final norm + lm_head of `n` rows listed in StepBuffers::logit_rows (when the first pass's
  // rows did not all fit).
  void logits(int64_t rows, int64_t n, cudaStream_t stream);

  // Decode graphs need steps without host round trips: none to the CPU tier (the split's
  // exchanges with its relay are stream memory operations, which graphs hold).
  bool graph_safe() const { return host_experts_ == nullptr || tier_ != nullptr; }
  // Events around each op group of eager steps (benchmarks); null: none. Profiled steps run on
  // one stream (no side branches), so each group's events bracket its own work.
  void set_profile(OpProfile* p) { prof_ = p; }
  // Independent launches of steps of at most kSideRows rows on a side stream (default on).
  void set_branches(bool on) { branches_ = on; }
  // Tests: called (on the host, while enqueuing) after each layer with the step's buffers: the
  // residual streams X [rows][HC·D] and, after a sparse layer, its selection. Eager steps only.
  using LayerProbe = std::function<void(int64_t layer, const StepBuffers& b, int64_t rows, cudaStream_t s)>;
  void set_layer_probe(LayerProbe p) { probe_ = std::move(p); }

 private:
  void mixing_logits(const LinearF32& fn, int64_t rows, cudaStream_t s);  // into b_.m_raw
  // The site's input side into b_.A (and b_.mix): in decode-sized steps the mix is computed on the
  // side stream; the returned point (null event otherwise) must be awaited before the site's output.
  SideStream::Point site_in(const MhcSite& site, int64_t rows, cudaStream_t s);
  void kda(int64_t l, const StepPlan& p, cudaStream_t s);
  void mla(int64_t l, const StepPlan& p, cudaStream_t s);
  void mlp(const MlpGpu& g, int64_t rows, float* out, LinearStore store, const char* what, cudaStream_t s,
           const F16Staging& st);
  // Whether this step's independent launches go to the side stream.
  bool branch(int64_t rows) const { return branches_ && !prof_ && rows <= b_.side_staging.max_rows; }
  void moe(int64_t l, const StepPlan& p, cudaStream_t s);
  // Benchmarks replaying a trace: the tier's forced picks replace the router's.
  void force_routes(int64_t l, int32_t* experts, int64_t N, cudaStream_t s);

  const DeviceModel& m_;
  const ModelConfig& c_;
  SequencePool& pool_;
  StepBuffers& b_;
  ExpertBackend* host_experts_;
  OpProfile* prof_ = nullptr;
  GpuExpertTier* tier_ = nullptr;
  CpuTierSplit* split_ = nullptr;
  LayerProbe probe_;
  bool branches_ = true;
  std::optional<RoutedSum> routed_;  // a MoE sublayer's routed sum, for the site's output
  SideStream side_;
  std::vector<float> host_a_, host_o_;  // host-tier exchange
};

}  // namespace ft::cuda
