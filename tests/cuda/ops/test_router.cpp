// route_tokens against shared/ops/router route() (fed the logits through an identity router
// weight, which reproduces them exactly): E = 288 top-8 without groups and with n_group 8 /
// topk_group 4, tiny E = 16 top-4 with n_group 4 / topk_group 2, unnormalised weights, every
// expert chosen; N = 1, 3, 17, 300. Expert sets must be identical (rows whose reference margin is
// below 1e-4 are skipped: fp32 rounding may flip them), weights ≤ 1e-6 relative, margins ≤ 1e-6,
// output ascending. Planted exact ties (experts and groups) must go to the lower id, with no
// skipping. Batch invariance: a token alone and in reverse order give the same bits.
#include "gpu-worker/backends/cuda/ops/router.h"

#include <algorithm>
#include <numeric>
#include <random>
#include <sstream>

#include "gpu-worker/backends/cuda/ops/moe.h"
#include "shared/ops/router.h"
#include "tests/cuda/ops/misc_checks.h"

namespace ft::cuda {
namespace {

using test::DevBuf;
using test::misc::expect_same_bits;

class CudaRouter : public test::GpuTest {};

struct GpuRoutes {
  std::vector<int32_t> experts;
  std::vector<float> weights, margin;
};

GpuRoutes gpu_route(const std::vector<float>& logits, int64_t N, const std::vector<float>& bias,
                    const RouterConfig& cfg, int64_t first = 0, int64_t count = -1) {
  if (count < 0) count = N - first;
  const int64_t E = cfg.n_experts, K = cfg.top_k;
  DevBuf<float> l(logits), b(bias), w(static_cast<size_t>(count * K)), m(static_cast<size_t>(count));
  DevBuf<int32_t> e(static_cast<size_t>(count * K));
  route_tokens(l.get() + first * E, E, count, b.get(), cfg, e.get(), w.get(), m.get(), nullptr);
  return GpuRoutes{e.download(), w.download(), m.download()};
}

std::vector<Routing> reference(const std::vector<float>& logits, int64_t N, const std::vector<float>& bias,
                               const RouterConfig& cfg) {
  const int64_t E = cfg.n_experts;
  std::vector<float> eye(static_cast<size_t>(E * E), 0.0f);
  for (int64_t e = 0; e < E; ++e) eye[e * E + e] = 1.0f;
  const RouterParams p{eye.data(),
                       bias.data(),
                       E,
                       E,
                       cfg.top_k,
                       cfg.n_group,
                       cfg.topk_group,
                       cfg.norm_topk_prob,
                       cfg.routed_scaling_factor};
  std::vector<Routing> r(static_cast<size_t>(N));
  for (int64_t t = 0; t < N; ++t) r[t] = route(p, logits.data() + t * E);
  return r;
}

std::string label(const RouterConfig& c, int64_t N) {
  std::ostringstream s;
  s << "E " << c.n_experts << " top " << c.top_k << " groups " << c.n_group << "/" << c.topk_group
    << (c.norm_topk_prob ? " norm" : " raw") << " x" << c.routed_scaling_factor << " N " << N;
  return s.str();
}

template <class T>
std::string list(const T* v, int64_t n) {
  std::ostringstream s;
  for (int64_t i = 0; i < n; ++i) s << (i ? "," : "") << v[i];
  return s.str();
}

// Compares every row; rows whose reference margin is below min_margin are only checked for a
// well-formed output. Returns the number of skipped rows.
int64_t compare(const std::string& what, const GpuRoutes& g, const std::vector<Routing>& ref,
                const std::vector<float>& logits, const std::vector<float>& bias, const RouterConfig& cfg,
                float min_margin) {
  const int64_t K = cfg.top_k, E = cfg.n_experts, N = static_cast<int64_t>(ref.size());
  int64_t skipped = 0, mismatched = 0;
  for (int64_t t = 0; t < N; ++t) {
    const int32_t* ge = g.experts.data() + t * K;
    const float* gw = g.weights.data() + t * K;
    bool ok = true;
    for (int64_t k = 0; k < K; ++k) ok &= ge[k] >= 0 && ge[k] < E && (k == 0 || ge[k] > ge[k - 1]);
    EXPECT_TRUE(ok) << what << " row " << t << ": experts not strictly ascending ids in [0, E): " << list(ge, K);
    const Routing& r = ref[t];
    if (!(r.margin >= min_margin)) {
      ++skipped;
      continue;
    }
    if (!std::equal(r.experts.begin(), r.experts.end(), ge)) {
      if (++mismatched <= 4) {
        std::ostringstream s;
        for (int64_t k = 0; k < K; ++k) {
          const int32_t e = r.experts[k];
          s << " ref " << e << " c=" << 1.0f / (1.0f + std::exp(-logits[t * E + e])) + bias[e];
        }
        ADD_FAILURE() << what << " row " << t << ": experts " << list(ge, K) << " expected "
                      << list(r.experts.data(), K) << " (ref margin " << r.margin << ";" << s.str() << ")";
      }
      continue;
    }
    for (int64_t k = 0; k < K; ++k) {
      const double want = r.weights[k], d = std::fabs(static_cast<double>(gw[k]) - want);
      EXPECT_LE(d, 1e-6 * std::fabs(want) + 1e-30)
          << what << " row " << t << " expert " << ge[k] << ": weight " << gw[k] << " expected " << want;
    }
    const float gm = g.margin[t];
    if (std::isinf(r.margin)) {
      EXPECT_TRUE(std::isinf(gm) && gm > 0) << what << " row " << t << " margin " << gm;
    } else {
      EXPECT_NEAR(gm, r.margin, 1e-6) << what << " row " << t;
    }
  }
  EXPECT_EQ(mismatched, 0) << what << ": rows whose experts differ from route()";
  return skipped;
}

std::vector<RouterConfig> configs() {
  return {
      {288, 8, 1, 1, true, 2.5f}, {288, 8, 8, 4, true, 2.5f}, {288, 8, 8, 4, false, 2.5f},
      {16, 4, 4, 2, true, 1.5f},  {16, 4, 1, 1, false, 2.5f}, {16, 16, 1, 1, true, 1.0f},
  };
}

TEST_F(CudaRouter, MatchesRouteOnRandomLogits) {
  uint64_t seed = 1;
  for (const RouterConfig& cfg : configs())
    for (int64_t N : {1, 3, 17, 300}) {
      const int64_t E = cfg.n_experts;
      const std::vector<float> logits = test::randn(static_cast<size_t>(N * E), seed++, 2.0f);
      const std::vector<float> bias = test::randn(static_cast<size_t>(E), seed++, 0.1f);
      const GpuRoutes g = gpu_route(logits, N, bias, cfg);
      const int64_t skipped = compare(label(cfg, N), g, reference(logits, N, bias, cfg), logits, bias, cfg, 1e-4f);
      EXPECT_LE(skipped * 10, N) << label(cfg, N) << ": " << skipped << " rows skipped as near ties (test too weak)";
    }
}

// Rows with exact ties across the selection boundary: `win` clear winners, a tie group of `tied`
// experts with one identical logit for the remaining top_k − win slots, and clear losers. A
// constant bias keeps the biased scores exactly tied.
TEST_F(CudaRouter, ExactTiesGoToTheLowerExpertId) {
  std::mt19937_64 rng(77);
  for (const RouterConfig& cfg : {RouterConfig{288, 8, 1, 1, true, 2.5f}, RouterConfig{16, 4, 1, 1, true, 2.5f}}) {
    const int64_t E = cfg.n_experts, K = cfg.top_k, N = 40;
    std::vector<float> logits(static_cast<size_t>(N * E));
    const std::vector<float> bias(static_cast<size_t>(E), 0.125f);
    std::vector<std::vector<int32_t>> tie_groups;
    for (int64_t t = 0; t < N; ++t) {
      const int64_t slots = 1 + t % 2, tied = slots + 1 + t % 3;  // 1 or 2 slots, 2…5 tied experts
      std::vector<int32_t> ids(static_cast<size_t>(E));
      std::iota(ids.begin(), ids.end(), 0);
      std::shuffle(ids.begin(), ids.end(), rng);
      std::uniform_real_distribution<float> hi(3.0f, 4.0f), lo(-3.0f, 0.0f);
      float* l = logits.data() + t * E;
      for (int64_t i = 0; i < E; ++i) l[ids[i]] = i < K - slots ? hi(rng) : lo(rng);
      std::vector<int32_t> group(ids.begin() + (K - slots), ids.begin() + (K - slots + tied));
      for (int32_t e : group) l[e] = 1.0f;
      std::sort(group.begin(), group.end());
      tie_groups.push_back(group);
    }
    const GpuRoutes g = gpu_route(logits, N, bias, cfg);
    const std::vector<Routing> ref = reference(logits, N, bias, cfg);
    compare(label(cfg, N) + " planted ties", g, ref, logits, bias, cfg, -INFINITY);
    for (int64_t t = 0; t < N; ++t) {  // explicitly: the chosen members of the tie group are its lowest ids
      const int64_t slots = 1 + t % 2;
      const int32_t* ge = g.experts.data() + t * K;
      const auto& grp = tie_groups[t];
      for (int64_t i = 0; i < static_cast<int64_t>(grp.size()); ++i) {
        const bool chosen = std::find(ge, ge + K, grp[i]) != ge + K;
        EXPECT_EQ(chosen, i < slots) << label(cfg, N) << " row " << t << ": tied expert " << grp[i] << " (rank " << i
                                     << " of the tie group " << list(grp.data(), grp.size()) << ") chosen=" << chosen;
      }
    }
  }
}

// Two groups with exactly equal group scores competing for the last kept group: the lower group
// id must be kept (topk over group scores, ties to the lower id), and only its experts chosen.
TEST_F(CudaRouter, GroupScoreTiesKeepTheLowerGroup) {
  std::mt19937_64 rng(91);
  for (const RouterConfig& cfg : {RouterConfig{16, 4, 4, 2, true, 2.5f}, RouterConfig{288, 8, 8, 4, true, 2.5f}}) {
    const int64_t E = cfg.n_experts, K = cfg.top_k, G = cfg.n_group, KG = cfg.topk_group, per = E / G, N = 24;
    std::vector<float> logits(static_cast<size_t>(N * E));
    const std::vector<float> bias(static_cast<size_t>(E), -0.25f);
    std::vector<std::pair<int64_t, int64_t>> tied(static_cast<size_t>(N));
    for (int64_t t = 0; t < N; ++t) {
      std::vector<int64_t> groups(static_cast<size_t>(G));
      std::iota(groups.begin(), groups.end(), 0);
      std::shuffle(groups.begin(), groups.end(), rng);
      std::uniform_real_distribution<float> hi(2.0f, 3.0f), mid(0.0f, 1.0f), lo(-4.0f, -2.0f);
      float* l = logits.data() + t * E;
      // KG − 1 groups kept for sure by two high experts each, two tied groups (the same values,
      // permuted), the rest clearly out. The tied groups' values beat the kept groups' other
      // experts, so the last top_k − 2·(KG − 1) picks come from the kept tied group.
      for (int64_t i = 0; i < G; ++i)
        for (int64_t k = 0; k < per; ++k) l[groups[i] * per + k] = i < KG - 1 && k < 2 ? hi(rng) : lo(rng);
      const int64_t a = groups[KG - 1], b = groups[KG];
      std::vector<float> vals(static_cast<size_t>(per));
      for (float& v : vals) v = mid(rng);
      for (int64_t k = 0; k < per; ++k) l[a * per + k] = vals[k];
      std::shuffle(vals.begin(), vals.end(), rng);
      for (int64_t k = 0; k < per; ++k) l[b * per + k] = vals[k];
      tied[t] = {std::min(a, b), std::max(a, b)};
    }
    const GpuRoutes g = gpu_route(logits, N, bias, cfg);
    compare(label(cfg, N) + " tied groups", g, reference(logits, N, bias, cfg), logits, bias, cfg, -INFINITY);
    for (int64_t t = 0; t < N; ++t) {
      int64_t from_lower = 0;
      for (int64_t k = 0; k < K; ++k) from_lower += g.experts[t * K + k] / per == tied[t].first;
      EXPECT_EQ(from_lower, K - 2 * (KG - 1))
          << label(cfg, N) << " row " << t << ": picks from the lower tied group " << tied[t].first;
      for (int64_t k = 0; k < K; ++k)
        EXPECT_NE(g.experts[t * K + k] / per, tied[t].second)
            << label(cfg, N) << " row " << t << ": expert " << g.experts[t * K + k] << " from the higher tied group "
            << tied[t].second << " (lower " << tied[t].first << " must win)";
    }
  }
}

TEST_F(CudaRouter, TokenBitsDoNotDependOnTheBatch) {
  for (const RouterConfig& cfg : configs()) {
    const int64_t E = cfg.n_experts, K = cfg.top_k, N = 17;
    const std::vector<float> logits = test::randn(static_cast<size_t>(N * E), 4242, 2.0f);
    const std::vector<float> bias = test::randn(static_cast<size_t>(E), 4243, 0.1f);
    const GpuRoutes all = gpu_route(logits, N, bias, cfg);
    for (int64_t t : {0, 6, 16}) {
      const GpuRoutes one = gpu_route(logits, N, bias, cfg, t, 1);
      const std::string L = label(cfg, N) + " token " + std::to_string(t) + " alone";
      expect_same_bits(L + " experts", one.experts.data(), all.experts.data() + t * K, static_cast<size_t>(K));
      expect_same_bits(L + " weights", one.weights.data(), all.weights.data() + t * K, static_cast<size_t>(K));
      expect_same_bits(L + " margin", one.margin.data(), all.margin.data() + t, 1);
    }
    std::vector<float> rev(logits.size());
    for (int64_t t = 0; t < N; ++t)
      std::copy(logits.begin() + t * E, logits.begin() + (t + 1) * E, rev.begin() + (N - 1 - t) * E);
    const GpuRoutes back = gpu_route(rev, N, bias, cfg);
    for (int64_t t = 0; t < N; ++t) {
      const std::string L = label(cfg, N) + " token " + std::to_string(t) + " reversed";
      expect_same_bits(L + " experts", back.experts.data() + (N - 1 - t) * K, all.experts.data() + t * K,
                       static_cast<size_t>(K));
      expect_same_bits(L + " weights", back.weights.data() + (N - 1 - t) * K, all.weights.data() + t * K,
                       static_cast<size_t>(K));
    }
  }
}

// The routing kernel's own dispatch (route_and_dispatch, one warp sorting ≤ 32 picks): the
// experts and weights of route_tokens and the arrays of moe_dispatch, bit for bit, for 1 … 4
// tokens — 32 picks at 4 × top-8 — and grouped routing; 5 tokens (or 40 picks) fall back.
TEST_F(CudaRouter, RouteAndDispatchGivesTheSeparateLaunchesArrays) {
  std::mt19937_64 g(2027);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (const RouterConfig& cfg : {RouterConfig{288, 8, 1, 1, true, 2.5f}, RouterConfig{288, 8, 8, 4, true, 1.0f},
                                  RouterConfig{16, 4, 4, 2, false, 1.0f}, RouterConfig{40, 10, 1, 1, true, 1.0f}}) {
    const int64_t E = cfg.n_experts, K = cfg.top_k;
    for (int64_t N : {1, 2, 3, 4, 5}) {
      const std::string L = label(cfg, N);
      std::vector<float> logits(static_cast<size_t>(N * E)), bias(static_cast<size_t>(E));
      for (float& v : logits) v = nd(g);
      for (float& v : bias) v = 0.1f * nd(g);
      DevBuf<float> l(logits), b(bias);
      const MoeDispatchSizes sz = moe_dispatch_sizes(N, static_cast<int>(K), static_cast<int>(E));
      struct Run {
        DevBuf<int32_t> e, off, sorted, active, n_active;
        DevBuf<float> w;
      };
      auto make = [&] {
        return Run{DevBuf<int32_t>(static_cast<size_t>(N * K)), DevBuf<int32_t>(static_cast<size_t>(sz.offsets)),
                   DevBuf<int32_t>(static_cast<size_t>(sz.sorted_pick)), DevBuf<int32_t>(static_cast<size_t>(sz.active)),
                   DevBuf<int32_t>(static_cast<size_t>(sz.n_active)), DevBuf<float>(static_cast<size_t>(N * K))};
      };
      Run sep = make(), fused = make();
      auto disp = [](Run& r) { return MoeDispatch{r.off.get(), r.sorted.get(), r.active.get(), r.n_active.get()}; };
      route_tokens(l.get(), E, N, b.get(), cfg, sep.e.get(), sep.w.get(), nullptr, nullptr);
      moe_dispatch(MoeRoutes{sep.e.get(), sep.w.get(), N, static_cast<int>(K)}, static_cast<int>(E), disp(sep), nullptr);
      set_route_dispatch(2);
      const bool did = route_and_dispatch(l.get(), E, N, b.get(), cfg, fused.e.get(), fused.w.get(), disp(fused), nullptr);
      set_route_dispatch(1);
      const bool small = N <= 4 && N * K <= 32;
      EXPECT_EQ(did, small) << L;
      if (!did) moe_dispatch(MoeRoutes{fused.e.get(), fused.w.get(), N, static_cast<int>(K)}, static_cast<int>(E),
                             disp(fused), nullptr);
      expect_same_bits(L + " experts", fused.e.download().data(), sep.e.download().data(), static_cast<size_t>(N * K));
      expect_same_bits(L + " weights", fused.w.download().data(), sep.w.download().data(), static_cast<size_t>(N * K));
      expect_same_bits(L + " offsets", fused.off.download().data(), sep.off.download().data(),
                       static_cast<size_t>(E + 1));
      expect_same_bits(L + " sorted picks", fused.sorted.download().data(), sep.sorted.download().data(),
                       static_cast<size_t>(N * K));
      const std::vector<int32_t> na = sep.n_active.download();
      EXPECT_EQ(fused.n_active.download()[0], na[0]) << L << " active count";
      expect_same_bits(L + " active", fused.active.download().data(), sep.active.download().data(),
                       static_cast<size_t>(na[0]));
    }
  }
}

TEST_F(CudaRouter, RejectsUnsupportedConfigs) {
  DevBuf<float> b(1024);
  DevBuf<int32_t> e(64);
  for (const RouterConfig& bad : {RouterConfig{2048, 8, 1, 1, true, 1.0f}, RouterConfig{288, 33, 1, 1, true, 1.0f},
                                  RouterConfig{288, 8, 7, 1, true, 1.0f}, RouterConfig{288, 8, 8, 9, true, 1.0f},
                                  RouterConfig{16, 4, 16, 2, true, 1.0f}})
    EXPECT_THROW(route_tokens(b.get(), bad.n_experts, 1, b.get(), bad, e.get(), b.get(), nullptr, nullptr), Error)
        << label(bad, 1);
}

}  // namespace
}  // namespace ft::cuda
