// The expert tiers' host-side policy: the VRAM cache's CLOCK replacement with per-step pinning,
// switchable admission and its frequency gate, warm start, the CPU/zero-copy split model, and
// routing traces.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <random>
#include <set>

#include "gpu-worker/tiers/expert_cache.h"
#include "gpu-worker/tiers/routing_trace.h"
#include "gpu-worker/tiers/split_model.h"
#include "gpu-worker/tiers/split_rates.h"
#include "gpu-worker/tiers/synthetic_segment.h"
#include "shared/exl3/expert_block.h"
#include "shared/exl3/expert_forward.h"
#include "shared/exl3/thread_pool.h"
#include "shared/ipc/expert_segment.h"
#include "shared/model/config.h"
#include "shared/core/error.h"
#include "tests/support/test_paths.h"

using namespace ft;
using namespace ft::tiers;

TEST(ExpertCache, HitsMissesAndAStepNeverEvictsWhatItPinned) {
  ExpertCache c(2, 8, 3);
  c.begin_step(true);
  for (int e : {0, 1, 2}) {
    EXPECT_FALSE(c.lookup(0, e));
    EXPECT_TRUE(c.admit(0, e));
  }
  // All three slots are pinned by this step: a fourth expert cannot get one.
  EXPECT_FALSE(c.lookup(0, 3));
  EXPECT_FALSE(c.admit(0, 3));
  c.end_step();
  c.begin_step(true);
  EXPECT_TRUE(c.lookup(0, 1));  // pins slot of expert 1
  EXPECT_FALSE(c.lookup(1, 5));  // a use, as the engine's upkeep looks up before it admits
  std::pair<int, int> ev;
  EXPECT_TRUE(c.admit(1, 5, &ev));
  EXPECT_NE(ev, std::make_pair(0, 1));  // never the one this step uses
  EXPECT_GE(ev.first, 0);
  c.end_step();
  EXPECT_EQ(c.counters(0).hits, 1u);
  EXPECT_EQ(c.counters(0).misses, 4u);
  EXPECT_EQ(c.counters(0).admissions, 3u);
  EXPECT_EQ(c.counters(1).admissions, 1u);
  EXPECT_EQ(c.totals().evictions, 1u);
}

TEST(ExpertCache, ClockGivesRecentlyUsedExpertsASecondChance) {
  ExpertCache c(1, 16, 4);
  c.begin_step(true);
  for (int e = 0; e < 4; ++e) c.admit(0, e);
  c.end_step();
  // Expert 2 is used again; then two newcomers must evict among 0, 1, 3 — not 2.
  c.begin_step(true);
  c.lookup(0, 2);
  c.end_step();
  for (int e : {8, 9}) {
    c.begin_step(true);
    std::pair<int, int> ev;
    ASSERT_TRUE(c.admit(0, e, &ev));
    EXPECT_NE(ev.second, 2);
    c.end_step();
  }
  EXPECT_TRUE(c.slot_of(0, 2));
}

TEST(ExpertCache, AdmissionOffForLargePrefillChunks) {
  ExpertCache c(1, 8, 2);
  c.begin_step(false);
  EXPECT_FALSE(c.lookup(0, 1));
  EXPECT_FALSE(c.admit(0, 1));
  c.end_step();
  EXPECT_EQ(c.totals().admissions, 0u);
}

