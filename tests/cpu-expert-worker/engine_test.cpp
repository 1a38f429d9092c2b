// The expert engine against the in-process reference (shared/engine/local_experts.cpp), batch
// invariance, thread-count invariance, and rejected batches.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "cpu-expert-worker/expert_engine.h"
#include "cpu-expert-worker/fingerprint.h"
#include "cpu-expert-worker/segment_builder.h"
#include "shared/core/error.h"
#include "shared/engine/local_experts.h"
#include "shared/engine/weights.h"
#include "shared/model/config.h"
#include "tests/cpu-expert-worker/test_models.h"
#include "tests/ipc/child_process.h"

using namespace ft;
using namespace ft::cew;

namespace {

struct Tier {
  std::string name;
  ModelConfig cfg;
  OpenedSegment seg;
  explicit Tier(const std::string& dir) : name(test::unique_name("eng")), cfg(load_config(dir)) {
    SegmentOptions o;
    o.name = name;
    seg = open_or_build_segment(dir, cfg, model_fingerprint(dir), o);
  }
  ~Tier() { ipc::ShmMapping::remove(name); }
};

struct Batch {
  int64_t n, D, slots;
  std::vector<float> x;
  std::vector<int32_t> ids;
  std::vector<float> w;
  std::vector<Routing> routes;
  Batch(int64_t n_, const ModelConfig& c, uint32_t seed) : n(n_), D(c.hidden_size), slots(c.num_experts_per_tok) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd;
    std::uniform_real_distribution<float> uw(0.05f, 1.0f);
    x.resize(static_cast<size_t>(n * D));
    for (float& v : x) v = nd(rng);
    std::vector<int32_t> all(static_cast<size_t>(c.n_routed_experts));
    std::iota(all.begin(), all.end(), 0);
    for (int64_t t = 0; t < n; ++t) {
      std::shuffle(all.begin(), all.end(), rng);
      Routing r;
      r.experts.assign(all.begin(), all.begin() + slots);
      std::sort(r.experts.begin(), r.experts.end());
      for (int64_t k = 0; k < slots; ++k) r.weights.push_back(uw(rng));
      ids.insert(ids.end(), r.experts.begin(), r.experts.end());
      w.insert(w.end(), r.weights.begin(), r.weights.end());
      routes.push_back(std::move(r));
    }
  }
  ipc::ExpertBatch view(uint32_t layer) const {
    return {layer, static_cast<uint32_t>(n), static_cast<uint32_t>(slots), static_cast<uint32_t>(D), x.data(),
            ids.data(), w.data()};
  }
};

double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

void expect_matches_reference(const std::string& dir, double tol) {
  Tier tier(dir);
  const ModelWeights mw = load_model(dir);
  LocalExperts local(mw);
  SegmentExperts eng(tier.seg.segment, static_cast<float>(tier.cfg.swiglu_limit), 2);
  for (uint32_t layer : eng.info().moe_layers) {
    Batch b(8, tier.cfg, layer);
    std::vector<float> got(b.x.size()), want(b.x.size());
    eng.compute(b.view(layer), got.data());
    local.compute(layer, b.x.data(), b.n, b.routes, want.data(), exl3::Operands::F32);
    const double e = rel_l2(got, want);
    EXPECT_LT(e, tol) << dir << " layer " << layer;
    std::printf("%s layer %u: rel_l2 vs LocalExperts %.3e\n", dir.substr(dir.rfind("fixtures")).c_str(), layer, e);
  }
}

}  // namespace

TEST(Engine, DenseExpertsMatchTheReference) { expect_matches_reference(test::tiny_chat(), 1e-6); }

TEST(Engine, Exl3ExpertsMatchTheirDenseEquivalent) { expect_matches_reference(test::tiny_exl3(), 1e-5); }

