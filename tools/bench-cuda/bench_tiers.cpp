// flashtier-bench-tiers: the expert tiers at the real model's widths and depth (45 layers, 42 MoE
// layers × 288 experts = 12,096 expert identities, K=3 MUL1, vocab 154,880) under a VRAM budget
// (default 24 GB), against bounds the same run measures.
//
//   1. Bandwidths: HBM read, zero-copy read of the expert segment, H2D copy from it, CPU read of
//      it (T threads), CPU + zero-copy reading at once, and the exact CPU expert kernel's rate.
//   2. A synthetic EXL3 expert segment in /dev/shm (gpu-worker/tiers/synthetic_segment.h): the
//      identities map onto as many distinct blocks as the pool holds (--pool-gb, default 60% of
//      what /dev/shm and the free RAM allow), the pool many times the CPU's caches.
//   3. The CUDA engine on a synthetic EXL3 model of those widths (non-expert linears in VRAM,
//      routed experts from the segment: VRAM cache + zero-copy, `--tier-mode exact`), routing
//      forced from a trace: the documented synthetic generator (per-layer Zipf popularity shared by
//      all sequences, per-sequence temporal locality) or a recorded trace file (--trace).
//   4. Rows: decode C1…C8 at context 1k, decode C1 at the long context (32k), prefill 8k and 32k;
//      each with the hit rate it achieved, the bytes it read from HBM and over PCIe, the roofline
//      from the measured bandwidths and the ratio to it.
//
// Modes (--modes): exact (VRAM cache + zero-copy), fast (the misses split between zero-copy and
// the exact CPU tier by the engine's calibrated cost model) and cpu (the CPU tier computes every
// miss); the CPU tier is the cpu-expert-worker's kernels on the same segment behind the real shm
// ring, run in this process on --cpu-threads threads.
//
// Decode roofline: a step's HBM bytes / HBM bandwidth + its miss bytes at the mode's rate —
// zero-copy read (exact), the CPU kernel's rate (cpu), or both at once, capped by the combined
// host read (fast) — since a layer's misses cannot start before its attention, nor the next
// layer before them.
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "gpu-worker/backends/cuda/core/cuda_check.h"
#include "cpu-expert-worker/ring_tier.h"
#include "gpu-worker/backends/cuda/engine/cuda_engine.h"
#include "gpu-worker/backends/cuda/engine/expert_tier.h"
#include "gpu-worker/backends/cuda/engine/sequence_pool.h"
#include "gpu-worker/backends/cuda/engine/synthetic_model.h"
#include "gpu-worker/backends/cuda/exl3/exl3_linear.h"
#include "gpu-worker/experts/remote_experts.h"
#include "gpu-worker/tiers/routing_trace.h"
#include "gpu-worker/tiers/synthetic_segment.h"
#include "shared/exl3/expert_forward.h"
#include "shared/exl3/thread_pool.h"
#include "shared/ipc/expert_segment.h"
#include "shared/ipc/shm.h"
#include "shared/sampling/logit_compare.h"
#include "tools/bench-cuda/bench_util.h"
#include "tools/bench-cuda/hbm_probe.h"
#include "tools/bench-cuda/profile_table.h"

using namespace ft;
using namespace ft::cuda;

namespace {

using bench::median;
using bench::parse_list;

using clk = std::chrono::steady_clock;
double secs(clk::time_point a) { return std::chrono::duration<double>(clk::now() - a).count(); }

uint64_t mem_available_bytes() {
  std::ifstream f("/proc/meminfo");
  std::string k;
  uint64_t v = 0;
  std::string unit;
  while (f >> k >> v >> unit)
    if (k == "MemAvailable:") return v * 1024;
  return 0;
}

uint64_t shm_free_bytes() {
  struct statvfs s{};
  if (statvfs("/dev/shm", &s) != 0) return 0;
  return static_cast<uint64_t>(s.f_bavail) * s.f_frsize;
}

// GB/s of T threads summing `bytes` of host memory (each its own contiguous part).
double cpu_read_gbs(const uint8_t* p, uint64_t bytes, int T, double seconds, std::atomic<bool>* stop = nullptr) {
  std::atomic<uint64_t> total{0};
  std::vector<std::thread> th;
  const auto t0 = clk::now();
  const uint64_t part = bytes / static_cast<uint64_t>(T) / 64 * 64;
  for (int t = 0; t < T; ++t)
    th.emplace_back([&, t] {
      const auto* q = reinterpret_cast<const uint64_t*>(p + part * static_cast<uint64_t>(t));
      const uint64_t n = part / 8;
      uint64_t acc = 0, done = 0;
      while (secs(t0) < seconds && !(stop && stop->load())) {
        for (uint64_t i = 0; i < n; i += 8) acc += q[i] ^ q[i + 1] ^ q[i + 2] ^ q[i + 3] ^ q[i + 4] ^ q[i + 5] ^ q[i + 6] ^ q[i + 7];
        done += part;
      }
      total += done + (acc == 42);
    });
  for (auto& x : th) x.join();
  return static_cast<double>(total.load()) / secs(t0) / 1e9;
}

struct Bandwidths {
  double hbm = 0, zero_copy = 0, h2d = 0, cpu = 0, both_cpu = 0, both_gpu = 0, cpu_expert_gbs = 0, cpu_expert_us = 0;
};

// Routes of the next step: one synthetic stream per sequence (shared popularity), or a replayed
// trace where sequence b starts at b/B of the file.
class RouteSource {
 public:
  RouteSource(const tiers::TraceShape& shape, const tiers::SyntheticTraceOptions& o, const std::string& file, int streams)
      : shape_(shape) {
    if (!file.empty()) {
      tiers::TraceShape fs;
      recorded_ = tiers::read_trace(file, &fs);
      if (fs.layers != shape.layers || fs.experts != shape.experts || fs.top_k != shape.top_k)
        throw Error(file + ": trace shape " + std::to_string(fs.layers) + "×" + std::to_string(fs.experts) + " top-" +
                    std::to_string(fs.top_k) + " does not match the model");
      if (recorded_.empty()) throw Error(file + ": no tokens in the trace");
      for (int s = 0; s < streams; ++s) pos_.push_back(recorded_.size() * static_cast<size_t>(s) / streams);
    } else {
      for (int s = 0; s < streams; ++s) {
        tiers::SyntheticTraceOptions so = o;
        so.popularity_seed = o.seed;
        so.seed = o.seed * 1000 + static_cast<uint64_t>(s) + 1;
        gen_.emplace_back(shape, so);
      }
    }
  }
  // Writes `rows` consecutive tokens of stream `s` as rows row0… of host [layers][stride rows][top_k].
  void fill(int s, int64_t row0, int64_t rows, int64_t stride, std::vector<int32_t>& out) {
    const int TK = shape_.top_k;
    for (int64_t r = 0; r < rows; ++r) {
      tiers::TokenRoute t;
      if (!recorded_.empty()) {
        t = recorded_[pos_[s]];
        pos_[s] = (pos_[s] + 1) % recorded_.size();
      } else {
        t = gen_[s].next();
      }
      for (int l = 0; l < shape_.layers; ++l)
        for (int k = 0; k < TK; ++k) out[(l * stride + row0 + r) * TK + k] = t[l][k];
    }
  }