// With more misses than the per-step budget, admissions go round the layers from where the last
// step stopped: every layer gets its turn (a fixed order gave the first layers every admission).
TEST(ExpertCache, AdmissionsGoRoundTheLayersUnderABudget) {
  ExpertCache c(3, 10, 100);
  const std::vector<std::vector<int32_t>> used = {{0, 1, 2, 3}, {0, 1, 2, 3}, {0, 1, 2, 3}};
  int first = 0;
  auto step = [&](int budget) {
    c.begin_step(true);
    std::vector<std::pair<int, int>> got;
    for (const Admission& a : admit_step(c, used, budget, &first)) {
      got.emplace_back(a.layer, a.expert);
      EXPECT_EQ(a.evicted.first, -1);  // the cache has room
      EXPECT_EQ(c.owner(a.slot), std::make_pair(a.layer, a.expert));
    }
    c.end_step();
    return got;
  };
  using V = std::vector<std::pair<int, int>>;
  EXPECT_EQ(step(5), (V{{0, 0}, {1, 0}, {2, 0}, {0, 1}, {1, 1}}));
  EXPECT_EQ(first, 2);
  EXPECT_EQ(step(5), (V{{2, 1}, {0, 2}, {1, 2}, {2, 2}, {0, 3}}));
  EXPECT_EQ(first, 1);
  // The rest fit the budget: layers with nothing left are passed over, and the start moves on.
  EXPECT_EQ(step(16), (V{{1, 3}, {2, 3}}));
  EXPECT_EQ(first, 0);
  EXPECT_TRUE(step(16).empty());  // everything cached: all hits
  for (int l = 0; l < 3; ++l) EXPECT_EQ(c.counters(l).admissions, 4u) << l;
}

// One step in which (layer, expert) is looked up once and its admission declined by the gate.
void expect_one_use_declined(ExpertCache& c, int layer, int expert) {
  c.begin_step(true);
  EXPECT_FALSE(c.lookup(layer, expert));
  bool declined = false;
  EXPECT_FALSE(c.admit(layer, expert, nullptr, &declined));
  EXPECT_TRUE(declined);
  c.end_step();
}

// The gate: a miss used less often lately than CLOCK's victim stays out (no copy), one used as
// often or more gets in; the counts halve every age_every lookups, so popularity can move.
TEST(ExpertCache, TheGateKeepsPopularExpertsAgainstOneOffMisses) {
  ExpertCache c(1, 8, 2, CachePolicy{.frequency_gate = true, .age_every = 1000});
  for (int step = 0; step < 3; ++step) {
    c.begin_step(true);
    for (int e : {0, 1})
      if (!c.lookup(0, e)) ASSERT_TRUE(c.admit(0, e));  // empty slots: no victim to beat
    c.end_step();
  }
  EXPECT_EQ(c.uses(0, 0), 3u);
  expect_one_use_declined(c, 0, 5);
  EXPECT_TRUE(c.slot_of(0, 0) && c.slot_of(0, 1));
  EXPECT_EQ(c.declined(), 1u);
  // Expert 5 becomes as used as the residents: it replaces one of them.
  for (int step = 0; step < 2; ++step) {
    c.begin_step(true);
    EXPECT_FALSE(c.lookup(0, 5));
    c.end_step();
  }
  c.begin_step(true);
  EXPECT_FALSE(c.lookup(0, 5));
  std::pair<int, int> ev;
  bool declined = true;
  ASSERT_TRUE(c.admit(0, 5, &ev, &declined));
  EXPECT_FALSE(declined);
  EXPECT_TRUE(ev == std::make_pair(0, 0) || ev == std::make_pair(0, 1));
  c.end_step();
  // Ageing: 1000 lookups in all halve every count (expert 5: 4 → 2 after the 1000th).
  ExpertCache a(1, 8, 2, CachePolicy{.frequency_gate = true, .age_every = 10});
  for (int i = 0; i < 4; ++i) a.lookup(0, 5);
  for (int i = 0; i < 5; ++i) a.lookup(0, 6);
  EXPECT_EQ(a.uses(0, 5), 4u);
  a.lookup(0, 6);  // the 10th lookup
  EXPECT_EQ(a.uses(0, 5), 2u);
  EXPECT_EQ(a.uses(0, 6), 3u);
}