// A token's output is the same bits alone, among 8, with its slots in another order, and with
// any number of threads.
TEST(Engine, ResultsDoNotDependOnTheBatch) {
  for (const std::string& dir : {test::tiny_chat(), test::tiny_exl3()}) {
    Tier tier(dir);
    SegmentExperts one(tier.seg.segment, static_cast<float>(tier.cfg.swiglu_limit), 1);
    SegmentExperts three(tier.seg.segment, static_cast<float>(tier.cfg.swiglu_limit), 3);
    const uint32_t layer = one.info().moe_layers.back();
    Batch b(8, tier.cfg, 77);
    std::vector<float> all(b.x.size()), all3(b.x.size());
    one.compute(b.view(layer), all.data());
    three.compute(b.view(layer), all3.data());
    EXPECT_EQ(all, all3) << dir << ": thread count changed the result";
    for (int64_t t = 0; t < b.n; ++t) {
      ipc::ExpertBatch single = b.view(layer);
      single.n_tokens = 1;
      single.x += t * b.D;
      // Reversed slot order: the worker sorts by expert id before summing.
      std::vector<int32_t> ids(b.ids.begin() + t * b.slots, b.ids.begin() + (t + 1) * b.slots);
      std::vector<float> w(b.w.begin() + t * b.slots, b.w.begin() + (t + 1) * b.slots);
      std::reverse(ids.begin(), ids.end());
      std::reverse(w.begin(), w.end());
      single.expert_ids = ids.data();
      single.weights = w.data();
      std::vector<float> alone(static_cast<size_t>(b.D));
      three.compute(single, alone.data());
      EXPECT_TRUE(std::equal(alone.begin(), alone.end(), all.begin() + t * b.D)) << dir << " token " << t;
    }
  }
}

TEST(Engine, UnusedSlotsAndEmptyBatches) {
  Tier tier(test::tiny_chat());
  SegmentExperts eng(tier.seg.segment, static_cast<float>(tier.cfg.swiglu_limit), 2);
  const uint32_t layer = eng.info().moe_layers[0];
  Batch b(3, tier.cfg, 5);
  std::vector<float> full(b.x.size());
  eng.compute(b.view(layer), full.data());
  // Token 1 with its last expert dropped equals a batch that marks that slot −1.
  Batch c = b;
  c.ids[1 * c.slots + c.slots - 1] = -1;
  std::vector<float> dropped(c.x.size());
  eng.compute(c.view(layer), dropped.data());
  EXPECT_TRUE(std::equal(dropped.begin(), dropped.begin() + c.D, full.begin()));
  EXPECT_FALSE(std::equal(dropped.begin() + c.D, dropped.begin() + 2 * c.D, full.begin() + c.D));
  // No experts at all: zeros.
  std::fill(c.ids.begin(), c.ids.end(), -1);
  eng.compute(c.view(layer), dropped.data());
  EXPECT_TRUE(std::all_of(dropped.begin(), dropped.end(), [](float v) { return v == 0.0f; }));
  ipc::ExpertBatch empty = b.view(layer);
  empty.n_tokens = 0;
  eng.compute(empty, nullptr);
}

TEST(Engine, MalformedBatchesAreRejectedWithAReason) {
  Tier tier(test::tiny_chat());
  SegmentExperts eng(tier.seg.segment, static_cast<float>(tier.cfg.swiglu_limit), 2);
  Batch b(2, tier.cfg, 9);
  std::vector<float> out(b.x.size());
  auto expect_error = [&](ipc::ExpertBatch v, const std::string& what) {
    try {
      eng.compute(v, out.data());
      ADD_FAILURE() << "accepted: " << what;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  expect_error(b.view(0), "layer 0 is not an MoE layer");
  expect_error(b.view(8), "layer 8 is out of range");
  ipc::ExpertBatch v = b.view(3);
  v.hidden = 32;
  expect_error(v, "hidden size 32 does not match the model's 64");
  Batch bad = b;
  bad.ids[3] = 16;
  expect_error(bad.view(3), "expert id 16 (token 0, slot 3) is out of range");
  bad.ids[3] = -2;
  expect_error(bad.view(3), "expert id -2");
  v = b.view(3);
  v.flags = 6;
  expect_error(v, "batch flags 6 carry bits this worker does not know");
  // Still serving afterwards.
  eng.compute(b.view(3), out.data());
}
