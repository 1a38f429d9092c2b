#include "gpu-worker/service/worker_core.h"

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "gpu-worker/engine/engine_factory.h"
#include "gpu-worker/service/expert_link.h"
#include "shared/core/error.h"

namespace ft::worker {

namespace fs = std::filesystem;

std::vector<int32_t> read_eos_ids(const std::string& dir) {
  std::vector<int32_t> out;
  for (const char* f : {"generation_config.json", "config.json"}) {
    std::ifstream in(fs::path(dir) / f);
    if (!in) continue;
    nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
    if (j.is_discarded()) throw Error((fs::path(dir) / f).string() + ": bad JSON");
    const nlohmann::json* e = nullptr;
    if (j.contains("eos_token_id")) e = &j["eos_token_id"];
    else if (j.contains("text_config") && j["text_config"].contains("eos_token_id")) e = &j["text_config"]["eos_token_id"];
    if (!e || e->is_null()) continue;
    if (e->is_number_integer()) out.push_back(e->get<int32_t>());
    else if (e->is_array())
      for (const auto& x : *e)
        if (x.is_number_integer()) out.push_back(x.get<int32_t>());
    if (!out.empty()) return out;
  }
  return out;
}

WorkerCore::WorkerCore(WorkerOptions o) : opts_(std::move(o)) {
  loader_ = std::thread([this] { load(); });
}

WorkerCore::~WorkerCore() {
  loader_.join();
  scheduler_.reset();  // stops the engine thread before the engine and weights go
  // The engine is idle now (its thread has stopped): its routing statistics for the next start.
  if (!opts_.expert_stats_out.empty() && engine_) {
    try {
      if (engine_->write_routing_stats(opts_.expert_stats_out))
        std::cerr << "gpu-worker: routing statistics written to " << opts_.expert_stats_out << std::endl;
      else
        std::cerr << "gpu-worker: --expert-stats-out: this engine keeps no expert cache; nothing written" << std::endl;
    } catch (const std::exception& e) {
      std::cerr << "gpu-worker: --expert-stats-out: " << e.what() << std::endl;
    }
  }
}

void WorkerCore::load() {
  try {
    const bool local = opts_.experts == "local";
    const std::string backend = resolve_backend(opts_.backend);
    LoadOptions lo;
    lo.routed_experts = local;
    lo.keep_quantized = backend == "cuda";
    weights_ = std::make_unique<ModelWeights>(load_model(opts_.model_dir, lo));
    const ModelConfig c = weights_->cfg;
    if (fs::exists(fs::path(opts_.model_dir) / "tokenizer.json"))
      tokenizer_ = text::Tokenizer::from_file(fs::path(opts_.model_dir) / "tokenizer.json");
    eos_ = read_eos_ids(opts_.model_dir);
    if (!local) experts_ = make_expert_backend(opts_.experts, c);
    SchedulerOptions so = opts_.scheduler;
    so.context_size = opts_.context_size > 0 ? opts_.context_size
                                             : std::min<int64_t>(c.max_position_embeddings, 32768);
    EngineConfig ec;
    ec.backend = backend;
    ec.device = opts_.device;
    if (backend == "cuda" && opts_.device < 0) {
      device_claim_ = DeviceClaim::first_free(gpu_device_ids(), opts_.device_lock_dir);
      ec.device = device_claim_.index();
      std::cerr << "gpu-worker: --device auto took CUDA device " << ec.device << " (" << device_claim_.path() << ")"
                << std::endl;
    }
    ec.vram_budget_bytes = static_cast<uint64_t>(opts_.vram_budget_gb * 1073741824.0);
    ec.max_sequences = so.max_batch_size;
    ec.max_tokens_per_step = so.chunk_size + so.max_batch_size;
    ec.context_size = so.context_size;
    ec.prefix_cache_bytes = static_cast<uint64_t>(opts_.prefix_cache_gb * 1073741824.0);
    ec.prefix_snapshot_stride = opts_.prefix_snapshot_stride;
    ec.tier_mode = opts_.tier_mode;
    ec.precision = opts_.precision;
    ec.expert_cache_bytes = static_cast<uint64_t>(opts_.expert_cache_gb * 1073741824.0);
    ec.admit_per_step = opts_.admit_per_step;
    ec.expert_cache_gate = opts_.expert_cache_gate;
    ec.expert_stats = opts_.expert_stats;
    ec.staging_min_rows = opts_.staging_min_rows;
    ec.staging_slots = opts_.staging_slots;
    if (backend == "cuda" && experts_) {
      // The GPU reads the experts itself from the tier's segment (its VRAM cache, zero-copy
      // misses, and in fast/cpu mode the CPU tier's share): wait for the tier (it may still be
      // building its segment) up to --tier-wait-s, else route every MoE layer through it.
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(opts_.tier_wait_s);
      while (!experts_->healthy() && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(std::chrono::milliseconds(500));
      ec.expert_segment = expert_segment_of(*experts_);
      std::cerr << "gpu-worker: expert segment for GPU reads: "
                << (ec.expert_segment.empty() ? "none (tier not on this host or not answering)" : ec.expert_segment)
                << std::endl;
    }
    engine_ = make_engine(*weights_, experts_.get(), ec);
    if (backend == "cuda") weights_.reset();  // everything lives on the GPU now
    std::cerr << "gpu-worker: backend " << engine_->stats().backend << std::endl;
    so.eos_token_ids = eos_;
    opts_.scheduler = so;
    scheduler_ = std::make_unique<Scheduler>(*engine_, so);
    state_ = State::Ready;
    std::cerr << "gpu-worker: model " << opts_.model_dir << " ready (" << c.num_hidden_layers << " layers, vocab "
              << c.vocab_size << ", context " << so.context_size << ", experts " << opts_.experts << ")"
              << std::endl;
  } catch (const std::exception& e) {
    std::lock_guard<std::mutex> l(m_);
    error_ = e.what();
    state_ = State::Failed;
    std::cerr << "gpu-worker: loading failed: " << e.what() << std::endl;
  }
}

std::string WorkerCore::load_error() const {
  std::lock_guard<std::mutex> l(m_);
  return error_;
}

bool WorkerCore::experts_healthy() { return !experts_ || experts_->healthy(); }

std::string WorkerCore::model_name() const {
  if (!opts_.served_model_name.empty()) return opts_.served_model_name;
  return fs::path(opts_.model_dir).filename().string().empty() ? fs::path(opts_.model_dir).parent_path().filename().string()
                                                               : fs::path(opts_.model_dir).filename().string();
}

std::shared_ptr<const grammar::Vocabulary> WorkerCore::vocabulary() const {
  std::call_once(vocab_once_, [&] {
    if (tokenizer_) vocab_ = grammar::Vocabulary::from_tokenizer(*tokenizer_, static_cast<size_t>(config().vocab_size));
  });
  return vocab_;
}

}  // namespace ft::worker
