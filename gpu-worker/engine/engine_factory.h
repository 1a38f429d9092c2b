#pragma once
// Which engine a gpu-worker runs: the fp32 reference engine on the CPU, or the CUDA engine.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "shared/engine/engine.h"
#include "shared/engine/expert_backend.h"
#include "shared/engine/weights.h"

namespace ft::worker {

struct EngineConfig {
  std::string backend = "cpu";     // resolved: "cpu" or "cuda"
  int device = 0;
  uint64_t vram_budget_bytes = 0;  // 0: the card's free memory
  int max_sequences = 8;
  int64_t max_tokens_per_step = 8192;
  int64_t context_size = 32768;
  std::string precision = "auto";      // CUDA backend: auto | fp32 | fp16 (CudaEngineOptions::precision)
  uint64_t prefix_cache_bytes = 0;     // 0: no prefix cache
  int64_t prefix_snapshot_stride = 0;  // snapshots during long prefills (0: at request ends only)
  // CUDA backend with remote experts: the tier's segment ("" : none reachable), its mode, the
  // VRAM expert cache (0: auto) and admissions per step.
  std::string expert_segment;
  std::string tier_mode = "fast";
  uint64_t expert_cache_bytes = 0;
  int admit_per_step = 32;
  bool expert_cache_gate = true;   // the cache's admission gate (CudaEngineOptions)
  std::string expert_stats;        // routing-statistics file for the cache's warm start
  int64_t staging_min_rows = 512;  // prefill staging (CudaEngineOptions)
  int staging_slots = -1;
};

// A stable name (PCI bus id) of every CUDA device this process sees, in device order; empty
// without the CUDA backend or a GPU.
std::vector<std::string> gpu_device_ids();

// "auto" → "cuda" when this build has the CUDA backend and a GPU is present, else "cpu".
// Throws ft::Error for "cuda" without either, or an unknown name.
std::string resolve_backend(const std::string& requested);

// The engine over `w` (which must outlive a CPU engine; a CUDA engine copies what it needs to
// the GPU during construction). `experts`: routed experts elsewhere (null: in `w`).
std::unique_ptr<Engine> make_engine(const ModelWeights& w, ExpertBackend* experts, const EngineConfig& c);

}  // namespace ft::worker