 private:
  tiers::TraceShape shape_;
  std::vector<tiers::SyntheticTrace> gen_;
  std::vector<tiers::TokenRoute> recorded_;
  std::vector<size_t> pos_;
};

struct Row {
  std::string what, mode;
  double ms = 0, tok_s = 0, hit = 0, hbm_gb = 0, pcie_gb = 0, bound_ms = 0;
  std::string split;  // fast/cpu: per split layer, experts on the CPU tier / zero-copy / VRAM hits
};

struct Setup {
  ModelConfig cfg;
  SyntheticExl3Model* model = nullptr;
  std::string segment;
  uint64_t budget = 0, expert_cache = 0;
  int admit = 32;
  tiers::SyntheticTraceOptions trace;
  std::string trace_file;
  uint64_t block_bytes = 0;
  Bandwidths bw;
  int steps = 32, warm = 128;
  int64_t chunk = 8192;  // tokens per prefill step (the engine's max_tokens_per_step)
  std::string mode = "exact";
  std::string label = "exact";        // the mode as the table names it (fast-eager: fast without decode graphs)
  bool graphs = true;                 // decode steps from CUDA graphs (a mode's -eager form: off)
  ExpertBackend* cpu_tier = nullptr;  // fast / cpu modes: the CPU tier over the ring
  bool poison_vram = false;           // --poison-vram: engines start on 0xFF bytes
  bool profile = false;               // --profile: one profiled decode step per batch (op groups)
};

void print_rows(const std::vector<Row>& rows) {
  std::printf("\n| run | mode | ms | tok/s | hit rate | HBM GB | miss GB | bound ms | of bound | split per layer: CPU / zero-copy / hits |\n"
              "|---|---|---|---|---|---|---|---|---|---|\n");
  for (const Row& r : rows)
    std::printf("| %s | %s | %.2f | %.1f | %.1f%% | %.2f | %.2f | %.2f | %.1f%% | %s |\n", r.what.c_str(), r.mode.c_str(),
                r.ms, r.tok_s, 100 * r.hit, r.hbm_gb, r.pcie_gb, r.bound_ms, 100 * r.bound_ms / std::max(r.ms, 1e-9),
                r.split.empty() ? "-" : r.split.c_str());
  std::fflush(stdout);
}

uint64_t counter(const CudaEngine& e, const std::string& name) {
  for (const auto& [n, v] : e.stats().counters)
    if (n == name) return v;
  return 0;
}

// Split counters between two stats snapshots, per split layer.
std::string split_summary(const CudaEngine& e, const std::vector<std::pair<std::string, uint64_t>>& before) {
  auto was = [&](const std::string& n) {
    for (const auto& [k, v] : before)
      if (k == n) return v;
    return uint64_t{0};
  };
  const double layers = static_cast<double>(counter(e, "tier_split_layers") - was("tier_split_layers"));
  if (layers <= 0) return "";
  auto per = [&](const std::string& n) { return (counter(e, n) - was(n)) / layers; };
  char b[320];
  std::snprintf(b, sizeof b,
                "%.2f / %.2f / %.2f (CPU %.0f µs, GPU %.0f µs, GPU waits %.0f µs, model %.0f µs; rates CPU %.0f + %.0f µs, "
                "zero-copy %.0f µs)",
                per("tier_cpu_experts"), per("tier_zero_copy_experts"), per("tier_hit_experts"), per("tier_cpu_us"),
                per("tier_gpu_us"), per("tier_cpu_wait_us"), per("tier_predicted_us"), counter(e, "tier_rate_cpu_expert_ns") / 1e3,
                counter(e, "tier_rate_handoff_ns") / 1e3, counter(e, "tier_rate_zero_copy_expert_ns") / 1e3);
  return b;
}

// One engine (max_seqs sequences of up to `context` tokens): decode rows for `batches` at
// `ctx`, then prefill rows for `prefills`.
CudaEngineOptions engine_options(const Setup& S, int max_seqs, int64_t context, int64_t chunk) {
  CudaEngineOptions o;
  o.vram_budget_bytes = S.budget;
  o.max_sequences = max_seqs;
  o.max_tokens_per_step = chunk;
  o.context_size = context;
  o.precision = "fp16";  // the tensor-core path (the product's, for EXL3 checkpoints)
  o.expert_segment = S.segment;
  o.tier_mode = S.mode;
  o.expert_cache_bytes = S.expert_cache;
  o.admit_per_step = S.admit;
  o.forced_routes = true;
  o.poison_vram = S.poison_vram;
  o.graphs = S.graphs;
  return o;
}

// The panel's noise floor: the CPU tier's answers with every value ×(1 ± ε), the sign from a hash
// of its place, so a pass shows how far ε-relative noise in the CPU tier's partials alone moves
// this model's next-token distributions (a random-weight model may amplify any rounding).
class PerturbedTier final : public ExpertBackend {
 public:
  PerturbedTier(ExpertBackend& inner, int64_t width, double eps) : inner_(inner), width_(width), eps_(eps) {}
  void compute(int64_t layer, const float* a, int64_t n, const std::vector<Routing>& routes, float* out,
               exl3::Operands operands) override {
    inner_.compute(layer, a, n, routes, out, operands);
    const float up = static_cast<float>(1 + eps_), down = static_cast<float>(1 - eps_);
    for (int64_t i = 0; i < n * width_; ++i) {
      uint64_t h = (calls_ * 0x9e3779b97f4a7c15ull) ^ static_cast<uint64_t>(i);
      h ^= h >> 31, h *= 0xbf58476d1ce4e5b9ull, h ^= h >> 29;
      out[i] *= (h & 1) ? up : down;
    }
    ++calls_;
  }
  bool healthy() override { return inner_.healthy(); }