// A miss the gate declines costs no copy budget: the next layer's miss still gets in.
TEST(ExpertCache, ADeclinedMissCostsNoBudget) {
  ExpertCache c(2, 8, 2);
  int first = 0;
  c.begin_step(true);
  ASSERT_EQ(admit_step(c, {{0, 1}, {}}, 8, &first).size(), 2u);  // both slots, one use each
  c.end_step();
  for (int i = 0; i < 3; ++i) c.lookup(0, 0), c.lookup(0, 1);  // four uses each
  for (int i = 0; i < 5; ++i) c.lookup(1, 3);                  // five (six with the step's)
  // Budget 1: layer 0's newcomer 7 (one use) is declined at no cost, so layer 1's expert 3 gets in.
  first = 0;
  c.begin_step(true);
  const std::vector<Admission> got = admit_step(c, {{7}, {3}}, 1, &first);
  c.end_step();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].layer, 1);
  EXPECT_EQ(got[0].expert, 3);
  EXPECT_FALSE(c.slot_of(0, 7));
  EXPECT_EQ(c.declined(), 1u);
}

// The window (W-TinyLFU): a newcomer enters it ungated; when it is full, its CLOCK victim
// competes with the main region's on recent uses and the loser leaves — the winner stays in its
// slot and the two slots swap regions (no block moves).
TEST(ExpertCache, TheWindowTakesNewcomersAndPromotesTheMoreUsed) {
  ExpertCache c(1, 16, 4, CachePolicy{.frequency_gate = true, .age_every = 1000, .window = 0.25});  // 1 window slot
  auto use = [&](int e, int times) {
    for (int i = 0; i < times; ++i) {
      c.begin_step(true);
      if (!c.lookup(0, e)) c.admit(0, e);
      c.end_step();
    }
  };
  for (int e : {0, 1, 2, 3}) use(e, 1);  // fills the cache
  use(4, 1);   // newcomer, one use: enters the window; the window's victim (one use) competes with
               // a main victim (one use): ties keep the main one, so the window's old expert leaves
  EXPECT_TRUE(c.slot_of(0, 4));
  int resident = 0;
  for (int e : {0, 1, 2, 3}) resident += c.slot_of(0, e).has_value();
  EXPECT_EQ(resident, 3);
  use(4, 5);   // expert 4, now the most used, sits in the window
  use(9, 1);   // the next newcomer: 4 beats a main victim and is promoted, 9 takes that victim's slot
  EXPECT_TRUE(c.slot_of(0, 4));
  EXPECT_TRUE(c.slot_of(0, 9));
  resident = 0;
  for (int e : {0, 1, 2, 3}) resident += c.slot_of(0, e).has_value();
  EXPECT_EQ(resident, 2);
}

// On the benchmark's synthetic trace (per-layer Zipf 0.8, locality 0.3) at the engine's copy
// budget, the gate keeps more hits with a fraction of the copies (tools/tier-sim measures the
// same; docs/perf.md "The cache's admission gate").
TEST(ExpertCache, TheGateRaisesTheHitRateOnTheSyntheticTrace) {
  const TraceShape shape;  // 42 × 288, top-8
  auto run = [&](bool gate, double* copies_per_step) {
    SyntheticTrace t(shape, SyntheticTraceOptions{});
    ExpertCache c(shape.layers, shape.experts, 1313, CachePolicy{.frequency_gate = gate});
    int first = 0;
    uint64_t hits = 0, total = 0, copies = 0;
    for (int step = 0; step < 3000; ++step) {
      const TokenRoute r = t.next();
      std::vector<std::vector<int32_t>> used(r.begin(), r.end());
      if (step >= 1000)
        for (int l = 0; l < shape.layers; ++l)
          for (int32_t e : used[l]) hits += c.slot_of(l, e).has_value(), ++total;
      c.begin_step(true);
      const size_t n = admit_step(c, used, 32, &first).size();
      c.end_step();
      if (step >= 1000) copies += n;
    }
    *copies_per_step = static_cast<double>(copies) / 2000;
    return static_cast<double>(hits) / static_cast<double>(total);
  };
  double clock_copies = 0, gate_copies = 0;
  const double clock = run(false, &clock_copies), gated = run(true, &gate_copies);
  EXPECT_GT(gated, clock + 0.08) << "clock " << clock << ", gated " << gated;
  EXPECT_LT(gate_copies, clock_copies / 4) << "clock " << clock_copies << ", gated " << gate_copies;
}

