#include "gpu-worker/backends/cuda/engine/cuda_engine.h"

#include <algorithm>
#include <cstring>
#include <iostream>

#include "gpu-worker/backends/cuda/core/cuda_check.h"
#include "gpu-worker/backends/cuda/core/env_policy.h"
#include "gpu-worker/backends/cuda/core/stream_memops.h"
#include "gpu-worker/backends/cuda/engine/decode_graphs.h"
#include "gpu-worker/backends/cuda/engine/device_model.h"
#include "gpu-worker/backends/cuda/engine/expert_tier.h"
#include "gpu-worker/backends/cuda/engine/forward.h"
#include "gpu-worker/backends/cuda/engine/gpu_sampler.h"
#include "gpu-worker/backends/cuda/engine/sequence_pool.h"
#include "gpu-worker/backends/cuda/engine/step_buffers.h"
#include "gpu-worker/backends/cuda/engine/tier_split.h"

namespace ft::cuda {

struct CudaEngine::Seq {
  int slot = -1;
  SequenceSpec spec;
  int64_t length = 0;
};

namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// A quantized checkpoint: an EXL3 linear in this process, or a quantization_config (which also
// covers a checkpoint whose only quantized linears are routed experts living on a remote tier).
bool any_quantized(const ModelWeights& w) {
  if (!w.cfg.quantization_config_json.empty()) return true;
  auto q = [](const DenseLinear& l) { return l.exl3 != nullptr; };
  for (const LayerWeights& L : w.layers) {
    if (L.kda && (q(L.kda->q) || q(L.kda->o))) return true;
    if (L.mla && (q(L.mla->q_a) || q(L.mla->o))) return true;
    if (L.dense && q(L.dense->gate)) return true;
    if (L.moe && (q(L.moe->shared.gate) || (!L.moe->experts.empty() && q(L.moe->experts[0].gate)))) return true;
  }
  return false;
}

bool resolve_fp32(const std::string& p, const ModelWeights& w) {
  if (p == "fp32") return true;
  if (p == "fp16") return false;
  if (p == "auto") return !any_quantized(w);
  throw Error("unknown precision '" + p + "' (auto, fp32 or fp16)");
}

bool experts_present(const ModelWeights& w) {
  for (const LayerWeights& L : w.layers)
    if (L.moe && L.moe->experts.empty()) return false;
  return true;
}

}  // namespace

