#pragma once
// `--tier-mode fast` and `cpu`: each MoE layer's cache misses split between the GPU, reading
// them zero-copy from the segment (GpuExpertTier), and the exact CPU tier (the cpu-expert-worker,
// over its ring), both reading the same host copy of the experts.
//
// Per split layer (decode-sized steps): the router's picks and the MLP inputs go to the host (the
// one host synchronisation of the layer: the split needs the picks); the cost model
// (tiers::split_misses, rates from tiers::SplitRates) picks which misses the CPU tier computes;
// they start on a helper thread, one request row per pick (weight 1, so each answer row is that
// expert's output alone); the GPU computes the hits and its zero-copy share from a copy of the
// picks with the CPU's set to −1, then the shared expert; then the CPU's rows are placed into the
// pick-ordered outputs and moe_combine adds every pick in ascending expert order — the order,
// and so the result, of a GPU-only layer; only the CPU kernel's own rounding differs (fp32
// activations there, fp16 on the GPU).
//
// The CPU tier failing mid-step (dead worker, timeout) costs no request: its picks are handed
// back for the GPU to read zero-copy (finish() returns them), the split stops (exact mode, decode
// graphs again) and is retried after `retry_every`.
#include <cuda_runtime.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "gpu-worker/backends/cuda/core/vram.h"
#include "gpu-worker/backends/cuda/engine/expert_tier.h"
#include "gpu-worker/tiers/split_model.h"
#include "gpu-worker/tiers/split_rates.h"
#include "shared/engine/expert_backend.h"
#include "shared/engine/helper_thread.h"
#include "shared/model/config.h"

namespace ft::cuda {

struct TierSplitOptions {
  tiers::TierMode mode = tiers::TierMode::Fast;  // Fast or Cpu (Exact needs no split)
  int64_t max_rows = 32;     // steps with more rows run exact (prefill chunks stage instead)
  bool calibrate = true;     // measure the start-up rates (else `rates` as given)
  bool freeze_rates = false; // never refit (tests and benchmarks that want a fixed split)
  tiers::TierRates rates;    // start values when not calibrating
  std::chrono::milliseconds retry_every{1000};  // after a CPU-tier failure
};

struct TierSplitStats {
  uint64_t layers = 0;                 // split layers run
  uint64_t cpu_experts = 0, zero_copy_experts = 0, hit_experts = 0;
  double cpu_us = 0;                   // CPU tier wall time (request to answer), summed
  double gpu_us = 0;                   // grouped kernel time of split layers, summed
  double wait_us = 0;                  // host time blocked on the CPU tier after the GPU's share was queued
  double predicted_us = 0;             // the cost model's finish time, summed
  uint64_t failures = 0;               // CPU-tier calls that failed (their picks ran on the GPU)
  uint64_t probes = 0;                 // layers that sent the CPU tier one miss to re-measure it
  bool cpu_up = true;
  tiers::TierRates rates;
  tiers::TierRates start_rates;
};

class CpuTierSplit {
 public:
  // Calibrates (when asked) by timing the CPU tier and the zero-copy kernel on `tier`'s first MoE
  // layer; a CPU tier that does not answer then leaves the split off until a retry succeeds.
  CpuTierSplit(const ModelConfig& c, GpuExpertTier& tier, ExpertBackend& cpu, const TierSplitOptions& o,
               VramBudget& budget, cudaStream_t s);
  ~CpuTierSplit();
  CpuTierSplit(const CpuTierSplit&) = delete;
  CpuTierSplit& operator=(const CpuTierSplit&) = delete;

  // Before a step: whether its MoE layers split (then the step runs eagerly).
  bool begin_step(int64_t rows);
  bool active() const { return active_; }

  // Model layer `layer`'s router picks (device, n·top_k, ascending per token) and MLP inputs
  // (device [n][D]): waits for them on the host, copies the picks into the tier's route buffer,
  // splits the misses and starts the CPU tier's share. Returns the picks the GPU computes
  // (device; the CPU's are −1). Then gpu_begin / the grouped kernel / gpu_end on `s`.
  const int32_t* split(int64_t layer, const int32_t* experts, const float* x, int64_t n, cudaStream_t s);
  void gpu_begin(cudaStream_t s);
  void gpu_end(cudaStream_t s);
  // Waits for the CPU tier and places its rows into Y ([n·top_k][D], pick order). Null when done;
  // when the tier failed, the device picks it had (the others −1), for the GPU to compute.
  const int32_t* finish(float* Y, cudaStream_t s);
  // After the step's synchronisation: the GPU timings refit the rates.
  void after_step();

  TierSplitStats stats() const;

 private:
  struct LayerRecord {  // a split layer of the current step, for after_step
    int hits = 0, zero_copy = 0, extra_rows = 0;
    cudaEvent_t begin = nullptr, end = nullptr;
  };
  void calibrate(VramBudget& budget, cudaStream_t s);
  double time_cpu(int64_t layer, int tokens, int experts_per_token);
  double time_zero_copy(int64_t layer, int tokens, VramBudget& budget, cudaStream_t s);
  void cpu_failed();

  const ModelConfig& cfg_;
  GpuExpertTier& tier_;
  ExpertBackend& cpu_;
  TierSplitOptions o_;
  int E_ = 0, TK_ = 0;
  int64_t D_ = 0;
  tiers::SplitRates rates_;
  tiers::TierRates start_rates_;
  bool active_ = false, cpu_up_ = true;
  int layers_without_cpu_ = 0;
  std::chrono::steady_clock::time_point down_since_{};

  // Host side (pinned): picks, MLP inputs, the CPU's request rows and answers.
  int32_t* picks_h_ = nullptr;    // [max_rows·TK] the GPU's picks (CPU's −1)
  int32_t* lost_h_ = nullptr;     // [max_rows·TK] the CPU's picks (others −1), for a failure
  float* x_h_ = nullptr;          // [max_rows][D]
  float* y_h_ = nullptr;          // [max_rows·TK][D] the CPU's answers, one row per CPU pick (mapped)
  int32_t* place_h_ = nullptr;    // [max_rows·TK] where each answer row goes (pick index; mapped)
  const float* y_d_ = nullptr;    // device aliases of y_h_ and place_h_
  const int32_t* place_d_ = nullptr;
  std::vector<int> rows_;             // per split layer: picks per expert
  std::vector<uint8_t> on_cpu_;       //   and whether the CPU tier computes it
  std::vector<tiers::Miss> misses_;
  DeviceArray<int32_t> picks_d_, lost_d_;
  std::vector<float> req_x_;      // CPU request rows (a copy of the pick's token row)
  std::vector<Routing> req_routes_;

  // The layer in flight.
  int64_t layer_ = -1;
  int n_cpu_ = 0;
  bool cpu_started_ = false;
  double cpu_call_us_ = 0;
  std::chrono::steady_clock::time_point queued_{};
  std::vector<LayerRecord> records_;  // [n_moe]
  std::vector<int> step_layers_;      // MoE indices split this step
  TierSplitStats st_;
  std::unique_ptr<HelperThread> helper_;
};

}  // namespace ft::cuda