TEST(ExpertCache, AdmissionsNeverEvictWhatTheStepUsed) {
  ExpertCache c(2, 8, 2);
  int first = 0;
  c.begin_step(true);
  ASSERT_EQ(admit_step(c, {{0}, {0}}, 8, &first).size(), 2u);  // both slots taken
  c.end_step();
  // The next step uses both cached experts and misses two more: both slots are pinned by its
  // hits, so nothing is admitted (and the step's picks stay where they are).
  c.begin_step(true);
  EXPECT_TRUE(admit_step(c, {{0, 5}, {0, 6}}, 8, &first).empty());
  c.end_step();
  EXPECT_TRUE(c.slot_of(0, 0) && c.slot_of(1, 0));
  // Admission off (a large prefill chunk): lookups count, nothing is admitted.
  c.begin_step(false);
  EXPECT_TRUE(admit_step(c, {{1}, {1}}, 8, &first).empty());
  c.end_step();
  EXPECT_EQ(c.totals().misses, 6u);  // 2 + 2 + 2
  EXPECT_EQ(c.totals().hits, 2u);
  EXPECT_EQ(c.totals().admissions, 2u);
}

TEST(ExpertCache, WarmStartPlacesTheMostUsedExperts) {
  ExpertCache c(2, 4, 3);
  const std::vector<std::vector<uint64_t>> counts = {{5, 0, 9, 1}, {7, 7, 0, 2}};
  const auto placed = c.warm_start(counts);
  ASSERT_EQ(placed.size(), 3u);
  EXPECT_TRUE(c.slot_of(0, 2));  // 9
  EXPECT_TRUE(c.slot_of(1, 0));  // 7 (tie with (1, 1): lower key first)
  EXPECT_TRUE(c.slot_of(1, 1));  // 7
  EXPECT_FALSE(c.slot_of(0, 0));
  test::TempDir d;
  {
    std::ofstream f(d / "stats.txt");
    f << "# layer counts\n0 5 0 9 1\n1 7 7 0 2\n";
  }
  EXPECT_EQ(read_routing_stats(d / "stats.txt", 2, 4), counts);
  write_routing_stats(d / "written.txt", counts);
  EXPECT_EQ(read_routing_stats(d / "written.txt", 2, 4), counts);
  // A cache's own counts: every lookup, never aged (the gate's counts halve, these do not).
  ExpertCache u(2, 4, 1, CachePolicy{.frequency_gate = true, .age_every = 2});
  for (int i = 0; i < 3; ++i) u.lookup(1, 2);
  u.lookup(0, 3);
  const std::vector<std::vector<uint64_t>> used = {{0, 0, 0, 1}, {0, 0, 3, 0}};
  EXPECT_EQ(u.use_counts(), used);
  EXPECT_LT(u.uses(1, 2), 3u);
  {
    std::ofstream f(d / "bad.txt");
    f << "3 1 2 3 4\n";
  }
  EXPECT_THROW(read_routing_stats(d / "bad.txt", 2, 4), Error);
}

// The warm start seeds the gate's counts (half an ageing window in all, in the file's
// proportions): the placed experts hold against a newcomer's single use, and real traffic takes
// over as the counts age.
TEST(ExpertCache, AWarmStartSeedsTheGate) {
  ExpertCache c(1, 8, 2, CachePolicy{.frequency_gate = true, .age_every = 40});
  ASSERT_EQ(c.warm_start({{30, 10, 0, 0, 0, 0, 0, 0}}).size(), 2u);
  EXPECT_EQ(c.uses(0, 0), 15u);  // 30 of 40 counts → 15 of the 20 a half window holds
  EXPECT_EQ(c.uses(0, 1), 5u);
  expect_one_use_declined(c, 0, 5);
  // Expert 5 used in every step, expert 1 never again: 5 overtakes 1 and gets its slot.
  bool in = false;
  for (int step = 0; step < 12 && !in; ++step) {
    c.begin_step(true);
    c.lookup(0, 0);
    if (!c.lookup(0, 5)) in = c.admit(0, 5).has_value();
    c.end_step();
  }
  EXPECT_TRUE(in);
  EXPECT_TRUE(c.slot_of(0, 0));
  EXPECT_FALSE(c.slot_of(0, 1));
}

