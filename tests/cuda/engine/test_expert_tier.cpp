// The expert tiers' GPU side on the EXL3 fixture: the routed experts read zero-copy from a real
// cpu-expert-worker segment (built by its own builder), with and without a VRAM cache, give
// logits bit-identical to the same experts resident in VRAM — the kernel reads the same bytes
// wherever they live — and the cache admits, hits and keeps its table consistent. With the CPU
// tier (the real kernels behind the real ring, in-process), misses split between it and the GPU
// keep the fixed summation order, and the tier dying costs no request.
#include <gtest/gtest.h>

#include <bit>
#include <chrono>
#include <fstream>
#include <ostream>
#include <cmath>
#include <optional>
#include <thread>

#include "cpu-expert-worker/fingerprint.h"
#include "cpu-expert-worker/ring_tier.h"
#include "cpu-expert-worker/segment_builder.h"
#include "gpu-worker/backends/cuda/engine/cuda_engine.h"
#include "gpu-worker/experts/remote_experts.h"
#include "gpu-worker/tiers/expert_cache.h"
#include "shared/ipc/shm.h"
#include "shared/model/safetensors.h"
#include "shared/model/tensor_convert.h"
#include "shared/sampling/logit_compare.h"
#include "tests/cuda/support/gpu_test.h"