CudaEngine::CudaEngine(const ModelWeights& w, ExpertBackend* host_experts, const CudaEngineOptions& o)
    : opts_(o), cfg_(w.cfg), host_experts_(host_experts) {
  dev_ = use_device(o.device);
  FT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  FT_CUDA_CHECK(cudaEventCreateWithFlags(&forward_done_, cudaEventBlockingSync | cudaEventDisableTiming));
  budget_ = std::make_unique<VramBudget>(o.vram_budget_bytes, o.poison_vram);
  if (!experts_present(w) && !host_experts_ && o.expert_segment.empty())
    throw Error("the CUDA engine got a model without routed experts and no expert tier to compute them");
  try {
    model_ = upload_model(w, *budget_, resolve_fp32(o.precision, w));
  } catch (const VramExhausted& e) {
    throw VramExhausted(std::string("the model's weights do not fit this GPU's budget: ") + e.what());
  }
  StepLimits lim;
  lim.max_tokens = std::max<int64_t>(o.max_tokens_per_step, 1);
  lim.max_logit_rows = std::max<int64_t>(o.max_sequences, 64);
  lim.max_pools = std::max<int64_t>(o.context_size / std::max<int64_t>(cfg_.index_kpool, 1), 1);
  bufs_ = std::make_unique<StepBuffers>();
  try {
    bufs_->allocate(*model_, lim, *budget_);
  } catch (const VramExhausted& e) {
    throw VramExhausted(std::string("no room for the activations of a ") + std::to_string(lim.max_tokens) +
                        "-token step (lower --chunk-size): " + e.what());
  }
  // KDA states of every slot, then as many cache blocks as the rest of the budget holds (no more
  // than every slot at full context can use).
  const uint64_t slot_bytes = SequencePool::slot_bytes(cfg_) * static_cast<uint64_t>(o.max_sequences);
  const uint64_t block_bytes = SequencePool::block_bytes(cfg_, model_->fp32);
  const int64_t bt = kPoolsPerBlock * cfg_.index_kpool;
  // Remote EXL3 experts: read from the cpu-expert-worker's segment by the GPU, the hot ones
  // cached in VRAM (what the budget leaves once every slot's state and full-context KV cache
  // are set aside, unless --expert-cache-gb says otherwise).
  // fp32 precision keeps the reference's arithmetic for the routed experts too: the CPU tier's
  // exact kernels, not the zero-copy kernel (fp16 activations).
  const tiers::TierMode mode = tiers::parse_tier_mode(o.tier_mode);
  if (!experts_present(w) && !o.expert_segment.empty() && model_->fp32)
    std::cerr << "cuda engine: fp32 precision: routed experts go to the CPU tier (exact)" << std::endl;
  if (!experts_present(w) && !o.expert_segment.empty() && !model_->fp32) {
    // A bad statistics file is the user's error, refused here (naming the file), not a reason
    // to run without the tier.
    std::vector<std::vector<uint64_t>> warm_counts;
    if (!o.expert_stats.empty())
      warm_counts = tiers::read_routing_stats(o.expert_stats, static_cast<int>(cfg_.moe_layer_count()),
                                              static_cast<int>(cfg_.n_routed_experts));
    std::string why;
    auto seg = ipc::ExpertSegment::attach(o.expert_segment, "", &why);
    if (!seg) {
      std::cerr << "cuda engine: expert segment " << o.expert_segment << " not usable (" << why
                << "); routed experts go to the CPU tier" << std::endl;
    } else {
      try {
        ExpertTierOptions to;
        const uint64_t kv_full =
            block_bytes * static_cast<uint64_t>(o.max_sequences) * static_cast<uint64_t>(ceil_div(o.context_size, bt));
        to.cache_bytes = o.expert_cache_bytes;
        to.auto_cache = o.expert_cache_bytes == 0 && o.auto_expert_cache;
        to.keep_free = slot_bytes + kv_full + o.reserve_bytes + (64ull << 20);
        to.admit_per_step = o.admit_per_step;
        to.cache_policy.frequency_gate = o.expert_cache_gate && !env_off("FLASHTIER_CACHE_GATE");
        to.warm_counts = std::move(warm_counts);
        to.warm_source = o.expert_stats;
        to.max_tokens = lim.max_tokens;
        to.forced_routes = o.forced_routes;
        to.staging_min_rows = o.staging_min_rows;
        to.staging_slots = o.staging_slots;
        tier_ = std::make_unique<GpuExpertTier>(cfg_, std::move(*seg), to, *budget_, stream_);
        if (mode != tiers::TierMode::Exact && host_experts_ && !stream_memops_available()) {
          std::cerr << "cuda engine: --tier-mode " << o.tier_mode
                    << ": this driver has no stream memory operations to hand misses to the CPU tier; running exact"
                    << std::endl;
        } else if (mode != tiers::TierMode::Exact && host_experts_) {
          TierSplitOptions so;
          so.mode = mode;
          so.max_rows = o.split_max_rows;
          so.calibrate = o.calibrate_split;
          so.freeze_rates = o.freeze_split_rates;
          so.rates = o.split_rates;
          split_ = std::make_unique<CpuTierSplit>(cfg_, *tier_, *host_experts_, so, *budget_, stream_);
        } else if (mode != tiers::TierMode::Exact) {
          std::cerr << "cuda engine: --tier-mode " << o.tier_mode << " without a CPU tier; running exact" << std::endl;
        }
      } catch (const std::exception& e) {
        split_.reset();
        tier_.reset();
        std::cerr << "cuda engine: zero-copy experts unavailable (" << e.what() << "); routed experts go to the CPU tier"
                  << std::endl;
      }
    }
  }
  int64_t blocks = 0;
  if (block_bytes > 0) {
    const uint64_t avail = budget_->available();
    const uint64_t need_fixed = slot_bytes + o.reserve_bytes + (1u << 20);
    if (avail <= need_fixed + block_bytes)
      throw VramExhausted("no room for the KV cache: " + std::to_string(avail >> 20) + " MiB left after weights and " +
                          "activations, the sequence states need " + std::to_string(need_fixed >> 20) + " MiB");
    blocks = static_cast<int64_t>((avail - need_fixed) / block_bytes);
    blocks = std::min<int64_t>(blocks, static_cast<int64_t>(o.max_sequences) * ceil_div(o.context_size, bt));
  }
  if (!experts_present(w) && !host_experts_ && !tier_)
    throw Error("the routed experts are neither in this process nor readable from segment " + o.expert_segment);
  pool_ = std::make_unique<SequencePool>(cfg_, o.max_sequences, blocks, o.context_size, *budget_, model_->fp32);
  fwd_ = std::make_unique<ForwardPass>(*model_, *pool_, *bufs_, experts_present(w) ? nullptr : host_experts_);
  fwd_->set_expert_tier(tier_.get());
  fwd_->set_tier_split(split_.get());
  const bool branches = o.branches && !env_off("FLASHTIER_BRANCHES");
  fwd_->set_branches(branches);
  if (!branches) std::cerr << "cuda engine: one stream per step (no side branches)" << std::endl;
  graphs_ = std::make_unique<DecodeGraphs>(*budget_);
  sampler_ = std::make_unique<GpuSampler>(o.max_sequences, cfg_.vocab_size, lim.max_logit_rows, *budget_);
  host_rows_len_ = 3 * lim.max_tokens + lim.max_logit_rows;
  FT_CUDA_CHECK(cudaMallocHost(&host_rows_, static_cast<size_t>(host_rows_len_) * sizeof(int32_t)));
  // The whole device, not only stream_: the uploads (cudaMemcpy from pageable memory may return
  // before its DMA is done) and cudaMemsets above ran on the legacy stream, which does not order
  // the non-blocking stream_ the steps run on.
  FT_CUDA_CHECK(cudaDeviceSynchronize());
  std::cerr << "cuda engine: " << dev_.summary() << "; " << (model_->fp32 ? "fp32" : "fp16") << " precision; VRAM "
            << budget_->report() << "; " << blocks << " cache blocks of " << bt << " tokens" << std::endl;
}

