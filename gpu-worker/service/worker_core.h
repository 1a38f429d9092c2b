#pragma once
// Everything a gpu-worker serves from: the model (loaded in the background so Health can say
// LOADING), its tokenizer, the expert tier and the scheduler.
#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "gpu-worker/engine/scheduler.h"
#include "shared/engine/engine.h"
#include "gpu-worker/engine/device_claim.h"
#include "shared/engine/expert_backend.h"
#include "shared/engine/weights.h"
#include "shared/grammar/vocabulary.h"
#include "shared/text/tokenizer.h"

namespace ft::worker {

struct WorkerOptions {
  std::string model_dir;
  std::string served_model_name;  // default: the model folder's name
  std::string experts = "local";  // "local" or an expert-tier address (see make_expert_backend)
  std::string backend = "auto";   // "cpu", "cuda", or "auto" (cuda when a GPU is present)
  int device = 0;                 // CUDA device index; −1 (--device auto): the first GPU no other
                                  // gpu-worker holds (engine/device_claim.h)
  std::string device_lock_dir = "/dev/shm";  // where --device auto's lock files live
  double vram_budget_gb = 0;      // 0: the card's free memory
  double prefix_cache_gb = 2;     // prefix-cache snapshots (0: off)
  std::string tier_mode = "fast"; // remote experts on the CUDA backend: fast | exact | cpu
  std::string precision = "auto"; // CUDA backend: auto | fp32 | fp16 (CudaEngineOptions::precision)
  double expert_cache_gb = 0;     // VRAM expert cache (0: what the VRAM budget leaves)
  int admit_per_step = 32;        // expert blocks copied into the cache per step at most
  bool expert_cache_gate = true;  // a miss replaces the cache's victim only if used as often lately
  std::string expert_stats;       // routing-statistics file the VRAM expert cache warm-starts from
  std::string expert_stats_out;   // written at shutdown: the cache's use counts (same format)
  int64_t staging_min_rows = 512; // prefill chunks of at least this many rows stage their experts
  int staging_slots = -1;         // cache slots staging borrows (−1: two MoE layers' worth, ≤ 3/4 of the cache; 0: off)
  int tier_wait_s = 300;          // how long a CUDA worker waits at load for the expert tier
  int64_t prefix_snapshot_stride = 4096;  // also snapshot long prefills every this many tokens
  SchedulerOptions scheduler;
  int64_t context_size = 0;       // 0: min(model max, 32768)
};

class WorkerCore {
 public:
  enum class State { Loading, Ready, Failed };
  explicit WorkerCore(WorkerOptions o);
  ~WorkerCore();

  State state() const { return state_.load(); }
  std::string load_error() const;
  // True when the expert tier answered its last exchange (or is in-process).
  bool experts_healthy();

  // Valid once Ready.
  Scheduler& scheduler() { return *scheduler_; }
  const ModelConfig& config() const { return engine_->config(); }
  Engine& engine() { return *engine_; }
  const text::Tokenizer* tokenizer() const { return tokenizer_ ? &*tokenizer_ : nullptr; }
  const std::vector<int32_t>& eos_token_ids() const { return eos_; }
  // The tokenizer's vocabulary for grammar constraints, built on first use (null without a
  // tokenizer). Ids run to the model's vocab_size.
  std::shared_ptr<const grammar::Vocabulary> vocabulary() const;
  const WorkerOptions& options() const { return opts_; }
  int64_t context_size() const { return opts_.scheduler.context_size; }
  std::string model_name() const;

 private:
  void load();
  mutable std::once_flag vocab_once_;
  mutable std::shared_ptr<const grammar::Vocabulary> vocab_;
  WorkerOptions opts_;
  std::atomic<State> state_{State::Loading};
  mutable std::mutex m_;
  std::string error_;
  DeviceClaim device_claim_;  // --device auto: held for the process's life
  std::unique_ptr<ModelWeights> weights_;
  std::unique_ptr<ExpertBackend> experts_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<Scheduler> scheduler_;
  std::optional<text::Tokenizer> tokenizer_;
  std::vector<int32_t> eos_;
  std::thread loader_;
};

// EOS ids from generation_config.json (int or list), else config.json's; empty when neither.
std::vector<int32_t> read_eos_ids(const std::string& model_dir);

}  // namespace ft::worker