namespace ft::cuda {
namespace {

std::string model_dir() { return test::fixture("glm5-tiny-exl3/model"); }
// A logit row's width (failure messages name the first row two traces part at).
size_t vocab() { return static_cast<size_t>(load_config(model_dir()).vocab_size); }

// The fixture with its routed experts in VRAM: the bits every tier path must give …
ModelWeights with_experts() {
  LoadOptions local;
  local.keep_quantized = true;
  return load_model(model_dir(), local);
}
// … and without them (they come from the segment).
ModelWeights without_experts() {
  LoadOptions remote;
  remote.keep_quantized = true;
  remote.routed_experts = false;
  return load_model(model_dir(), remote);
}

// Prefill of a fixture prompt, then `steps` greedy decode steps; every row's logits. With `feed`,
// decode step k is fed (*feed)[k] instead of the engine's own choice (teacher forcing: two
// engines compared position by position).
std::vector<float> trace(CudaEngine& e, int steps, const std::string& which = "case1",
                         const std::vector<int32_t>* feed = nullptr) {
  const TensorStore ref = TensorStore::open(test::fixture("glm5-tiny-exl3/reference.safetensors"));
  std::vector<int32_t> prompt;
  for (int64_t v : to_i64(ref.get(which + ".input_ids"))) prompt.push_back(static_cast<int32_t>(v));
  SequenceSpec spec;
  spec.sampling.temperature = 0;
  spec.max_tokens = static_cast<int64_t>(prompt.size()) + steps + 1;
  const uint64_t s = e.open(spec);
  std::vector<StepResult> r;
  StepItem it;
  it.seq = s;
  it.tokens = prompt;
  it.sample = true;
  it.logits = LogitsWanted::Last;
  e.step(std::span<const StepItem>(&it, 1), r);
  std::vector<float> out = r[0].logits;
  int32_t next = 0;
  for (int k = 0; k < steps; ++k) {
    next = feed ? (*feed)[static_cast<size_t>(k)] : r[0].token;
    const StepItem d = decode_item(s, next, LogitsWanted::Last);
    e.step(std::span<const StepItem>(&d, 1), r);
    out.insert(out.end(), r[0].logits.begin(), r[0].logits.end());
  }
  e.close(s);
  return out;
}

// Greedy decode as the product runs it (sampled steps, so decode steps can replay from graphs):
// the prompt of `which`, then `steps` decode steps; every sampled token with its logprob and top
// five (as bits: two runs compare exactly).
struct Greedy {
  std::vector<int32_t> tokens;
  std::vector<uint32_t> logprob_bits;
  bool operator==(const Greedy&) const = default;
};
std::ostream& operator<<(std::ostream& os, const Greedy& g) {
  for (int32_t t : g.tokens) os << t << ' ';
  return os;
}

Greedy greedy(CudaEngine& e, const std::string& which, int steps) {
  const TensorStore ref = TensorStore::open(test::fixture("glm5-tiny-exl3/reference.safetensors"));
  std::vector<int32_t> prompt;
  for (int64_t v : to_i64(ref.get(which + ".input_ids"))) prompt.push_back(static_cast<int32_t>(v));
  SequenceSpec spec;
  spec.sampling.temperature = 0;
  spec.logprobs = true;
  spec.top_logprobs = 5;
  spec.max_tokens = static_cast<int64_t>(prompt.size()) + steps + 1;
  const uint64_t s = e.open(spec);
  Greedy g;
  auto keep = [&](const StepResult& r) {
    g.tokens.push_back(r.token);
    g.logprob_bits.push_back(std::bit_cast<uint32_t>(r.logprob));
    for (const auto& [t, lp] : r.top) {
      g.tokens.push_back(t);
      g.logprob_bits.push_back(std::bit_cast<uint32_t>(lp));
    }
  };
  std::vector<StepResult> r;
  StepItem it;
  it.seq = s;
  it.tokens = prompt;
  it.sample = true;
  e.step(std::span<const StepItem>(&it, 1), r);
  keep(r[0]);
  int32_t next = r[0].token;
  for (int k = 0; k < steps; ++k) {
    const StepItem d = decode_item(s, next);
    e.step(std::span<const StepItem>(&d, 1), r);
    keep(r[0]);
    next = r[0].token;
  }
  e.close(s);
  return g;
}

class ExpertTierTest : public test::GpuTest {
 protected:
  void SetUp() override {
    test::GpuTest::SetUp();
    if (IsSkipped()) return;
    seg_name_ = "ft-tier-test-" + std::to_string(getpid());
    cew::SegmentOptions so;
    so.name = seg_name_;
    so.force_rebuild = true;
    cew::open_or_build_segment(model_dir(), load_config(model_dir()), cew::model_fingerprint(model_dir()), so);
  }
  void TearDown() override {
    if (!seg_name_.empty()) ipc::ShmMapping::remove(seg_name_);
  }
  static CudaEngineOptions opts() {
    CudaEngineOptions o;
    o.max_sequences = 2;
    o.max_tokens_per_step = 256;
    o.context_size = 512;
    o.vram_budget_bytes = 2ull << 30;
    o.graphs = false;  // logits come back from eager steps only
    return o;
  }
  // … read zero-copy from the test's segment, exact mode, through a cache of `cache_bytes`.
  CudaEngineOptions tier_opts(uint64_t cache_bytes) const {
    CudaEngineOptions o = opts();
    o.expert_segment = seg_name_;
    o.tier_mode = "exact";
    o.expert_cache_bytes = cache_bytes;
    return o;
  }
  std::string seg_name_;
};

TEST_F(ExpertTierTest, ZeroCopyAndCachedExpertsGiveTheVramResidentBits) {
  const ModelWeights without = without_experts();
  CudaEngine resident(with_experts(), nullptr, opts());
  const auto want = trace(resident, 12);

  CudaEngineOptions zc = opts();
  zc.expert_segment = seg_name_;
  zc.tier_mode = "exact";
  zc.expert_cache_bytes = 0;  // every expert read over PCIe
  zc.auto_expert_cache = false;
  CudaEngine zero_copy(without, nullptr, zc);
  const auto got_zc = trace(zero_copy, 12);

  CudaEngineOptions cached = zc;
  cached.expert_cache_bytes = 1 << 20;  // a few slots: admissions, hits and evictions
  cached.admit_per_step = 4;
  CudaEngine with_cache(without, nullptr, cached);
  const auto first = trace(with_cache, 12), second = trace(with_cache, 12);

  ASSERT_EQ(want.size(), got_zc.size());
  EXPECT_EQ(test::bit_mismatches(want.data(), got_zc.data(), want.size()), 0u)
      << test::where_they_part(want, got_zc, vocab());
  EXPECT_EQ(test::bit_mismatches(want.data(), first.data(), want.size()), 0u)
      << test::where_they_part(want, first, vocab());
  EXPECT_EQ(test::bit_mismatches(want.data(), second.data(), want.size()), 0u)
      << test::where_they_part(want, second, vocab());
  uint64_t hits = 0, admissions = 0;
  for (const auto& [name, v] : with_cache.stats().counters) {
    if (name == "expert_cache_hits") hits = v;
    if (name == "expert_cache_admissions") admissions = v;
  }
  EXPECT_GT(admissions, 0u);
  EXPECT_GT(hits, 0u);
}

// Every VRAM allocation poisoned (0xFF: NaN) gives the bits of an engine on fresh memory: no
// kernel of the tier path (zero-copy, cache slots, staging, the grouped kernel's workspace)
// reads memory before writing it. Fresh pages are zero; a worker's second engine, or one after
// another process, gets what the card held before.
TEST_F(ExpertTierTest, PoisonedMemoryGivesTheFreshEngineBits) {
  const ModelWeights without = without_experts();
  CudaEngineOptions o = tier_opts(1 << 20);
  o.auto_expert_cache = false;
  o.admit_per_step = 4;
  std::vector<float> want;
  for (bool poison : {false, true}) {
    CudaEngineOptions p = o;
    p.poison_vram = poison;
    CudaEngine e(without, nullptr, p);
    std::vector<float> got = trace(e, 12);
    const std::vector<float> again = trace(e, 12, "case0");  // slots and blocks the first left
    got.insert(got.end(), again.begin(), again.end());
    size_t finite = 0;
    for (float v : got) finite += std::isfinite(v);
    EXPECT_EQ(finite, got.size()) << (poison ? "poisoned" : "fresh") << " engine: non-finite logits";
    if (!poison) want = got;
    else {
      ASSERT_EQ(want.size(), got.size());
      EXPECT_EQ(test::bit_mismatches(want.data(), got.data(), want.size()), 0u)
      << test::where_they_part(want, got, vocab());
    }
  }
}

uint64_t counter(const CudaEngine& e, const std::string& name) {
  for (const auto& [n, v] : e.stats().counters)
    if (n == name) return v;
  return 0;
}

// A routing-statistics file warm-starts the cache: with admission off (no copies between
// steps) the warm-started experts serve hits from the first step, a cold cache serves none, and
// the logits keep the VRAM-resident bits either way.
TEST_F(ExpertTierTest, WarmStartFromRoutingStatsServesHitsFromTheFirstStep) {
  const ModelWeights without = without_experts();
  CudaEngine resident(with_experts(), nullptr, opts());
  const auto want = trace(resident, 12);
  const int64_t layers = without.cfg.moe_layer_count(), E = without.cfg.n_routed_experts;
  std::vector<std::vector<uint64_t>> counts(static_cast<size_t>(layers), std::vector<uint64_t>(static_cast<size_t>(E)));
  for (auto& row : counts)
    for (int64_t e = 0; e < E; ++e) row[static_cast<size_t>(e)] = static_cast<uint64_t>(E - e);  // low ids most used
  test::TempDir d;
  tiers::write_routing_stats(d / "stats.txt", counts);
  for (bool warm : {false, true}) {
    CudaEngineOptions o = tier_opts(1 << 20);
    o.auto_expert_cache = false;
    o.admit_per_step = 0;
    if (warm) o.expert_stats = d / "stats.txt";
    CudaEngine e(without, nullptr, o);
    const auto got = trace(e, 12);
    ASSERT_EQ(want.size(), got.size());
    EXPECT_EQ(test::bit_mismatches(want.data(), got.data(), want.size()), 0u)
        << (warm ? "warm: " : "cold: ") << test::where_they_part(want, got, vocab());
    EXPECT_EQ(counter(e, "expert_cache_admissions"), 0u);
    if (warm) EXPECT_GT(counter(e, "expert_cache_hits"), 0u);
    else EXPECT_EQ(counter(e, "expert_cache_hits"), 0u);
    // The engine's own counts round-trip as a statistics file: one use per (layer, expert) a
    // step looked up, i.e. as many as the cache's hits and misses.
    ASSERT_TRUE(e.write_routing_stats(d / "out.txt"));
    uint64_t uses = 0;
    for (const auto& row : tiers::read_routing_stats(d / "out.txt", static_cast<int>(layers), static_cast<int>(E)))
      for (uint64_t v : row) uses += v;
    EXPECT_EQ(uses, counter(e, "expert_cache_hits") + counter(e, "expert_cache_misses"));
  }
  // A malformed file is refused at load, naming the file.
  {
    std::ofstream f(d / "bad.txt");
    f << "0 1 2\n";
  }
  CudaEngineOptions o = tier_opts(1 << 20);
  o.expert_stats = d / "bad.txt";
  try {
    CudaEngine e(without, nullptr, o);
    ADD_FAILURE() << "a malformed routing-statistics file was accepted";
  } catch (const std::exception& ex) {
    EXPECT_NE(std::string(ex.what()).find("bad.txt"), std::string::npos) << ex.what();
  }
}

// Prefill staging copies a large chunk's non-resident experts into borrowed cache slots one layer
// ahead; the kernel reads the same bytes from there, so the logits keep the resident bits, and
// the decode steps after it give the slots back (their experts copied in again) without a change.
TEST_F(ExpertTierTest, StagedPrefillChunksGiveTheVramResidentBits) {
  CudaEngine resident(with_experts(), nullptr, opts());
  const auto want1 = trace(resident, 8, "case1"), want2 = trace(resident, 8, "case2");
  CudaEngineOptions o = opts();
  o.expert_segment = seg_name_;
  o.tier_mode = "exact";
  o.expert_cache_bytes = 64ull << 20;
  o.staging_min_rows = 65;  // case1 (70 tokens) and case2 (150) prefill in one staged chunk
  CudaEngine staged(without_experts(), nullptr, o);
  const auto got1 = trace(staged, 8, "case1"), got2 = trace(staged, 8, "case2"), again1 = trace(staged, 8, "case1");
  ASSERT_EQ(want1.size(), got1.size());
  ASSERT_EQ(want2.size(), got2.size());
  EXPECT_EQ(test::bit_mismatches(want1.data(), got1.data(), want1.size()), 0u)
      << test::where_they_part(want1, got1, vocab());
  EXPECT_EQ(test::bit_mismatches(want2.data(), got2.data(), want2.size()), 0u)
      << test::where_they_part(want2, got2, vocab());
  EXPECT_EQ(test::bit_mismatches(want1.data(), again1.data(), want1.size()), 0u)
      << test::where_they_part(want1, again1, vocab());
  EXPECT_EQ(counter(staged, "expert_staged_steps"), 3u);
  EXPECT_GT(counter(staged, "expert_staged_blocks"), 0u);
  EXPECT_GT(counter(staged, "expert_staging_slots"), 0u);
}

TEST_F(ExpertTierTest, DecodeFromGraphsWithTheTier) {
  const ModelWeights without = without_experts();
  CudaEngineOptions o = tier_opts(1 << 20);
  o.graphs = true;
  CudaEngine e(without, nullptr, o);
  CudaEngineOptions eo = opts();
  eo.graphs = true;
  CudaEngine resident(with_experts(), nullptr, eo);
  EXPECT_EQ(greedy(e, "case0", 20), greedy(resident, "case0", 20));
  EXPECT_GT(e.graph_steps(), 0u);
}

// The exact CPU tier on the test's segment, answering ring `ring` (as a cpu-expert-worker would).
struct CpuTier {
  CpuTier(const std::string& segment, const std::string& ring, const ModelConfig& c) {
    std::string why;
    seg = ipc::ExpertSegment::attach(segment, "", &why);
    if (!seg) throw Error("segment " + segment + ": " + why);
    ipc::RingConfig rc;
    rc.max_slots = std::max<uint32_t>(16, static_cast<uint32_t>(c.num_experts_per_tok));
    tier.emplace(*seg, static_cast<float>(c.swiglu_limit), 4, ring, rc);
  }
  std::optional<ipc::ExpertSegment> seg;
  std::optional<cew::RingTier> tier;
};

int32_t argmax(const float* v, int64_t n) {
  return static_cast<int32_t>(std::max_element(v, v + n) - v);
}

// Rows whose greedy token differs, and rel L2 over everything.
std::pair<int, double> compare(const std::vector<float>& want, const std::vector<float>& got, int64_t V) {
  int differ = 0;
  double num = 0, den = 0;
  for (size_t r = 0; r + V <= want.size(); r += static_cast<size_t>(V))
    differ += argmax(want.data() + r, V) != argmax(got.data() + r, V);
  for (size_t i = 0; i < want.size(); ++i) {
    const double d = double(want[i]) - got[i];
    num += d * d;
    den += double(want[i]) * want[i];
  }
  return {differ, std::sqrt(num / std::max(den, 1e-30))};
}

// Mean KL(p_want ‖ p_got) of the softmaxes, the share of rows with the same top-1, and the rows
// whose top-1 differs although the reference's top-2 gap is no near tie (the checker's rule).
struct Agreement {
  double kl = 0, top1 = 0;
  int flips_outside_near_ties = 0;
  std::vector<double> flip_gaps;  // the reference's top-2 gap / rms at each flip
  std::vector<double> row_kl;     // per position
};
Agreement agreement(const std::vector<float>& want, const std::vector<float>& got, int64_t V) {
  Agreement g;
  int same = 0, rows = 0;
  for (size_t r = 0; r + V <= want.size(); r += static_cast<size_t>(V), ++rows) {
    const LogitAgreement a = compare_logits(want.data() + r, got.data() + r, V);
    g.kl += a.kl;
    g.row_kl.push_back(a.kl);
    same += a.same_top1;
    if (a.same_top1) continue;
    const double gap = top2_gap_over_rms(want.data() + r, V);
    g.flip_gaps.push_back(gap);
    if (gap >= kTensorCoreNearTieGap) ++g.flips_outside_near_ties;
  }
  g.kl /= std::max(rows, 1);
  g.top1 = static_cast<double>(same) / std::max(rows, 1);
  return g;
}

class TierSplitTest : public ExpertTierTest {
 protected:
  void SetUp() override {
    ExpertTierTest::SetUp();
    if (IsSkipped()) return;
    ring_ = "ft-split-test-" + std::to_string(getpid());
    cfg_ = load_config(model_dir());
  }
  void TearDown() override {
    if (!ring_.empty()) ipc::RingServer::remove(ring_);
    ExpertTierTest::TearDown();
  }
  // Frozen rates (no calibration), so the split is the same every run.
  CudaEngineOptions split_opts(const std::string& mode, double cpu_us, double zc_us) const {
    CudaEngineOptions o = opts();
    o.expert_segment = seg_name_;
    o.tier_mode = mode;
    o.expert_cache_bytes = 1 << 20;  // a few slots: hits, misses on both sides
    o.admit_per_step = 4;
    o.calibrate_split = false;
    o.freeze_split_rates = true;
    o.split_rates.cpu_expert = cpu_us;
    o.split_rates.zc_expert = zc_us;
    o.split_rates.hit_expert = 1;
    return o;
  }
  // The GPU-only logits (experts resident in VRAM) the split runs are compared with.
  static std::vector<float> resident_trace(int steps) {
    CudaEngine resident(with_experts(), nullptr, opts());
    return trace(resident, steps);
  }
  std::string ring_;
  ModelConfig cfg_;
};

TEST_F(TierSplitTest, MissesSplitWithTheCpuTierKeepTheFixedSumOrder) {
  const auto want = resident_trace(12);
  const ModelWeights without = without_experts();
  CpuTier tier(seg_name_, ring_, cfg_);
  auto remote = RemoteExperts::create("shm:" + ring_, RemoteExpertsOptions::for_model(cfg_));
  const int64_t V = cfg_.vocab_size;

  // A CPU tier far dearer than zero-copy gets nothing: the split path's own order (shared expert
  // first, then the routed sum added) gives the GPU-only bits.
  {
    CudaEngine e(without, remote.get(), split_opts("fast", 1e9, 100));
    const auto got = trace(e, 12);
    ASSERT_EQ(got.size(), want.size());
    EXPECT_EQ(test::bit_mismatches(want.data(), got.data(), want.size()), 0u)
      << test::where_they_part(want, got, vocab());
    EXPECT_GT(counter(e, "tier_split_layers"), 0u);
    EXPECT_EQ(counter(e, "tier_cpu_experts"), 0u);
    EXPECT_GT(counter(e, "tier_zero_copy_experts"), 0u);
  }
  // Every miss on the CPU tier (cpu mode), and a mixed split (equal rates): the same greedy
  // tokens; logits apart by the CPU kernel's accumulation order (its operands are rounded as the
  // GPU's: exl3/operands.h F16Rows), ~3e-5 per MoE layer, grown over 12 steps of the tiny model
  // to 4.1–4.2e-4 (H200, session 8) — not the 1e-5.
  for (const auto& [mode, cpu_us] : {std::pair<std::string, double>{"cpu", 100}, {"fast", 100}}) {
    CudaEngine e(without, remote.get(), split_opts(mode, cpu_us, 100));
    const auto got = trace(e, 12);
    ASSERT_EQ(got.size(), want.size());
    const auto [differ, rel] = compare(want, got, V);
    std::printf("[ tier split ] %s: %llu CPU-tier experts, %llu zero-copy, %llu hits; rel L2 vs GPU-only %.3g\n",
                mode.c_str(), static_cast<unsigned long long>(counter(e, "tier_cpu_experts")),
                static_cast<unsigned long long>(counter(e, "tier_zero_copy_experts")),
                static_cast<unsigned long long>(counter(e, "tier_hit_experts")), rel);
    EXPECT_EQ(differ, 0) << mode;
    EXPECT_LE(rel, 1e-3) << mode;
    EXPECT_GT(counter(e, "tier_cpu_experts"), 0u) << mode;
    if (mode == "cpu") EXPECT_EQ(counter(e, "tier_zero_copy_experts"), 0u);
    else EXPECT_GT(counter(e, "tier_zero_copy_experts"), 0u);
    EXPECT_EQ(counter(e, "tier_cpu_failures"), 0u);
  }
}

// The CPU tier stops answering between steps: the first layer that sent it work reads those
// experts zero-copy, the engine runs exact from there (every logit the GPU-only bits), and once
// a tier answers the ring again the split resumes.
TEST_F(TierSplitTest, CpuTierDeathCostsNoRequestAndTheSplitResumes) {
  const auto want = resident_trace(12);
  auto tier = std::make_unique<CpuTier>(seg_name_, ring_, cfg_);
  RemoteExpertsOptions ro = RemoteExpertsOptions::for_model(cfg_);
  ro.retry_every = std::chrono::milliseconds(50);
  auto remote = RemoteExperts::create("shm:" + ring_, ro);
  CudaEngine e(without_experts(), remote.get(), split_opts("cpu", 100, 100));
  (void)trace(e, 2);
  const uint64_t before = counter(e, "tier_cpu_experts");
  EXPECT_GT(before, 0u);

  tier->tier->stop();
  const auto got = trace(e, 12);
  ASSERT_EQ(got.size(), want.size());
  EXPECT_EQ(test::bit_mismatches(want.data(), got.data(), want.size()), 0u)
      << test::where_they_part(want, got, vocab());
  EXPECT_EQ(counter(e, "tier_cpu_failures"), 1u);
  EXPECT_EQ(counter(e, "tier_cpu_up"), 0u);

  tier.reset();
  tier = std::make_unique<CpuTier>(seg_name_, ring_, cfg_);
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));  // the split's retry interval
  const auto again = trace(e, 12);
  EXPECT_EQ(counter(e, "tier_cpu_up"), 1u);
  EXPECT_GT(counter(e, "tier_cpu_experts"), before);
  EXPECT_EQ(compare(want, again, cfg_.vocab_size).first, 0);
}