CudaEngine::~CudaEngine() {
  if (stream_) cudaStreamSynchronize(stream_);
  graphs_.reset();
  fwd_.reset();
  split_.reset();
  tier_.reset();
  if (host_rows_) cudaFreeHost(host_rows_);
  if (forward_done_) cudaEventDestroy(forward_done_);
  if (stream_) cudaStreamDestroy(stream_);
}

void CudaEngine::set_layer_probe(std::function<void(int64_t, const StepBuffers&, int64_t, cudaStream_t)> p) {
  probing_ = static_cast<bool>(p);  // probed steps run eagerly
  fwd_->set_layer_probe(std::move(p));
}

GraphShape CudaEngine::decode_graph_shape(int rows) const { return graphs_ ? graphs_->shape(rows, 0) : GraphShape{}; }

void CudaEngine::set_profile(OpProfile* p) {
  fwd_->set_profile(p);
  profiling_ = p != nullptr;
}

bool CudaEngine::fp32() const { return model_->fp32; }

int64_t CudaEngine::max_tokens_per_sequence() const { return pool_->max_tokens_per_sequence(); }

uint64_t CudaEngine::open(const SequenceSpec& spec) {
  if (spec.top_logprobs < 0 || spec.top_logprobs > 20) throw Error("top_logprobs must be in [0, 20]");
  const int slot = pool_->open(std::max<int64_t>(spec.max_tokens, 1), stream_);
  sampler_->open(slot, spec, stream_);
  auto s = std::make_unique<Seq>();
  s->slot = slot;
  s->spec = spec;
  const uint64_t id = next_++;
  seqs_.emplace(id, std::move(s));
  return id;
}