TEST(SplitModel, ModesAndTheFastestSplit) {
  TierRates r;
  r.cpu_expert = 100, r.cpu_row = 30, r.zc_expert = 60, r.zc_row = 1, r.hit_expert = 5, r.handoff = 20;
  const std::vector<Miss> m = {{3, 1}, {7, 1}, {9, 4}, {11, 1}, {20, 1}, {25, 2}};
  const LayerSplit ex = split_misses(r, TierMode::Exact, m, 10);
  EXPECT_TRUE(ex.cpu.empty());
  EXPECT_EQ(ex.zero_copy.size(), 6u);
  EXPECT_DOUBLE_EQ(ex.gpu_us, 10 * 5 + 6 * 60 + 3 + 1);
  const LayerSplit cpu = split_misses(r, TierMode::Cpu, m, 10);
  EXPECT_TRUE(cpu.zero_copy.empty());
  EXPECT_DOUBLE_EQ(cpu.cpu_us, 20 + 6 * 100 + 3 * 30 + 30);
  const LayerSplit f = split_misses(r, TierMode::Fast, m, 10);
  EXPECT_FALSE(f.cpu.empty());
  EXPECT_FALSE(f.zero_copy.empty());
  EXPECT_LT(f.finish_us, std::min(ex.finish_us, cpu.finish_us));
  // Exhaustive check: no other split of the sorted misses finishes sooner.
  for (int mask = 0; mask < 64; ++mask) {
    double g = 10 * 5, c = 0;
    bool any = false;
    for (int i = 0; i < 6; ++i)
      if (mask & (1 << i)) c += r.cpu_expert + r.cpu_row * (m[i].rows - 1), any = true;
      else g += r.zc_expert + r.zc_row * (m[i].rows - 1);
    if (any) c += r.handoff;
    EXPECT_LE(f.finish_us, std::max(g, c) + 1e-9) << "mask " << mask;
  }
  // When rows cost the CPU far more than the GPU, the many-row expert is the one kept on the GPU.
  TierRates rows_dear = r;
  rows_dear.cpu_row = 1000;
  const LayerSplit rd = split_misses(rows_dear, TierMode::Fast, m, 10);
  EXPECT_TRUE(std::count(rd.zero_copy.begin(), rd.zero_copy.end(), 9));
  EXPECT_FALSE(rd.cpu.empty());
  // A hand-off dearer than the whole layer keeps everything on the GPU.
  r.handoff = 1e6;
  EXPECT_TRUE(split_misses(r, TierMode::Fast, m, 10).cpu.empty());
  EXPECT_THROW(parse_tier_mode("fastest"), Error);
  EXPECT_EQ(parse_tier_mode("exact"), TierMode::Exact);
}

// The running rates follow what layers really take, from wrong start-up values, and one
// outlier (a stalled call) moves a rate by a bounded step, not to the outlier.
TEST(SplitRates, FollowObservedLayersAndBoundOutliers) {
  TierRates start;
  start.cpu_expert = 200, start.cpu_row = 40, start.handoff = 30;
  start.zc_expert = 100, start.zc_row = 2, start.hit_expert = 10;
  SplitRates fit(start, 0.1);
  const double cpu = 350, hit = 25, zc = 300;
  for (int i = 0; i < 200; ++i) {
    const int experts = 1 + i % 6, z = 1 + (i / 3) % 5;
    fit.observe_cpu(experts, 0, start.handoff + cpu * experts);
    fit.observe_gpu(1, z, 0, hit + zc * z);
    fit.observe_gpu(2, 0, 0, 2 * hit);
  }
  const TierRates& r = fit.rates();
  EXPECT_NEAR(r.cpu_expert, cpu, 1.0);
  EXPECT_NEAR(r.hit_expert, hit, 1.0);
  EXPECT_NEAR(r.zc_expert, zc, 2.0);
  EXPECT_DOUBLE_EQ(r.handoff, start.handoff);
  EXPECT_NEAR(r.cpu_row / r.cpu_expert, start.cpu_row / start.cpu_expert, 1e-12);  // the per-row ratio stays
  EXPECT_EQ(fit.observations(), 600u);
  // A 1000× stall: at most a factor 4 for that sample, i.e. 1 + 0.1·3 = 1.3× the rate.
  const double before = fit.rates().cpu_expert;
  fit.observe_cpu(1, 0, 1000 * cpu);
  EXPECT_LE(fit.rates().cpu_expert, 1.3 * before + 1e-9);
  EXPECT_GT(fit.rates().cpu_expert, before);
  // Frozen rates ignore what they see; nonsense timings are ignored too.
  SplitRates frozen(start);
  frozen.freeze(true);
  frozen.observe_cpu(3, 0, 1e6);
  frozen.observe_gpu(1, 1, 0, 1e6);
  EXPECT_DOUBLE_EQ(frozen.rates().cpu_expert, start.cpu_expert);
  EXPECT_DOUBLE_EQ(frozen.rates().zc_expert, start.zc_expert);
  SplitRates sane(start);
  sane.observe_cpu(0, 0, 50);
  sane.observe_gpu(0, 0, 0, 50);
  sane.observe_cpu(2, 0, -1);
  EXPECT_EQ(sane.observations(), 0u);
}