// Decode steps replayed from CUDA graphs hand the split to the relay through stream memory
// operations instead of a host wait: the same split (frozen rates, no cache slots, so it depends
// on the routes alone) gives the eager steps' tokens and logprobs bit for bit, run after run,
// and a CPU tier priced out of the split gives the GPU-only bits.
TEST_F(TierSplitTest, GraphStepsGiveTheEagerSplitsBits) {
  const ModelWeights without = without_experts();
  CpuTier tier(seg_name_, ring_, cfg_);
  auto remote = RemoteExperts::create("shm:" + ring_, RemoteExpertsOptions::for_model(cfg_));
  for (const auto& [mode, cpu_us] : {std::pair<std::string, double>{"fast", 100}, {"cpu", 100}, {"fast", 1e9}}) {
    CudaEngineOptions eo = split_opts(mode, cpu_us, 100);
    eo.expert_cache_bytes = 0;
    eo.auto_expert_cache = false;
    CudaEngine eager(without, remote.get(), eo);
    const Greedy want1 = greedy(eager, "case0", 16), want2 = greedy(eager, "case2", 16);
    eo.graphs = true;
    CudaEngine graphed(without, remote.get(), eo);
    const Greedy got1 = greedy(graphed, "case0", 16), got2 = greedy(graphed, "case2", 16);
    EXPECT_EQ(got1, want1) << mode << " " << cpu_us;
    EXPECT_EQ(got2, want2) << mode << " " << cpu_us;
    EXPECT_GE(graphed.graph_steps(), 30u) << mode;
    EXPECT_EQ(eager.graph_steps(), 0u);
    for (const char* c : {"tier_split_layers", "tier_cpu_experts", "tier_zero_copy_experts"})
      EXPECT_EQ(counter(graphed, c), counter(eager, c)) << mode << " " << c;
    EXPECT_EQ(counter(graphed, "tier_cpu_failures"), 0u);
    if (cpu_us < 1e6) {
      EXPECT_GT(counter(graphed, "tier_cpu_experts"), 0u) << mode;
    } else {
      EXPECT_EQ(counter(graphed, "tier_cpu_experts"), 0u);
      CudaEngineOptions ro = opts();
      ro.graphs = true;
      CudaEngine resident(with_experts(), nullptr, ro);
      EXPECT_EQ(got1, greedy(resident, "case0", 16));
    }
  }
}