void CudaEngine::close(uint64_t seq) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return;
  pool_->close(it->second->slot);
  seqs_.erase(it);
}

void CudaEngine::step(std::span<const StepItem> items, std::vector<StepResult>& results) {
  // Everything that can be refused is checked before any state changes.
  int64_t N = 0;
  std::vector<Seq*> seq(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    auto it = seqs_.find(items[i].seq);
    if (it == seqs_.end()) throw Error("step: sequence " + std::to_string(items[i].seq) + " is not open");
    seq[i] = it->second.get();
    for (size_t j = 0; j < i; ++j)
      if (seq[j] == seq[i]) throw Error("step: a sequence appears twice in one step");
    for (int32_t t : items[i].tokens)
      if (t < 0 || t >= cfg_.vocab_size)
        throw Error("token id " + std::to_string(t) + " is outside the vocabulary [0, " +
                    std::to_string(cfg_.vocab_size) + ")");
    const int64_t n = static_cast<int64_t>(items[i].tokens.size());
    if (seq[i]->length + n > std::max<int64_t>(seq[i]->spec.max_tokens, 1))
      throw EngineFull("sequence " + std::to_string(items[i].seq) + " would grow to " +
                       std::to_string(seq[i]->length + n) + " tokens, past the " +
                       std::to_string(seq[i]->spec.max_tokens) + " it was opened for");
    N += n;
  }
  if (N > bufs_->lim.max_tokens)
    throw Error("step of " + std::to_string(N) + " tokens exceeds this engine's " +
                std::to_string(bufs_->lim.max_tokens) + "-token steps");
  run_step(items, results);
}