 private:
  ExpertBackend& inner_;
  int64_t width_;
  double eps_;
  uint64_t calls_ = 0;
};

// The tier agreement panel: B sequences decoded by an exact engine, then by a fast one fed the
// exact engine's greedy tokens under the same forced routes (one engine at a time: each
// registers the 80 GB segment, and the host cannot pin it twice); per decode position the KL of
// the two next-token distributions and whether their top-1 agree. `extra` appends passes, each a
// new engine compared with exact and with the fast pass: "exact" (a floor of zero: anything else
// is state one engine leaves to the next), "exact-nocache" (every expert read from the segment),
// "fast", or "noise:E" (fast with the CPU tier's answers ×(1 ± E): how far that noise alone
// moves this model).
void run_agreement(Setup S, int64_t positions, const std::vector<std::string>& extra) {
  const ModelConfig& c = S.cfg;
  const int B = 8, prompt = 64;
  const int64_t steps = (positions + B - 1) / B, V = c.vocab_size;
  const tiers::TraceShape shape{static_cast<int>(c.moe_layer_count()), static_cast<int>(c.n_routed_experts),
                                static_cast<int>(c.num_experts_per_tok)};
  std::vector<int32_t> prompts(static_cast<size_t>(B) * prompt);
  std::mt19937_64 g(9);
  for (int32_t& t : prompts) t = static_cast<int32_t>(g() % static_cast<uint64_t>(V));
  std::vector<float> ref, fast;    // exact's and fast's logits: [steps][B][V]
  std::vector<int32_t> tokens;     // exact's greedy tokens: [steps + 1][B]
  struct Pass {
    std::string what;
    double eps = -1;  // < 0: exact (the reference) or plain fast
    bool exact = false;
    double kl = 0, kl_fast = 0, kl_max = 0;
    std::vector<double> first{};  // KL vs exact of sequence 0 at the first decode steps
    bool no_cache = false;
    int64_t same = 0, same_fast = 0, n = 0;
    std::vector<double> flip_gaps{};  // exact's top-2 gap / rms where this pass's top-1 differs
    uint64_t cpu_experts = 0, zc_experts = 0;
  };
  std::vector<double> gaps;  // exact's top-2 gap / rms at every position
  std::vector<Pass> passes = {{"exact", -1, true}, {"fast"}};
  for (const std::string& e : extra) {
    const std::string what = e + " (engine " + std::to_string(passes.size() + 1) + ")";
    if (e == "exact" || e == "exact-nocache") {
      passes.push_back({what, -1, true});
      passes.back().no_cache = e == "exact-nocache";
    } else if (e == "fast") {
      passes.push_back({what});
    } else if (e.rfind("noise:", 0) == 0) {
      passes.push_back({what, std::stod(e.substr(6))});
    } else {
      throw Error("--agreement-passes: '" + e + "' is none of exact, exact-nocache, fast, noise:E");
    }
  }
  for (size_t pi = 0; pi < passes.size(); ++pi) {
    Pass& P = passes[pi];
    const bool record = pi == 0, keep_fast = pi == 1;
    S.mode = P.exact ? "exact" : "fast";
    std::optional<PerturbedTier> noisy;
    if (P.eps >= 0) noisy.emplace(*S.cpu_tier, c.hidden_size, P.eps);
    ExpertBackend* cpu = P.exact ? nullptr : noisy ? &*noisy : S.cpu_tier;
    Setup SP = S;
    if (P.no_cache) SP.expert_cache = 1;  // too small for one slot
    CudaEngine eng(S.model->weights, cpu, engine_options(SP, B, prompt + steps + 64, B * prompt));
    GpuExpertTier* tier = eng.expert_tier();
    if (!tier) throw Error("the " + S.mode + " engine did not attach the expert segment");
    RouteSource src(shape, S.trace, S.trace_file, B);  // the same routes in every pass
    std::vector<int32_t> routes(static_cast<size_t>(shape.layers) * prompt * shape.top_k);
    SequenceSpec spec;
    spec.sampling.temperature = 0;
    spec.max_tokens = prompt + steps + 8;
    std::vector<uint64_t> seqs;
    std::vector<StepResult> r;
    std::vector<int32_t> next(B);
    for (int b = 0; b < B; ++b) {
      seqs.push_back(eng.open(spec));
      src.fill(b, 0, prompt, prompt, routes);
      tier->set_forced_routes(routes.data(), prompt);
      StepItem it;
      it.seq = seqs.back();
      it.tokens = std::span<const int32_t>(prompts).subspan(static_cast<size_t>(b) * prompt, prompt);
      it.sample = true;
      eng.step(std::span<const StepItem>(&it, 1), r);
      next[b] = record ? r[0].token : tokens[b];
      if (record) tokens.push_back(r[0].token);
    }
    std::vector<StepItem> items(B);
    for (int64_t st = 0; st < steps; ++st) {
      for (int b = 0; b < B; ++b) {
        src.fill(b, b, 1, B, routes);
        items[b] = decode_item(seqs[b], next[b], LogitsWanted::Last);
      }
      tier->set_forced_routes(routes.data(), B);
      eng.step(items, r);
      for (int b = 0; b < B; ++b) {
        const float* f = r[b].logits.data();
        const size_t at = static_cast<size_t>(st * B + b) * V;
        if (record) {
          ref.insert(ref.end(), f, f + V);
          tokens.push_back(r[b].token);
          gaps.push_back(top2_gap_over_rms(f, V));
        } else {
          const auto [k, same] = compare_logits(ref.data() + at, f, V);
          P.kl += k, P.same += same, ++P.n;
          if (!same) P.flip_gaps.push_back(gaps[at / V]);
          // Where a difference starts: the first steps' KL of sequence 0, and the largest.
          if (b == 0 && st < 4) P.first.push_back(k);
          P.kl_max = std::max(P.kl_max, k);
          if (keep_fast) fast.insert(fast.end(), f, f + V);
          else {
            const auto [kf, same_f] = compare_logits(fast.data() + at, f, V);
            P.kl_fast += kf, P.same_fast += same_f;
          }
        }
        next[b] = tokens[(st + 1) * B + b];
      }
    }
    if (!record) P.cpu_experts = counter(eng, "tier_cpu_experts"), P.zc_experts = counter(eng, "tier_zero_copy_experts");
    const ExpertTierStats ts = tier->stats();
    std::printf("panel pass \"%s\": %llu decode graph steps, %llu eager steps; cache %d slots, %llu blocks copied in, "
                "%llu copies pending at the end, %llu experts read from VRAM\n",
                P.what.c_str(), static_cast<unsigned long long>(counter(eng, "decode_graph_steps")),
                static_cast<unsigned long long>(counter(eng, "eager_steps")), ts.slots,
                static_cast<unsigned long long>(ts.copied_blocks), static_cast<unsigned long long>(ts.pending),
                static_cast<unsigned long long>(ts.resident));
  }
  const Pass& F = passes[1];
  std::printf("\n### Tier agreement (synthetic model, real widths): fast vs exact, %lld decode positions (%d sequences, "
              "teacher-forced with exact's greedy tokens, same routes): mean KL %.3g, top-1 agreement %.5f; fast sent "
              "%llu experts to the CPU tier, %llu zero-copy\n",
              static_cast<long long>(F.n), B, F.kl / std::max<int64_t>(F.n, 1),
              static_cast<double>(F.same) / std::max<int64_t>(F.n, 1), static_cast<unsigned long long>(F.cpu_experts),
              static_cast<unsigned long long>(F.zc_experts));
  std::printf("\n| pass | mean KL vs exact | top-1 vs exact | max KL | KL of seq 0, steps 0–3 | mean KL vs pass 2 | top-1 vs "
              "pass 2 |\n|---|---|---|---|---|---|---|\n");
  for (size_t pi = 1; pi < passes.size(); ++pi) {
    const Pass& P = passes[pi];
    const double n = static_cast<double>(std::max<int64_t>(P.n, 1));
    std::string first;
    for (double k : P.first) {
      char b[32];
      std::snprintf(b, sizeof b, "%s%.2g", first.empty() ? "" : " ", k);
      first += b;
    }
    std::printf("| %s | %.3g | %.5f | %.3g | %s | ", P.what.c_str(), P.kl / n, P.same / n, P.kl_max, first.c_str());
    if (pi == 1) std::printf("- | - |\n");
    else std::printf("%.3g | %.5f |\n", P.kl_fast / n, P.same_fast / n);
  }
  // Top-1 on a random-weight model is set by how many positions sit near a tie: the flips'
  // margins in exact's own row, and agreement outside near ties by the fixture checker's rule.
  const double tie = kTensorCoreNearTieGap;
  const auto near = std::count_if(gaps.begin(), gaps.end(), [&](double x) { return x < tie; });
  std::vector<double> sorted = gaps;
  std::printf("\nexact's top-2 gap / rms over the %zu positions: median %.3g, below %.3g (near ties, the checker's "
              "rule) at %lld\n",
              gaps.size(), median(sorted), tie, static_cast<long long>(near));
  for (size_t pi = 1; pi < passes.size(); ++pi) {
    const Pass& P = passes[pi];
    std::vector<double> fg = P.flip_gaps;
    std::sort(fg.begin(), fg.end());
    const auto flips_near = std::count_if(fg.begin(), fg.end(), [&](double x) { return x < tie; });
    std::string list;
    for (double x : fg) {
      char b[32];
      std::snprintf(b, sizeof b, "%s%.2g", list.empty() ? "" : " ", x);
      list += b;
    }
    const double outside = static_cast<double>(gaps.size() - near);
    std::printf("%s: %zu top-1 flips (exact's gap / rms there: %s), %lld of them near ties; top-1 outside near ties "
                "%.5f (%lld positions)\n",
                P.what.c_str(), fg.size(), list.empty() ? "-" : list.c_str(), static_cast<long long>(flips_near),
                outside > 0 ? 1.0 - static_cast<double>(fg.size() - flips_near) / outside : 1.0,
                static_cast<long long>(outside));
  }
  std::fflush(stdout);
}

void run_engine(const Setup& S, int max_seqs, int64_t context, int64_t ctx, const std::vector<int64_t>& batches,
                const std::vector<int64_t>& prefills, std::vector<Row>& rows) {
  const ModelConfig& c = S.cfg;
  const CudaEngineOptions o = engine_options(S, max_seqs, context, S.chunk);
  const auto t0 = clk::now();
  CudaEngine eng(S.model->weights, S.mode == "exact" ? nullptr : S.cpu_tier, o);
  GpuExpertTier* tier = eng.expert_tier();
  if (!tier) throw Error("the engine did not attach the expert segment " + S.segment);
  const ExpertTierStats st0 = tier->stats();
  std::printf("\nengine (%d sequences × %lld tokens) built in %.1f s; VRAM: %s; expert cache %d slots (%.1f GB, %.1f%% of "
              "the %d identities)\n",
              max_seqs, static_cast<long long>(context), secs(t0), eng.budget().report().c_str(), st0.slots,
              st0.slots * static_cast<double>(st0.slot_bytes) / 1e9, 100.0 * st0.slots / (42.0 * 288.0),
              static_cast<int>(c.n_routed_experts * 42));
  const int n_moe = static_cast<int>(c.moe_layer_count());
  const tiers::TraceShape shape{n_moe, static_cast<int>(c.n_routed_experts), static_cast<int>(c.num_experts_per_tok)};
  const int TK = shape.top_k;
  RouteSource src(shape, S.trace, S.trace_file, max_seqs);
  const int64_t max_rows = o.max_tokens_per_step;
  std::vector<int32_t> routes(static_cast<size_t>(n_moe) * max_rows * TK);
  std::mt19937_64 g(5);
  auto tokens = [&](int64_t n) {
    std::vector<int32_t> v(static_cast<size_t>(n));
    for (int32_t& t : v) t = static_cast<int32_t>(g() % static_cast<uint64_t>(c.vocab_size));
    return v;
  };
  // HBM bytes a decode row reads besides the experts: every VRAM weight but the embedding, its
  // KDA state (read + written) and its attention's selected latents.
  const double weight_bytes = static_cast<double>(eng.budget().used(VramCategory::Weights));
  const double embed = static_cast<double>(c.vocab_size * c.hidden_size * 2);
  const double state = static_cast<double>(SequencePool::slot_bytes(c));
  int64_t n_sparse = 0;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) n_sparse += c.is_sparse(l);
  const double blk = static_cast<double>(S.block_bytes);
  // The rate misses are served at, by mode: zero-copy alone; the CPU tier's exact kernel alone;
  // both at once (each at its own rate, together no faster than the combined host read).
  const double miss_rate = S.mode == "exact" ? S.bw.zero_copy
                           : S.mode == "cpu" ? S.bw.cpu_expert_gbs
                                             : std::min(S.bw.both_cpu + S.bw.both_gpu, S.bw.cpu_expert_gbs + S.bw.zero_copy);