// The CPU tier dies while decode steps replay from graphs: the layer in flight reads the lost
// picks zero-copy inside the graph, later steps replay the exact-mode graphs, and every token
// and logprob is the GPU-only one.
TEST_F(TierSplitTest, CpuTierDeathInsideADecodeGraphCostsNoRequest) {
  CudaEngineOptions ro = opts();
  ro.graphs = true;
  CudaEngine resident(with_experts(), nullptr, ro);
  const Greedy want = greedy(resident, "case1", 12);
  auto tier = std::make_unique<CpuTier>(seg_name_, ring_, cfg_);
  auto remote = RemoteExperts::create("shm:" + ring_, RemoteExpertsOptions::for_model(cfg_));
  CudaEngineOptions o = split_opts("cpu", 100, 100);
  o.graphs = true;
  CudaEngine e(without_experts(), remote.get(), o);
  (void)greedy(e, "case0", 4);  // the split's graph is captured and replayed with the tier alive
  EXPECT_GT(counter(e, "tier_cpu_experts"), 0u);
  tier->tier->stop();
  EXPECT_EQ(greedy(e, "case1", 12), want);
  EXPECT_EQ(counter(e, "tier_cpu_failures"), 1u);
  EXPECT_EQ(counter(e, "tier_cpu_up"), 0u);
  EXPECT_GT(e.graph_steps(), 12u);
}