void CudaEngine::run_step(std::span<const StepItem> items, std::vector<StepResult>& results) {
  const int64_t V = cfg_.vocab_size, R = bufs_->lim.max_logit_rows, T = bufs_->lim.max_tokens;
  results.assign(items.size(), {});
  // Decode rows first, then prefill spans (forward.h).
  std::vector<size_t> order;
  auto is_decode = [&](const StepItem& it) { return !it.prompt && it.tokens.size() == 1; };
  for (size_t i = 0; i < items.size(); ++i)
    if (is_decode(items[i])) order.push_back(i);
  const int64_t decode_rows = static_cast<int64_t>(order.size());
  for (size_t i = 0; i < items.size(); ++i)
    if (!is_decode(items[i]) && !items[i].tokens.empty()) order.push_back(i);

  int32_t* tok = host_rows_;
  int32_t* slot = host_rows_ + T;
  int32_t* pos = host_rows_ + 2 * T;
  int32_t* lrows = host_rows_ + 3 * T;
  StepPlan plan;
  plan.decode_rows = decode_rows;
  // Logit rows, in order: (item, token row); the last one of a sampling item is sampled.
  struct LogitRow {
    size_t item;
    int32_t row;
    bool sample;
  };
  std::vector<LogitRow> want;
  std::vector<int64_t> row0(items.size(), 0);
  int64_t r = 0;
  for (size_t i : order) {
    const StepItem& it = items[i];
    Seq& s = *seqs_.at(it.seq);
    const int64_t n = static_cast<int64_t>(it.tokens.size());
    pool_->cover(s.slot, s.length + n, stream_);
    row0[i] = r;
    for (int64_t t = 0; t < n; ++t) {
      tok[r + t] = it.tokens[t];
      slot[r + t] = s.slot;
      pos[r + t] = static_cast<int32_t>(s.length + t);
    }
    if (!is_decode(it)) plan.prefill.push_back({r, n, s.slot, s.length});
    if (it.logits == LogitsWanted::All)
      for (int64_t t = 0; t < n; ++t) want.push_back({i, static_cast<int32_t>(r + t), it.sample && t == n - 1});
    else if (it.sample || it.logits == LogitsWanted::Last)
      want.push_back({i, static_cast<int32_t>(r + n - 1), it.sample});
    r += n;
  }
  plan.rows = r;
  if (plan.rows == 0) return;
  for (size_t i = 0; i < want.size() && static_cast<int64_t>(i) < R; ++i) lrows[i] = want[i].row;
  plan.logit_rows = std::min<int64_t>(static_cast<int64_t>(want.size()), R);
  StepBuffers& b = *bufs_;
  FT_CUDA_CHECK(cudaMemcpyAsync(b.tokens, tok, plan.rows * 4, cudaMemcpyHostToDevice, stream_));
  FT_CUDA_CHECK(cudaMemcpyAsync(b.slot, slot, plan.rows * 4, cudaMemcpyHostToDevice, stream_));
  FT_CUDA_CHECK(cudaMemcpyAsync(b.pos, pos, plan.rows * 4, cudaMemcpyHostToDevice, stream_));
  FT_CUDA_CHECK(cudaMemcpyAsync(b.logit_rows, lrows, plan.logit_rows * 4, cudaMemcpyHostToDevice, stream_));
  for (size_t i : order)
    if (items[i].prompt)
      sampler_->add_prompt(seqs_.at(items[i].seq)->slot, b.tokens + row0[i],
                           static_cast<int64_t>(items[i].tokens.size()), stream_);

  // Prefill staging of the zero-copy experts (large chunks only; never inside a graph).
  if (tier_) tier_->begin_step(plan.rows, stream_);
  const bool split = split_ && split_->begin_step(plan.rows);
  const bool graph = opts_.graphs && !profiling_ && !probing_ && fwd_->graph_safe() && decode_rows == plan.rows &&
                     plan.rows <= opts_.max_graph_batch && plan.logit_rows == plan.rows &&
                     std::all_of(items.begin(), items.end(),
                                 [](const StepItem& it) { return it.sample && it.logits == LogitsWanted::None; });
  // The split's relay serves the step's MoE layers from here until the stream is synchronised;
  // a step that fails on the way lets the stream finish what it has and stops the relay.
  if (split) split_->arm(plan.rows);
  try {
    if (graph &&
        graphs_->run(static_cast<int>(plan.rows), split ? 1 : 0, stream_, [&](cudaStream_t s) { fwd_->run(plan, s); })) {
      ++graph_steps_;
    } else {
      fwd_->run(plan, stream_);
      ++eager_steps_;
    }
    if (split) {
      // The sampler below synchronises the stream (a spinning wait by default); with the CPU
      // tier's threads busy through the step, the host sleeps until the forward pass is done.
      FT_CUDA_CHECK(cudaEventRecord(forward_done_, stream_));
      FT_CUDA_CHECK(cudaEventSynchronize(forward_done_));
    }

    // Logits pass by pass (R rows each): sampled rows go to the sampler, requested rows to the host.
    for (size_t first = 0; first < want.size(); first += static_cast<size_t>(R)) {
      const size_t n = std::min<size_t>(want.size() - first, static_cast<size_t>(R));
      if (first > 0) {
        FT_CUDA_CHECK(cudaStreamSynchronize(stream_));  // the pinned row list is rewritten below
        for (size_t i = 0; i < n; ++i) lrows[i] = want[first + i].row;
        FT_CUDA_CHECK(cudaMemcpyAsync(b.logit_rows, lrows, n * 4, cudaMemcpyHostToDevice, stream_));
        fwd_->logits(plan.rows, static_cast<int64_t>(n), stream_);
      }
      for (size_t i = 0; i < n; ++i) {
        const LogitRow& w = want[first + i];
        if (items[w.item].logits == LogitsWanted::None) continue;
        std::vector<float>& dst = results[w.item].logits;
        const size_t at = dst.size();
        dst.resize(at + static_cast<size_t>(V));
        FT_CUDA_CHECK(cudaMemcpyAsync(dst.data() + at, b.logits + static_cast<int64_t>(i) * V, V * sizeof(float),
                                      cudaMemcpyDeviceToHost, stream_));
      }
      // Sampled rows, in runs of consecutive logit rows.
      for (size_t i = 0; i < n;) {
        if (!want[first + i].sample) {
          ++i;
          continue;
        }
        size_t j = i;
        std::vector<int> slots;
        std::vector<StepResult*> outs;
        while (j < n && want[first + j].sample) {
          slots.push_back(seqs_.at(items[want[first + j].item].seq)->slot);
          outs.push_back(&results[want[first + j].item]);
          ++j;
        }
        sampler_->sample(b.logits + static_cast<int64_t>(i) * V, slots, outs, stream_);
        i = j;
      }
    }
    FT_CUDA_CHECK(cudaStreamSynchronize(stream_));
  } catch (...) {
    if (split) split_->abandon(stream_);
    throw;
  }
  if (split) split_->end_step();
  for (size_t i : order) seqs_.at(items[i].seq)->length += static_cast<int64_t>(items[i].tokens.size());
  // Cache upkeep from this step's picks; large prefill chunks admit nothing (they touch almost
  // every expert once and would flush the hot set).
  if (split_) split_->after_step();
  if (tier_) tier_->after_step(plan.rows, plan.rows <= 64, stream_);
}

