// The expert tiers' host-side policy: the VRAM cache's CLOCK replacement with per-step pinning and
// switchable admission, warm start, the CPU/zero-copy split model, and routing traces.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <set>

#include "gpu-worker/tiers/expert_cache.h"
#include "gpu-worker/tiers/routing_trace.h"
#include "gpu-worker/tiers/split_model.h"
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
  {
    std::ofstream f(d / "bad.txt");
    f << "3 1 2 3 4\n";
  }
  EXPECT_THROW(read_routing_stats(d / "bad.txt", 2, 4), Error);
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

TEST(RoutingTrace, SkewLocalityAndTheFileFormat) {
  TraceShape shape{4, 64, 8};
  SyntheticTraceOptions skewed{1.1, 0.0, 7}, uniform{0.0, 0.0, 7}, local{0.0, 0.5, 7};
  auto hit_rate = [&](const SyntheticTraceOptions& o) {
    SyntheticTrace t(shape, o);
    ExpertCache c(shape.layers, shape.experts, 4 * 16);  // a quarter of the experts
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