// A CPU tier shared with another busy gpu-worker answers later (its batches queue behind the
// other's): the observed per-expert time grows, and the split sends this worker's misses to
// zero-copy instead, until the two sides finish together again.
TEST(SplitRates, ACpuTierSharedWithABusyClientGetsFewerMisses) {
  TierRates start;
  start.cpu_expert = 300, start.cpu_row = 60, start.handoff = 100;
  start.zc_expert = 200, start.zc_row = 1, start.hit_expert = 10;
  SplitRates fit(start, 0.1);
  std::vector<Miss> m;
  for (int e = 0; e < 8; ++e) m.push_back({e * 7, 1});
  const size_t alone = split_misses(fit.rates(), TierMode::Fast, m, 0).cpu.size();
  ASSERT_GT(alone, 2u);
  // Another client keeps the pool busy: every call now also waits for one batch of its own size.
  for (int i = 0; i < 60; ++i) {
    const int experts = 3;
    fit.observe_cpu(experts, 0, start.handoff + 2 * start.cpu_expert * experts);
  }
  EXPECT_NEAR(fit.rates().cpu_expert, 2 * start.cpu_expert, 0.05 * start.cpu_expert);
  const LayerSplit shared = split_misses(fit.rates(), TierMode::Fast, m, 0);
  EXPECT_LT(shared.cpu.size(), alone);
  EXPECT_GT(shared.zero_copy.size(), m.size() - alone);
}

TEST(RoutingTrace, SkewLocalityAndTheFileFormat) {
  TraceShape shape{4, 64, 8};
  SyntheticTraceOptions skewed{1.1, 0.0, 7}, uniform{0.0, 0.0, 7}, local{0.0, 0.5, 7};
  auto hit_rate = [&](const SyntheticTraceOptions& o) {
    SyntheticTrace t(shape, o);
    // A quarter of the experts, plain CLOCK: the gate would discount the recency this measures.
    ExpertCache c(shape.layers, shape.experts, 4 * 16, CachePolicy{.frequency_gate = false});
    uint64_t hits = 0, total = 0;
    for (int i = 0; i < 2000; ++i) {
      const TokenRoute r = t.next();
      c.begin_step(true);
      for (int l = 0; l < shape.layers; ++l) {
        EXPECT_EQ(r[l].size(), 8u);
        EXPECT_TRUE(std::is_sorted(r[l].begin(), r[l].end()));
        EXPECT_EQ(std::set<int>(r[l].begin(), r[l].end()).size(), 8u);
        for (int e : r[l]) {
          ++total;
          if (c.lookup(l, e)) ++hits;
          else c.admit(l, e);
        }
      }
      c.end_step();
    }
    return static_cast<double>(hits) / total;
  };
  const double hs = hit_rate(skewed), hu = hit_rate(uniform), hl = hit_rate(local);
  EXPECT_GT(hs, hu + 0.15) << "skew must raise the hit rate";
  EXPECT_GT(hl, hu + 0.1) << "locality must raise the hit rate";
  // Round trip through the file format.
  SyntheticTrace t(shape, skewed);
  std::vector<TokenRoute> toks;
  for (int i = 0; i < 10; ++i) toks.push_back(t.next());
  test::TempDir d;
  write_trace(d / "t.trace", shape, toks);
  TraceShape back;
  EXPECT_EQ(read_trace(d / "t.trace", &back), toks);
  EXPECT_EQ(back.experts, 64);
  {
    std::ofstream f(d / "bad.trace");
    f << "flashtier-routing-trace 1 1 4 2\n3 1\n";
  }
  EXPECT_THROW(read_trace(d / "bad.trace", nullptr), Error);
}

