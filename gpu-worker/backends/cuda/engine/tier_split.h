#pragma once
// `--tier-mode fast` and `cpu`: each MoE layer's cache misses split between the GPU, reading
// them zero-copy from the segment (GpuExpertTier), and the exact CPU tier (the cpu-expert-worker,
// over its ring), both reading the same host copy of the experts.
//
// Per split layer the stream and a host thread (the relay) exchange work through a
// LayerHandshake, so the host never waits on the stream and a decode step stays one CUDA graph:
//   stream: the router's picks (into the tier's route buffer) and the MLP inputs written to mapped
//           pinned host memory by a kernel (host_publish.h), then `post`; the shared expert (the GPU works while the host splits)
//   relay:  the cost model (tiers::split_misses, rates from tiers::SplitRates) picks which misses
//           the CPU tier computes; writes the GPU's picks (the CPU's set to −1), signals Ready;
//           runs the CPU tier's share (one request row per pick, weight 1, so each answer row is
//           that expert's output alone), writes the answers and where they go, signals Done
//   stream: awaits Ready, computes the hits and its zero-copy share; awaits Done, places the CPU's
//           rows into the pick-ordered outputs; moe_combine adds every pick in ascending expert
//           order — the order, and so the result, of a GPU-only layer; only the CPU kernel's own
//           rounding differs (fp32 accumulation of fp16-rounded operands there).
//
// The CPU tier failing mid-step (dead worker, timeout) costs no request: the relay hands its picks
// back through the "lost" list, which the stream computes zero-copy after Done (an empty list
// otherwise), the split stops (exact mode from the next step) and is retried after `retry_every`.
#include <cuda_runtime.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "gpu-worker/backends/cuda/core/pinned.h"
#include "gpu-worker/backends/cuda/core/vram.h"
#include "gpu-worker/backends/cuda/engine/expert_tier.h"
#include "gpu-worker/backends/cuda/engine/layer_handshake.h"
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
  double wait_us = 0;                  // CPU tier time past the GPU's own experts (the GPU's wait), summed
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

  // Host side of a step. begin_step: whether its MoE layers split. arm: the relay starts serving
  // the step's MoE layers (before its launches are enqueued or its graph replayed); end_step once
  // the stream has synchronised; abandon instead when the step failed after arm (synchronises,
  // stops the relay, clears the flags).
  bool begin_step(int64_t rows);
  bool active() const { return active_; }
  void arm(int64_t rows);
  void end_step();
  void abandon(cudaStream_t s) noexcept;
  // After end_step: the GPU timings refit the rates.
  void after_step();

  // Stream side of split MoE layer `layer`, in this order (pure launches, capturable):
  // post (then the shared expert), await_split → the picks the GPU computes, gpu_begin / the
  // grouped kernel / gpu_end, await_cpu → places the CPU tier's rows into Y ([n·top_k][D], pick
  // order) and returns the picks the GPU must still compute (all −1 unless the CPU tier failed).
  void post(int64_t layer, const int32_t* experts, const float* x, int64_t n, cudaStream_t s);
  const int32_t* await_split(cudaStream_t s);
  void gpu_begin(cudaStream_t s);
  void gpu_end(cudaStream_t s);
  const int32_t* await_cpu(float* Y, cudaStream_t s);

  TierSplitStats stats() const;

 private:
  struct LayerRecord {  // a split layer of the current step, for after_step
    int hits = 0, zero_copy = 0, extra_rows = 0;
    bool valid = false;  // planned (a failed plan's timing fits nothing)
    // Around the grouped kernel, and when the CPU tier's answer let the stream on.
    cudaEvent_t begin = nullptr, end = nullptr, arrived = nullptr;
  };
  void calibrate(VramBudget& budget, cudaStream_t s);
  double time_cpu(int64_t layer, int tokens, int experts_per_token);
  double time_zero_copy(int64_t layer, int tokens, VramBudget& budget, cudaStream_t s);
  void cpu_failed();
  // The relay: every MoE layer of the armed step in order; serve_layer one exchange.
  void relay();
  void serve_layer(int moe);
  void split_layer(int moe, const int32_t* route_h, int64_t P);  // the plan: picks_h_, the record
  int64_t cpu_requests(const int32_t* route_h, int64_t P);       // the CPU's rows; how many

  const ModelConfig& cfg_;
  GpuExpertTier& tier_;
  ExpertBackend& cpu_;
  TierSplitOptions o_;
  int E_ = 0, TK_ = 0, n_moe_ = 0;
  int64_t D_ = 0;
  std::vector<int64_t> layer_of_moe_;
  tiers::SplitRates rates_;
  tiers::TierRates start_rates_;
  bool active_ = false, cpu_up_ = true;
  int layers_without_cpu_ = 0;
  std::chrono::steady_clock::time_point down_since_{};

  // Host side (pinned): the MLP inputs, the GPU's and the lost picks, the CPU's answers and where
  // they go (all but the GPU's picks mapped: the stream writes the inputs and reads the last three
  // in place after Done).
  PinnedArray<float> x_h_;        // [max_rows][D] (the stream writes it, host_publish.h)
  PinnedArray<int32_t> picks_h_;  // [max_rows·TK] the GPU's picks (CPU's −1)
  PinnedArray<int32_t> lost_h_;   // [max_rows·TK] the CPU's picks after a failure (others −1)
  PinnedArray<float> y_h_;        // [max_rows·TK][D] the CPU's answers, one row per CPU pick
  PinnedArray<int32_t> place_h_;  // [max_rows·TK] the pick index of each answer row, −1 past the last
  DeviceArray<int32_t> picks_d_;
  LayerHandshake hs_;

  // Relay state of one layer.
  std::vector<int> rows_;             // picks per expert
  std::vector<uint8_t> on_cpu_;       //   and whether the CPU tier computes it
  std::vector<tiers::Miss> misses_;
  std::vector<float> req_x_;          // CPU request rows (a copy of the pick's token row)
  std::vector<Routing> req_routes_;
  std::vector<int32_t> req_place_;    // the pick index of each request row
  int cpu_experts_ = 0, cpu_extra_ = 0;

  // The armed step.
  int64_t step_rows_ = 0;
  std::atomic<bool> stop_{false};
  bool armed_ = false;
  bool timing_warned_ = false, relay_warned_ = false;
  std::vector<int> served_;           // MoE layers the relay served this step
  std::vector<LayerRecord> records_;  // [n_moe]
  TierSplitStats st_;
  std::unique_ptr<HelperThread> relay_;

  // Enqueue side: the layer being enqueued and its step size.
  int64_t layer_ = -1;
  int64_t n_ = 0;
};

}  // namespace ft::cuda
