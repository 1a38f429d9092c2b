#include "gpu-worker/engine/engine_factory.h"

#include "shared/core/error.h"
#include "shared/engine/cpu_engine.h"

#ifdef FLASHTIER_HAVE_CUDA
#include "gpu-worker/backends/cuda/core/device.h"
#include "gpu-worker/backends/cuda/engine/cuda_engine.h"
#endif

namespace ft::worker {

std::vector<std::string> gpu_device_ids() {
  std::vector<std::string> ids;
#ifdef FLASHTIER_HAVE_CUDA
  for (int i = 0; i < cuda::device_count(); ++i) ids.push_back(cuda::device_pci_id(i));
#endif
  return ids;
}

std::string resolve_backend(const std::string& requested) {
#ifdef FLASHTIER_HAVE_CUDA
  const bool gpu = cuda::device_count() > 0;
#else
  const bool gpu = false;
#endif
  if (requested == "auto") return gpu ? "cuda" : "cpu";
  if (requested == "cpu") return "cpu";
  if (requested == "cuda") {
#ifndef FLASHTIER_HAVE_CUDA
    throw Error("--backend cuda: this build has no CUDA backend (nvcc was not found when it was configured)");
#else
    if (!gpu) throw Error("--backend cuda: no CUDA device is visible to this process");
    return "cuda";
#endif
  }
  throw Error("unknown backend '" + requested + "' (expected cpu, cuda or auto)");
}

std::unique_ptr<Engine> make_engine(const ModelWeights& w, ExpertBackend* experts, const EngineConfig& c) {
  if (c.backend == "cpu") {
    PrefixCacheOptions pc;
    pc.bytes = c.prefix_cache_bytes;
    pc.snapshot_stride = c.prefix_snapshot_stride;
    return std::make_unique<CpuEngine>(w, experts, c.max_sequences, pc);
  }
#ifdef FLASHTIER_HAVE_CUDA
  if (c.backend == "cuda") {
    cuda::CudaEngineOptions o;
    o.device = c.device;
    o.vram_budget_bytes = c.vram_budget_bytes;
    o.max_sequences = c.max_sequences;
    o.max_tokens_per_step = c.max_tokens_per_step;
    o.context_size = c.context_size;
    o.precision = c.precision;
    o.expert_segment = c.expert_segment;
    o.tier_mode = c.tier_mode;
    o.expert_cache_bytes = c.expert_cache_bytes;
    o.admit_per_step = c.admit_per_step;
    o.expert_cache_gate = c.expert_cache_gate;
    o.expert_stats = c.expert_stats;
    o.staging_min_rows = c.staging_min_rows;
    o.staging_slots = c.staging_slots;
    return std::make_unique<cuda::CudaEngine>(w, experts, o);
  }
#endif
  throw Error("backend '" + c.backend + "' is not available in this build");
}

}  // namespace ft::worker