TEST(RoutingTrace, StreamsWithOnePopularitySeedShareTheirPopularExperts) {
  const TraceShape shape{2, 64, 4};
  auto most_popular = [&](uint64_t seed, uint64_t popularity) {
    SyntheticTraceOptions o;
    o.zipf_s = 1.2;
    o.locality = 0;
    o.seed = seed;
    o.popularity_seed = popularity;
    SyntheticTrace t(shape, o);
    std::vector<int> count(64);
    std::vector<std::vector<int>> picks;
    for (int i = 0; i < 2000; ++i) {
      const TokenRoute r = t.next();
      for (int e : r[0]) ++count[e];
      picks.push_back(r[0]);
    }
    return std::make_pair(static_cast<int>(std::max_element(count.begin(), count.end()) - count.begin()), picks);
  };
  const auto a = most_popular(11, 7), b = most_popular(12, 7), c = most_popular(12, 0);
  EXPECT_EQ(a.first, b.first);     // one model: the same popular expert
  EXPECT_NE(a.second, b.second);   // two sequences: different picks
  // Without a popularity seed the ranking follows the stream's own seed (the old behaviour).
  EXPECT_EQ(c.first, most_popular(12, 0).first);
}

TEST(SyntheticSegment, IdentitiesAliasAPoolOfRealBlocksThatAttachAndCompute) {
  const ModelConfig c = load_config(test::fixture("glm5-tiny-exl3/model"));
  SyntheticSegmentOptions o;
  o.name = "flashtier-test-synthetic-" + std::to_string(::getpid());
  o.K = 3;
  o.threads = 2;
  int n_moe = 0;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) n_moe += c.is_moe(l);
  ASSERT_GT(n_moe, 0);
  const uint64_t identities = static_cast<uint64_t>(n_moe) * static_cast<uint64_t>(c.n_routed_experts);
  // A pool of 3 blocks and a bit: identities must share them.
  exl3::ExpertGeometry g;
  g.hidden = c.hidden_size;
  g.inter = c.moe_intermediate_size;
  for (int p = 0; p < 3; ++p) g.K[p] = 3;
  const uint64_t block = exl3::plan_expert_block(g).block_bytes;
  o.pool_bytes = 3 * block + block / 2;
  const SyntheticSegmentInfo info = build_synthetic_segment(c, o);
  struct Cleanup {
    std::string n;
    ~Cleanup() { ipc::ShmMapping::remove(n); }
  } cleanup{o.name};
  EXPECT_EQ(info.identities, identities);
  EXPECT_EQ(info.distinct_blocks, std::min<uint64_t>(3, identities));
  EXPECT_EQ(info.block_bytes, block);

  std::string why;
  auto seg = ipc::ExpertSegment::attach(o.name, "", &why);
  ASSERT_TRUE(seg) << why;
  const ipc::SegmentHeader& h = seg->header();
  EXPECT_EQ(h.n_moe_layers, static_cast<uint32_t>(n_moe));
  EXPECT_EQ(h.n_experts, static_cast<uint32_t>(c.n_routed_experts));
  EXPECT_EQ(h.total_bytes, h.data_offset + info.distinct_blocks * block);
  exl3::ThreadPool pool(1, false);
  std::vector<float> x(static_cast<size_t>(c.hidden_size)), y(x.size());
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (float& v : x) v = nd(rng);
  std::set<uint64_t> offsets;
  for (int m = 0; m < n_moe; ++m)
    for (int e = 0; e < static_cast<int>(c.n_routed_experts); ++e) {
      const ipc::BlockDesc& b = seg->block(m, static_cast<uint32_t>(e));
      EXPECT_EQ(b.offset, h.data_offset + synthetic_block_of(m, e, static_cast<int>(c.n_routed_experts), 3) * block);
      EXPECT_EQ(b.format, static_cast<uint32_t>(ipc::BlockFormat::Exl3));
      EXPECT_EQ(b.layer, h.moe_layers[m]);
      EXPECT_EQ(b.proj[2].out, static_cast<uint32_t>(c.hidden_size));
      offsets.insert(b.offset);
      const exl3::ExpertView v = exl3::view_expert_block(seg->block_data(b));
      EXPECT_EQ(v.header->proj[0].K, 3u);
      EXPECT_EQ(v.header->proj[0].codebook, static_cast<uint32_t>(exl3::Codebook::Mul1));
    }
  EXPECT_EQ(offsets.size(), info.distinct_blocks);
  // The random experts keep a unit-sized input near unit size (the benchmark's activations stay
  // finite through 45 layers).
  exl3::expert_forward(seg->block_data(seg->block(0, 0)), x.data(), 1, y.data(), pool,
                       static_cast<float>(c.swiglu_limit));
  double ss = 0;
  for (float v : y) {
    ASSERT_TRUE(std::isfinite(v));
    ss += static_cast<double>(v) * v;
  }
  const double rms = std::sqrt(ss / static_cast<double>(y.size()));
  EXPECT_GT(rms, 1e-3);
  EXPECT_LT(rms, 10.0);
}