// The tier agreement panel on tiny-exl3: ≥ 1,000 decode positions, teacher-forced with the
// GPU-only engine's greedy tokens; a mixed split and every miss on the CPU tier against it.
TEST_F(TierSplitTest, AgreementPanelOverAThousandPositions) {
  const int64_t V = cfg_.vocab_size;
  const std::vector<std::string> cases = {"case0", "case1", "case2"};
  const int steps = 340;
  CudaEngine resident(with_experts(), nullptr, opts());
  std::vector<std::vector<float>> want;
  std::vector<std::vector<int32_t>> feeds;
  for (const std::string& c : cases) {
    want.push_back(trace(resident, steps, c));
    std::vector<int32_t> feed;
    for (int k = 0; k < steps; ++k) feed.push_back(argmax(want.back().data() + static_cast<int64_t>(k) * V, V));
    feeds.push_back(feed);
  }
  const ModelWeights without = without_experts();
  CpuTier tier(seg_name_, ring_, cfg_);
  auto remote = RemoteExperts::create("shm:" + ring_, RemoteExpertsOptions::for_model(cfg_));
  for (const std::string mode : {"fast", "cpu"}) {
    CudaEngine e(without, remote.get(), split_opts(mode, 100, 100));
    double kl = 0, top1 = 0;
    int64_t rows = 0;
    int hard_flips = 0;
    std::string gaps;
    for (size_t i = 0; i < cases.size(); ++i) {
      const auto got = trace(e, steps, cases[i], &feeds[i]);
      ASSERT_EQ(got.size(), want[i].size());
      const int64_t n = static_cast<int64_t>(got.size()) / V;
      const Agreement a = agreement(want[i], got, V);
      kl += a.kl * n, top1 += a.top1 * n, rows += n, hard_flips += a.flips_outside_near_ties;
      for (double gp : a.flip_gaps) gaps += " " + std::to_string(gp);
      // Where the drift is: the largest per-position KL and its neighbours (a fault shows as a
      // spike from nothing, accumulated drift as a rise).
      const auto worst = std::max_element(a.row_kl.begin(), a.row_kl.end());
      if (worst != a.row_kl.end()) {
        const int64_t w = worst - a.row_kl.begin();
        std::printf("[ tier agreement ] %s %s: largest KL %.3g at position %lld; around it:", mode.c_str(),
                    cases[i].c_str(), *worst, static_cast<long long>(w));
        for (int64_t j = std::max<int64_t>(0, w - 6); j < std::min<int64_t>(n, w + 4); ++j) std::printf(" %.2g", a.row_kl[j]);
        std::printf("\n");
      }
    }
    kl /= rows, top1 /= rows;
    std::printf("[ tier agreement ] %s vs GPU-only, tiny-exl3: %lld positions, mean KL %.3g, top-1 %.4f, "
                "%d flips outside near ties (top-2 gaps / rms at the flips:%s; %llu CPU-tier experts, %llu zero-copy)\n",
                mode.c_str(), static_cast<long long>(rows), kl, top1, hard_flips, gaps.c_str(),
                static_cast<unsigned long long>(counter(e, "tier_cpu_experts")),
                static_cast<unsigned long long>(counter(e, "tier_zero_copy_experts")));
    EXPECT_GE(rows, 1000);
    // The panel (fast against the GPU-only engine): mean KL ≤ 1e-4, top-1 ≥ 0.999, and no
    // flip outside the checker's near ties. Every miss on the CPU tier (cpu mode, not part of the
    // issue's panel) is held to the KL and to top-1 ≥ 0.995: its agreement moves with which
    // experts the cache holds (H100 and H200, session 18, the same figures on both cards: 0.9990 and no
    // hard flip with plain CLOCK, 0.9971 with one flip at a 0.215-rms gap with the admission
    // gate, although the gate leaves fewer picks to the CPU tier: 5,009 against 6,890). The
    // per-position KL printed above is where to tell accumulated drift from a fault.
    EXPECT_LE(kl, 1e-4) << mode;
    if (mode == "fast") {
      EXPECT_GE(top1, 0.999) << mode;
      EXPECT_EQ(hard_flips, 0) << mode;
    } else {
      EXPECT_GE(top1, 0.995) << mode;
    }
    EXPECT_GT(counter(e, "tier_cpu_experts"), 0u);
  }
}

}  // namespace
}  // namespace ft::cuda