  // prof: the last chunk's op groups (its staging waits included) on the GPU clock.
  auto prefill_seq = [&](uint64_t s, int stream, int64_t n, double* ms_out, OpProfile* prof = nullptr,
                         double* last_ms = nullptr) {
    std::vector<int32_t> p = tokens(n);
    std::vector<StepResult> r;
    double ms = 0;
    for (int64_t at = 0; at < n; at += max_rows) {
      const int64_t m = std::min(max_rows, n - at);
      src.fill(stream, 0, m, m, routes);
      tier->set_forced_routes(routes.data(), m);
      StepItem it;
      it.seq = s;
      it.tokens = std::span<const int32_t>(p).subspan(static_cast<size_t>(at), static_cast<size_t>(m));
      it.sample = at + m == n;
      const bool profiled = prof && at + m == n;
      if (profiled) eng.set_profile(prof);
      const auto a = clk::now();
      eng.step(std::span<const StepItem>(&it, 1), r);
      const double step_ms = secs(a) * 1e3;
      ms += step_ms;
      if (profiled) {
        prof->collect();
        eng.set_profile(nullptr);
        if (last_ms) *last_ms = step_ms;
      }
    }
    if (ms_out) *ms_out = ms;
    return r.empty() ? 0 : r[0].token;
  };
  // Routes of a decode step: row b (sequence b) from stream b. The set happens before the timer.
  auto forced_decode = [&](int64_t B) {
    for (int64_t b = 0; b < B; ++b) src.fill(static_cast<int>(b), b, 1, B, routes);
    tier->set_forced_routes(routes.data(), B);
  };