TEST(ExpertCache, PrefillStagingBorrowsSlotsAndGivesTheirExpertsBack) {
  ExpertCache c(1, 16, 6);
  c.begin_step(true);
  for (int e = 0; e < 6; ++e) {
    ASSERT_FALSE(c.lookup(0, e));
    ASSERT_TRUE(c.admit(0, e));
  }
  c.end_step();
  // The last 2 slots are lent: their experts leave the cache.
  std::vector<std::pair<int, int>> gone;
  std::vector<int> lent_slots;
  for (int s = 4; s < 6; ++s) {
    gone.push_back(c.owner(s));
    lent_slots.push_back(s);
  }
  auto out = c.lend(2);
  std::sort(out.begin(), out.end());
  std::sort(gone.begin(), gone.end());
  EXPECT_EQ(out, gone);
  EXPECT_EQ(c.lent(), 2);
  EXPECT_EQ(c.first_lent_slot(), 4);
  for (const auto& [l, e] : gone) EXPECT_FALSE(c.slot_of(l, e));
  EXPECT_TRUE(c.lend(3).empty());  // already lent: unchanged
  EXPECT_EQ(c.lent(), 2);
  // Admissions while lent never touch the lent slots.
  for (int round = 0; round < 4; ++round) {
    c.begin_step(true);
    for (int e = 6; e < 16; ++e) {
      if (c.lookup(0, e)) continue;
      const auto s = c.admit(0, e);
      if (s) {
        EXPECT_LT(*s, 4);
      }
    }
    c.end_step();
  }
  for (int s = 4; s < 6; ++s) EXPECT_EQ(c.owner(s).first, -1);
  // Give back: the evicted experts return (none of them was re-admitted meanwhile).
  auto back = c.give_back();
  std::sort(back.begin(), back.end());
  EXPECT_EQ(back, gone);
  EXPECT_EQ(c.lent(), 0);
  for (size_t i = 0; i < back.size(); ++i) EXPECT_TRUE(c.restore(lent_slots[i], back[i].first, back[i].second));
  for (const auto& [l, e] : gone) EXPECT_TRUE(c.slot_of(l, e));
  EXPECT_FALSE(c.restore(lent_slots[0], 0, 15));  // taken
}