EngineStats CudaEngine::stats() const {
  EngineStats st;
  st.backend = dev_.summary();
  const auto by = budget_->by_category();
  for (int i = 0; i < kVramCategories; ++i)
    st.memory.emplace_back(vram_category_name(static_cast<VramCategory>(i)), by[i]);
  st.memory_budget = budget_->budget();
  st.counters = {{"decode_graph_steps", graph_steps_}, {"eager_steps", eager_steps_}};
  if (tier_) {
    const ExpertTierStats t = tier_->stats();
    st.counters.insert(st.counters.end(), {{"expert_cache_hits", t.cache.hits},
                                           {"expert_cache_misses", t.cache.misses},
                                           {"expert_cache_admissions", t.cache.admissions},
                                           {"expert_cache_evictions", t.cache.evictions},
                                           {"expert_cache_slots", static_cast<uint64_t>(t.slots)},
                                           {"expert_copies_pending", t.pending},
                                           {"expert_blocks_copied", t.copied_blocks},
                                           {"expert_staging_slots", static_cast<uint64_t>(t.staging_slots)},
                                           {"expert_staged_steps", t.staged_steps},
                                           {"expert_staged_blocks", t.staged_blocks}});
  }
  if (split_) {
    // The split's totals (times in µs) and its current cost model (ns, so integers keep detail).
    const TierSplitStats t = split_->stats();
    auto us = [](double v) { return static_cast<uint64_t>(v < 0 ? 0 : v); };
    auto ns = [](double v) { return static_cast<uint64_t>(v < 0 ? 0 : v * 1e3); };
    st.counters.insert(st.counters.end(), {{"tier_split_layers", t.layers},
                                           {"tier_cpu_experts", t.cpu_experts},
                                           {"tier_zero_copy_experts", t.zero_copy_experts},
                                           {"tier_hit_experts", t.hit_experts},
                                           {"tier_cpu_us", us(t.cpu_us)},
                                           {"tier_gpu_us", us(t.gpu_us)},
                                           {"tier_cpu_wait_us", us(t.wait_us)},
                                           {"tier_predicted_us", us(t.predicted_us)},
                                           {"tier_cpu_failures", t.failures},
                                           {"tier_cpu_probes", t.probes},
                                           {"tier_cpu_up", t.cpu_up ? 1u : 0u},
                                           {"tier_rate_cpu_expert_ns", ns(t.rates.cpu_expert)},
                                           {"tier_rate_cpu_row_ns", ns(t.rates.cpu_row)},
                                           {"tier_rate_handoff_ns", ns(t.rates.handoff)},
                                           {"tier_rate_zero_copy_expert_ns", ns(t.rates.zc_expert)},
                                           {"tier_rate_zero_copy_row_ns", ns(t.rates.zc_row)},
                                           {"tier_rate_hit_expert_ns", ns(t.rates.hit_expert)}});
  }
  return st;
}

bool CudaEngine::write_routing_stats(const std::string& path) {
  if (!tier_) return false;
  tier_->write_stats(path);
  return true;
}

}  // namespace ft::cuda