  for (int64_t B : batches) {
    SequenceSpec spec;
    spec.sampling.temperature = 0;
    spec.max_tokens = ctx + S.steps + S.warm + 8;
    std::vector<uint64_t> seqs;
    std::vector<int32_t> next;
    for (int64_t b = 0; b < B; ++b) {
      seqs.push_back(eng.open(spec));
      next.push_back(prefill_seq(seqs.back(), static_cast<int>(b), ctx, nullptr));
    }
    std::vector<StepItem> items(static_cast<size_t>(B));
    std::vector<StepResult> r;
    std::vector<double> ms;
    ExpertTierStats before{};
    std::vector<std::pair<std::string, uint64_t>> counters_before;
    for (int st = 0; st < S.warm + S.steps; ++st) {
      if (st == S.warm) before = tier->stats(), counters_before = eng.stats().counters;
      for (int64_t b = 0; b < B; ++b) {
        items[b].seq = seqs[b];
        items[b].tokens = std::span<const int32_t>(&next[b], 1);
        items[b].prompt = false;
        items[b].sample = true;
      }
      forced_decode(B);
      const auto a = clk::now();
      eng.step(items, r);
      if (st >= S.warm) ms.push_back(secs(a) * 1e3);
      for (int64_t b = 0; b < B; ++b) next[b] = r[b].token;
    }
    const ExpertTierStats after = tier->stats();
    const double hits = static_cast<double>(after.cache.hits - before.cache.hits);
    const double misses = static_cast<double>(after.cache.misses - before.cache.misses);
    Row row;
    row.what = "decode C" + std::to_string(B) + " @" + std::to_string(ctx / 1024) + "k";
    row.mode = S.label;
    row.split = split_summary(eng, counters_before);
    row.ms = median(ms);
    row.tok_s = B * 1e3 / row.ms;
    row.hit = hits / std::max(hits + misses, 1.0);
    const double sel = std::min(static_cast<double>(ctx), static_cast<double>(c.index_topk + c.index_kpool));
    row.hbm_gb = (weight_bytes - embed + B * (2 * state + n_sparse * sel * c.kv_lora_rank * 2) +
                  hits / S.steps * blk) / 1e9;
    row.pcie_gb = misses / S.steps * blk / 1e9;
    const double hbm_ms = row.hbm_gb / S.bw.hbm * 1e3;
    row.bound_ms = hbm_ms + row.pcie_gb / miss_rate * 1e3;
    rows.push_back(row);
    print_rows({row});
    auto since = [&](const char* n) {
      for (const auto& [k, v] : counters_before)
        if (k == n) return counter(eng, n) - v;
      return counter(eng, n);
    };
    std::printf("(%llu of the %d timed steps from decode graphs, %llu eager)\n",
                static_cast<unsigned long long>(since("decode_graph_steps")), S.steps,
                static_cast<unsigned long long>(since("eager_steps")));
    if (S.profile) {
      // Where a step's time goes on the GPU's clock: the op groups of one more step (eager: the
      // profile's events keep it off the graphs), the tier's hand-off and CPU wait included.
      OpProfile prof;
      for (int64_t b = 0; b < B; ++b) items[b].tokens = std::span<const int32_t>(&next[b], 1);
      forced_decode(B);
      eng.set_profile(&prof);
      const auto a = clk::now();
      eng.step(items, r);
      const double t = secs(a) * 1e3;
      prof.collect();
      eng.set_profile(nullptr);
      bench::print_profile((row.what + ", " + S.mode + " (profiled step)").c_str(), prof, t);
    }
    for (uint64_t s : seqs) eng.close(s);
  }
  for (int64_t P : prefills) {
    SequenceSpec spec;
    spec.sampling.temperature = 0;
    spec.max_tokens = P + 8;
    const ExpertTierStats before = tier->stats();
    const uint64_t s = eng.open(spec);
    double ms = 0, last_ms = 0;
    OpProfile prof;
    prefill_seq(s, 0, P, &ms, S.profile ? &prof : nullptr, &last_ms);
    eng.close(s);
    if (S.profile)
      bench::print_profile(("prefill " + std::to_string(P / 1024) + "k, " + S.mode + " (last chunk profiled)").c_str(),
                           prof, last_ms);
    const ExpertTierStats after = tier->stats();
    const double hits = static_cast<double>(after.cache.hits - before.cache.hits);
    const double misses = static_cast<double>(after.cache.misses - before.cache.misses);
    Row row;
    row.what = "prefill " + std::to_string(P / 1024) + "k";
    row.mode = S.label;
    row.ms = ms;
    row.tok_s = P * 1e3 / ms;
    row.hit = hits / std::max(hits + misses, 1.0);
    row.hbm_gb = (weight_bytes * static_cast<double>((P + max_rows - 1) / max_rows) + hits * blk) / 1e9;
    row.pcie_gb = misses * blk / 1e9;
    // Prefill's bound here is the PCIe side only (each chunk's missing experts read once, at the
    // faster of the link's two measured rates: staging copies, zero-copy reads); the compute
    // side is not modelled, so "of bound" overstates how far from the machine it is.
    row.bound_ms = row.pcie_gb / std::max(S.bw.zero_copy, S.bw.h2d) * 1e3;
    rows.push_back(row);
    print_rows({row});
  }
}

}  // namespace

int main(int argc, char** argv) {
  double budget_gb = 24, pool_gb = 0, cache_gb = 0;
  int64_t layers = 45, experts = 288, context = 1024, long_context = 32768;
  int K = 3, cpu_threads = std::max(1u, std::thread::hardware_concurrency() - 2);
  // The ring's busy-waits (client for the answer, server for the next request; < 0: their
  // defaults). The kernel pool's own spin is FLASHTIER_POOL_SPIN_US.
  long ring_spin_us = -1;
  std::vector<int64_t> batches = {1, 2, 4, 8}, prefills = {8192, 32768};
  Setup S;
  S.trace.zipf_s = 0.8;
  S.trace.locality = 0.3;
  std::string segment = "flashtier-bench-tiers";
  std::vector<std::string> modes = {"fast", "exact"};
  int64_t agreement = 0;
  bool keep = false;
  std::vector<std::string> agreement_passes;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--vram-budget-gb") budget_gb = std::stod(next());
    else if (a == "--pool-gb") pool_gb = std::stod(next());
    else if (a == "--expert-cache-gb") cache_gb = std::stod(next());
    else if (a == "--layers") layers = std::stoll(next());
    else if (a == "--experts") experts = std::stoll(next());
    else if (a == "--k") K = std::stoi(next());
    else if (a == "--context") context = std::stoll(next());
    else if (a == "--long-context") long_context = std::stoll(next());
    else if (a == "--batches") batches = parse_list(next());
    else if (a == "--prefill") prefills = parse_list(next());
    else if (a == "--steps") S.steps = std::stoi(next());
    else if (a == "--warm-steps") S.warm = std::stoi(next());
    else if (a == "--admit-per-step") S.admit = std::stoi(next());
    else if (a == "--chunk") S.chunk = std::stoll(next());
    else if (a == "--zipf") S.trace.zipf_s = std::stod(next());
    else if (a == "--locality") S.trace.locality = std::stod(next());
    else if (a == "--trace") S.trace_file = next();
    else if (a == "--cpu-threads") cpu_threads = std::stoi(next());
    else if (a == "--ring-spin-us") ring_spin_us = std::stol(next());
    else if (a == "--segment") segment = next();
    else if (a == "--keep-segment") keep = true;
    else if (a == "--agreement") agreement = std::stoll(next());
    else if (a == "--agreement-noise") {  // the same as --agreement-passes noise:E,…
      for (const std::string& e : bench::split_list(next())) agreement_passes.push_back("noise:" + e);
    }
    else if (a == "--agreement-exact-again") agreement_passes.push_back("exact");
    else if (a == "--agreement-passes") {
      for (const std::string& e : bench::split_list(next())) agreement_passes.push_back(e);
    }
    else if (a == "--poison-vram") S.poison_vram = true;
    else if (a == "--profile") S.profile = true;
    else if (a == "--programmatic-launch") exl3_set_programmatic_launch(Exl3Programmatic::On);
    else if (a == "--no-programmatic-launch") exl3_set_programmatic_launch(Exl3Programmatic::Off);
    else if (a == "--modes") modes = bench::split_list(next());
    else {
      std::fprintf(stderr,
                   "usage: flashtier-bench-tiers [--vram-budget-gb 24] [--pool-gb G] [--expert-cache-gb G] [--layers 45]\n"
                   "         [--experts 288] [--k 3] [--context 1024] [--long-context 32768 (0: skip)] [--batches 1,2,4,8]\n"
                   "         [--prefill 8192,32768] [--steps 32] [--warm-steps 128] [--admit-per-step 32] [--zipf 0.8]\n"
                   "         [--locality 0.3] [--trace FILE] [--cpu-threads N] [--ring-spin-us N] [--segment NAME] [--keep-segment]\n"
                   "         [--chunk 8192 (prefill tokens per step)] [--modes fast,exact (any of fast, exact, cpu, each also as\n"
                   "          MODE-eager: decode steps without CUDA graphs; \"\": none)]\n"
                   "         [--agreement N (the fast-vs-exact panel over N decode positions; 0: off)]\n"
                   "         [--agreement-noise E,... (extra panel passes: the CPU tier's answers ×(1 ± E))]\n"
                   "         [--agreement-exact-again (an extra panel pass: a second exact engine)]\n"
                   "         [--agreement-passes P,... (more panel passes, each a new engine: exact, exact-nocache, fast, noise:E)]\n"
                   "         [--poison-vram (every engine's allocations start as 0xFF bytes, not fresh memory)]\n"
                   "         [--profile (one profiled decode step per batch and each prefill's last chunk: op groups on the GPU clock,\n"
                   "          tier hand-off, CPU wait and staging wait)]\n"
                   "         [--programmatic-launch | --no-programmatic-launch (EXL3 linears with programmatic dependent\n"
                   "          launch at every row count or at none, sm_90+; default: calls of up to four rows)]\n"
);
      return 2;
    }
  }
  try {
    S.cfg = synthetic_config("\"n_routed_experts\": " + std::to_string(experts) +
                             ", \"num_hidden_layers\": " + std::to_string(layers));
    const ModelConfig& c = S.cfg;
    S.budget = static_cast<uint64_t>(budget_gb * 1e9);
    S.expert_cache = static_cast<uint64_t>(cache_gb * 1e9);
    S.segment = segment;
    cudaDeviceProp prop{};
    FT_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    std::printf("GPU: %s; host: %u threads, %.1f GB available, /dev/shm %.1f GB free\n", prop.name,
                std::thread::hardware_concurrency(), mem_available_bytes() / 1e9, shm_free_bytes() / 1e9);

    // ---- segment
    tiers::SyntheticSegmentOptions so;
    so.name = segment;
    so.K = K;
    so.threads = static_cast<int>(std::thread::hardware_concurrency());
    const uint64_t room = std::min(shm_free_bytes(), mem_available_bytes());
    so.pool_bytes = pool_gb > 0 ? static_cast<uint64_t>(pool_gb * 1e9) : room / 10 * 6;
    const tiers::SyntheticSegmentInfo si = tiers::build_synthetic_segment(c, so);
    S.block_bytes = si.block_bytes;
    std::printf("segment %s: %llu identities onto %llu distinct blocks of %.2f MB (pool %.1f GB) built in %.1f s\n",
                segment.c_str(), static_cast<unsigned long long>(si.identities),
                static_cast<unsigned long long>(si.distinct_blocks), si.block_bytes / 1e6,
                si.distinct_blocks * static_cast<double>(si.block_bytes) / 1e9, si.build_seconds);

    // ---- bandwidths, over the segment's own pages
    {
      auto seg = ipc::ExpertSegment::attach(segment, "", nullptr);
      if (!seg) throw Error("cannot attach the segment just built");
      const uint8_t* data = seg->data() + seg->header().data_offset;
      const uint64_t pool = si.distinct_blocks * si.block_bytes;
      // As the CPU tier does (cew::RingTier): the CPU figures below then carry no first-touch faults.
      std::printf("segment pages mapped in %.2f s\n", ipc::prefault_read(seg->data(), seg->size(), cpu_threads));
      S.bw.hbm = bench::hbm_read_gbs();
      const uint64_t probe = std::min<uint64_t>(pool / 2 / 4096 * 4096, uint64_t{16} << 30);
      void* dev = nullptr;
      FT_CUDA_CHECK(cudaHostRegister(const_cast<uint8_t*>(data), probe, cudaHostRegisterMapped | cudaHostRegisterReadOnly));
      FT_CUDA_CHECK(cudaHostGetDevicePointer(&dev, const_cast<uint8_t*>(data), 0));
      S.bw.zero_copy = bench::read_gbs(dev, probe, 3);
      S.bw.h2d = bench::h2d_copy_gbs(data, std::min<uint64_t>(probe, uint64_t{4} << 30), 3);
      S.bw.cpu = cpu_read_gbs(data + probe, std::min(pool - probe, probe), cpu_threads, 1.5);
      // Both at once: CPU threads on the second half, the GPU on the first.
      std::atomic<bool> stop{false};
      double both_cpu = 0;
      std::thread cpu([&] { both_cpu = cpu_read_gbs(data + probe, std::min(pool - probe, probe), cpu_threads, 3.0, &stop); });
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      S.bw.both_gpu = bench::read_gbs(dev, probe, 3);
      stop = true;
      cpu.join();
      S.bw.both_cpu = both_cpu;
      FT_CUDA_CHECK(cudaHostUnregister(const_cast<uint8_t*>(data)));
      // The exact CPU kernel at batch 1 on distinct blocks (what the CPU tier does per miss).
      exl3::ThreadPool tp(cpu_threads, false);
      std::vector<float> x(static_cast<size_t>(c.hidden_size), 0.01f), y(x.size());
      const int n_exp = static_cast<int>(std::min<uint64_t>(si.distinct_blocks, 256));
      const auto t0 = clk::now();
      for (int e = 0; e < n_exp; ++e)
        exl3::expert_forward(data + static_cast<uint64_t>(e) * si.block_bytes, x.data(), 1, y.data(), tp,
                             static_cast<float>(c.swiglu_limit));
      const double t = secs(t0);
      S.bw.cpu_expert_us = t / n_exp * 1e6;
      S.bw.cpu_expert_gbs = n_exp * static_cast<double>(si.block_bytes) / t / 1e9;
      std::printf("\n### Bandwidths measured in this run\n\n| what | GB/s |\n|---|---|\n");
      std::printf("| HBM read | %.0f |\n| zero-copy read of the segment (GPU kernel, mapped host memory) | %.1f |\n"
                  "| H2D copy from the segment | %.1f |\n| CPU read, %d threads | %.1f |\n"
                  "| CPU (%d threads) + zero-copy at once | %.1f + %.1f = %.1f |\n"
                  "| exact CPU expert kernel, batch 1, %d threads | %.1f (%.0f µs per expert) |\n",
                  S.bw.hbm, S.bw.zero_copy, S.bw.h2d, cpu_threads, S.bw.cpu, cpu_threads, S.bw.both_cpu, S.bw.both_gpu,
                  S.bw.both_cpu + S.bw.both_gpu, cpu_threads, S.bw.cpu_expert_gbs, S.bw.cpu_expert_us);
      std::fflush(stdout);
    }

    // ---- model
    const auto t0 = clk::now();
    SyntheticExl3Options mo;
    mo.K = K;
    SyntheticExl3Model model = synthetic_exl3_weights(c, mo);
    S.model = &model;
    std::printf("synthetic EXL3 model: %lld layers, %lld experts top-%lld, vocab %lld, K=%d (lm_head %d); non-expert "
                "trellises %.2f GB; made in %.1f s\n",
                static_cast<long long>(layers), static_cast<long long>(experts),
                static_cast<long long>(c.num_experts_per_tok), static_cast<long long>(c.vocab_size), K, mo.head_K,
                model.trellis_bytes / 1e9, secs(t0));
    std::printf("routing: %s\n", S.trace_file.empty()
                                     ? ("synthetic, Zipf s=" + std::to_string(S.trace.zipf_s) + ", locality " +
                                        std::to_string(S.trace.locality)).c_str()
                                     : ("replay of " + S.trace_file).c_str());

    // ---- the CPU tier for fast / cpu modes: the exact kernels on the segment behind the real
    // ring, in this process, and the gpu-worker's client for it.
    std::optional<ipc::ExpertSegment> tier_seg;
    std::unique_ptr<cew::RingTier> cpu_tier;
    std::unique_ptr<RemoteExperts> remote;
    const std::string ring = segment + "-ring";
    if (agreement > 0 || std::any_of(modes.begin(), modes.end(), [](const std::string& m) { return m != "exact"; })) {
      tier_seg = ipc::ExpertSegment::attach(segment, "", nullptr);
      if (!tier_seg) throw Error("cannot attach the segment for the CPU tier");
      ipc::RingConfig rc;
      rc.max_slots = std::max<uint32_t>(16, static_cast<uint32_t>(c.num_experts_per_tok));
      ipc::RingServerOptions ro;
      RemoteExpertsOptions eo = RemoteExpertsOptions::for_model(c);
      if (ring_spin_us >= 0) ro.spin = eo.ring_spin = std::chrono::microseconds(ring_spin_us);
      cpu_tier = std::make_unique<cew::RingTier>(*tier_seg, static_cast<float>(c.swiglu_limit), cpu_threads, ring, rc, ro);
      remote = RemoteExperts::create("shm:" + ring, eo);
      std::printf("CPU tier: %d threads (%s) on ring %s\n", cpu_threads, cpu_tier->engine().kernels().c_str(),
                  ring.c_str());
    }
    S.cpu_tier = remote.get();

    std::vector<Row> rows;
    const int max_b = static_cast<int>(bench::max_or(batches, 1));
    std::vector<int64_t> short_prefills, long_prefills;
    for (int64_t p : prefills) (p <= 8192 ? short_prefills : long_prefills).push_back(p);
    std::printf("prefill chunk %lld tokens per step\n", static_cast<long long>(S.chunk));
    for (size_t mi = 0; mi < modes.size(); ++mi) {
      S.label = modes[mi];
      const std::string eager = "-eager";
      S.graphs = !(S.label.size() > eager.size() && S.label.ends_with(eager));
      S.mode = S.graphs ? S.label : S.label.substr(0, S.label.size() - eager.size());
      tiers::parse_tier_mode(S.mode);
      // Prefill chunks run exact in every mode (staging), so only the first mode measures them.
      const bool first = mi == 0;
      std::printf("\n## mode %s\n", S.label.c_str());
      run_engine(S, max_b, std::max<int64_t>(context + S.steps + S.warm + 64,
                                             short_prefills.empty() ? 0 : *std::max_element(short_prefills.begin(),
                                                                                            short_prefills.end()) + 64),
                 context, batches, first ? short_prefills : std::vector<int64_t>{}, rows);
      if (long_context > 0 || (first && !long_prefills.empty())) {
        const int64_t ctx = std::max<int64_t>(
            long_context, !first || long_prefills.empty() ? 0 : *std::max_element(long_prefills.begin(), long_prefills.end()));
        run_engine(S, 1, ctx + S.steps + S.warm + 64, long_context,
                   long_context > 0 ? std::vector<int64_t>{1} : std::vector<int64_t>{},
                   first ? long_prefills : std::vector<int64_t>{}, rows);
      }
    }
    if (agreement > 0) run_agreement(S, agreement, agreement_passes);
    std::printf("\n### Summary (--vram-budget-gb %.0f; bound: HBM bytes at the HBM rate + miss bytes at the mode's rate: "
                "exact zero-copy, cpu the CPU kernel's, fast both at once; prefill: PCIe only, at the faster of H2D copy and zero-copy)\n",
                budget_gb);
    print_rows(rows);
    remote.reset();
    cpu_tier.reset();
    ipc::RingServer::remove(ring);
    if (!keep) ipc::ShmMapping::remove(segment);
  } catch (const std::exception& e) {
    if (!keep) ipc::ShmMapping::remove(segment);
    std::fprintf(stderr, "flashtier-bench-tiers: %s\n", e.what());
    return 1;
  }
  return 0;
}
