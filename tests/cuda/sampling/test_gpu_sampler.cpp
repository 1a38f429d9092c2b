// GPU sampler vs shared/sampling: greedy rows vs argmax (ties, extremes), sampled rows vs
// sample_from with the uniform each GPU row drew (thousands of random configs and logits), the
// draw's stream (Philox known answers, seed/step only), batch invariance, the count update, the
// descent paths at the real vocabulary, and graph capture.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <numeric>
#include <tuple>

#include "gpu-worker/backends/cuda/sampling/logprobs.h"
#include "gpu-worker/backends/cuda/sampling/philox.h"
#include "gpu-worker/backends/cuda/sampling/order_key.h"
#include "gpu-worker/backends/cuda/sampling/sampler.h"
#include "tests/cuda/sampling/sampling_test_util.h"

namespace ft::test::sampling {
namespace {

using cuda::SampleTrace;
using cuda::SamplingRowParams;

// ---------------------------------------------------------------------------------------------
// The CPU side: sample_from split into the part that depends on (logits, temperature, top-k) and
// the part that depends on (min-p, top-p, u01), so ambiguous rows can be re-judged cheaply with
// perturbed cut parameters. Step for step the code of shared/sampling/sampler.cpp.

struct CpuCandidates {
  std::vector<int32_t> order;  // after top-k
  std::vector<double> p;       // normalised over the top-k candidates
};

CpuCandidates cpu_candidates(const std::vector<float>& y, const SamplingConfig& c) {
  const int32_t V = static_cast<int32_t>(y.size());
  CpuCandidates k;
  k.order.resize(V);
  std::iota(k.order.begin(), k.order.end(), 0);
  int32_t keep = V;
  if (c.top_k > 0 && c.top_k < V) keep = c.top_k;
  auto better = [&](int32_t a, int32_t b) { return y[a] > y[b] || (y[a] == y[b] && a < b); };
  if (keep == V) std::sort(k.order.begin(), k.order.end(), better);
  else std::partial_sort(k.order.begin(), k.order.begin() + keep, k.order.end(), better);
  k.order.resize(keep);
  const float inv_t = 1.0f / c.temperature;
  const double mx = static_cast<double>(y[k.order[0]]) * inv_t;
  k.p.resize(keep);
  double sum = 0.0;
  for (int32_t i = 0; i < keep; ++i) sum += (k.p[i] = std::exp(static_cast<double>(y[k.order[i]]) * inv_t - mx));
  for (double& x : k.p) x /= sum;
  return k;
}

struct CpuDraw {
  int32_t token = -1;
  int32_t keep = 0;
  double total = 0;  // kept probability
};

// How many candidates min-p and top-p keep.
int32_t cpu_keep(const CpuCandidates& k, float min_p, float top_p) {
  int32_t keep = static_cast<int32_t>(k.p.size());
  const std::vector<double>& p = k.p;
  if (min_p > 0.0f) {
    const double floor = min_p * p[0];
    int32_t n = 1;
    while (n < keep && p[n] >= floor) ++n;
    keep = n;
  }
  if (top_p > 0.0f && top_p < 1.0f) {
    double cum = 0.0;
    int32_t n = 0;
    while (n < keep) {
      cum += p[n++];
      if (cum >= top_p) break;
    }
    keep = n;
  }
  return keep;
}
// Where the draw lands among the first `keep` candidates (a position in k.order).
int32_t cpu_draw_pos(const CpuCandidates& k, int32_t keep, double u01) {
  double total = 0.0;
  for (int32_t i = 0; i < keep; ++i) total += k.p[i];
  const double u = u01 * total;
  double cum = 0.0;
  for (int32_t i = 0; i < keep; ++i) {
    cum += k.p[i];
    if (u < cum) return i;
  }
  return keep - 1;
}
CpuDraw cpu_draw(const CpuCandidates& k, float min_p, float top_p, double u01) {
  CpuDraw d;
  d.keep = cpu_keep(k, min_p, top_p);
  d.token = k.order[cpu_draw_pos(k, d.keep, u01)];
  for (int32_t i = 0; i < d.keep; ++i) d.total += k.p[i];
  return d;
}

// Whether the GPU's (kept, draw position) is what the CPU gives for some u01, top_p and min_p
// within rounding-sized distances of the real ones. Both are monotone (fewer kept for a larger
// min-p or a smaller top-p; a later position for a larger u), so the CPU's answers at the ends
// of the intervals bound every answer inside them.
bool within_rounding(const CpuCandidates& k, const SamplingConfig& c, double u01, int32_t kept, int32_t pos,
                     std::string* why) {
  const double du = 2e-5;
  const float dp = 2e-5f, dm = 2e-4f;
  const bool p_on = c.top_p > 0.0f && c.top_p < 1.0f, m_on = c.min_p > 0.0f;
  const float tp_lo = p_on ? std::max(c.top_p - dp, 1e-7f) : c.top_p;
  const float tp_hi = p_on ? std::min(c.top_p + dp, 0.9999999f) : c.top_p;
  const float mp_lo = m_on ? c.min_p * (1 - dm) : c.min_p, mp_hi = m_on ? c.min_p * (1 + dm) : c.min_p;
  const int32_t keep_lo = cpu_keep(k, mp_hi, tp_lo), keep_hi = cpu_keep(k, mp_lo, tp_hi);
  *why = "cpu keeps [" + std::to_string(keep_lo) + ", " + std::to_string(keep_hi) + "] within rounding";
  if (kept < keep_lo || kept > keep_hi) return false;
  const int32_t pos_lo = cpu_draw_pos(k, kept, std::max(u01 - du, 0.0));
  const int32_t pos_hi = cpu_draw_pos(k, kept, std::min(u01 + du, 1.0 - 0x1p-53));
  *why += ", draws positions [" + std::to_string(pos_lo) + ", " + std::to_string(pos_hi) + "] of the gpu's kept";
  return pos >= pos_lo && pos <= pos_hi;
}

struct Row {
  std::vector<float> logits;
  SamplingConfig config;
  SamplingRowParams params;
};

std::vector<SamplingRowParams> params_of(const std::vector<Row>& rows) {
  std::vector<SamplingRowParams> p;
  for (const Row& r : rows) p.push_back(r.params);
  return p;
}
std::vector<float> logits_of(const std::vector<Row>& rows) {
  std::vector<float> l;
  for (const Row& r : rows) l.insert(l.end(), r.logits.begin(), r.logits.end());
  return l;
}

struct Verdict {
  int exact = 0, ambiguous = 0, bad = 0, greedy = 0;
};

// Judges GPU row r against the CPU; prints everything about a failing row.
void judge(const Row& row, const HostPenalties& hp, const SampleTrace& tr, int32_t gpu_token, int64_t r,
           Verdict& v) {
  const int64_t V = static_cast<int64_t>(row.logits.size());
  const SamplingConfig& c = row.config;
  EXPECT_EQ(tr.errors, 0u) << "row " << r << " V=" << V << " internal errors " << tr.errors << " " << describe(c);
  EXPECT_EQ(tr.token, gpu_token) << "row " << r;
  const TokenHistory h = hp.history(row.params.slot);
  std::vector<float> y = row.logits;
  apply_penalties(y, h, c);
  if (c.temperature <= 0.0f) {
    ++v.greedy;
    const int32_t want = argmax(y);
    EXPECT_EQ(gpu_token, want) << "greedy row " << r << " V=" << V << ": gpu " << gpu_token << " ("
                               << (gpu_token >= 0 && gpu_token < V ? y[gpu_token] : NAN) << "), cpu " << want << " ("
                               << y[want] << ") " << describe(c);
    EXPECT_EQ(tr.u01, 0.0) << "row " << r;
    if (gpu_token == want) ++v.exact;
    else ++v.bad;
    return;
  }
  // The uniform is exactly Philox(seed, step).
  const double u01 = cuda::sampling_uniform(row.params.seed, row.params.step);
  EXPECT_EQ(tr.u01, u01) << "row " << r << " seed " << row.params.seed << " step " << row.params.step;
  // sample_from itself with that uniform is the authority; the split mirror must agree with it.
  std::vector<float> raw = row.logits;
  const int32_t want = sample_from(raw, h, c, tr.u01);
  const CpuCandidates k = cpu_candidates(y, c);
  const CpuDraw d = cpu_draw(k, c.min_p, c.top_p, tr.u01);
  ASSERT_EQ(d.token, want) << "test mirror of sample_from drifted, row " << r;
  EXPECT_LE(tr.kept_weight, tr.topk_weight) << "row " << r;
  if (tr.kept_weight > 0) {
    EXPECT_LT(tr.draw, tr.kept_weight) << "row " << r;
  }
  if (gpu_token == want && tr.kept == d.keep) {
    ++v.exact;
    // The kept probability from integer weights vs the CPU's double sum.
    const double gpu_total = static_cast<double>(tr.kept_weight) / static_cast<double>(tr.topk_weight);
    EXPECT_NEAR(gpu_total, d.total, 2e-5) << "row " << r << " V=" << V << " kept " << d.keep << " " << describe(c);
    return;
  }
  const auto at = std::find(k.order.begin(), k.order.end(), gpu_token);
  const int32_t pos = at == k.order.end() ? -1 : static_cast<int32_t>(at - k.order.begin());
  std::string why;
  if (pos >= 0 && tr.kept >= 1 && tr.kept <= static_cast<int32_t>(k.p.size()) &&
      within_rounding(k, c, tr.u01, tr.kept, pos, &why)) {
    ++v.ambiguous;
    return;
  }
  ++v.bad;
  ADD_FAILURE() << "row " << r << " V=" << V << " " << describe(c) << " slot " << row.params.slot << "\n  gpu token "
                << gpu_token << " kept " << tr.kept << " (kept_weight " << tr.kept_weight << " topk_weight "
                << tr.topk_weight << " draw " << tr.draw << " min_p_count " << tr.min_p_count << " passes "
                << tr.row_passes << ")\n  cpu token " << want << " keep " << d.keep << " total " << d.total
                << " u01 " << tr.u01 << "\n  gpu token's place in the cpu order: " << pos << ", y(gpu) "
                << (gpu_token >= 0 && gpu_token < V ? y[gpu_token] : NAN) << ", y(cpu) " << y[want] << "\n  " << why;
}

Row random_row(int64_t V, int64_t r, int64_t slots, std::mt19937_64& g) {
  Row row;
  const auto shape = static_cast<LogitShape>(r % static_cast<int64_t>(LogitShape::kCount));
  row.logits = random_logits(V, shape, g);
  row.config = random_config(V, g, static_cast<int>((r / 7) % 8));  // every filter combination, every shape
  const int32_t slot = (g() % 8 == 0 || r >= slots) ? -1 : static_cast<int32_t>(r);
  const uint64_t seed = g(), step = g() % 3 == 0 ? g() : g() % 1000;
  const int32_t logprobs = static_cast<int32_t>(g() % 22) - 1;
  row.params = cuda::sampling_row_params(row.config, slot, seed, step, logprobs);
  return row;
}

class GpuSampler : public GpuTest {};

// ---------------------------------------------------------------------------------------------

TEST(GpuSamplerHost, PhiloxMatchesRandom123KnownAnswers) {
  // Random123 tests/kat_vectors, philox4x32 10.
  struct Kat {
    uint32_t c[4], k[2], out[4];
  } kats[] = {
      {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{~0u, ~0u, ~0u, ~0u}, {~0u, ~0u}, {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
       {0xa4093822, 0x299f31d0},
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (const Kat& t : kats) {
    const auto o = cuda::philox4x32_10(t.c[0], t.c[1], t.c[2], t.c[3], t.k[0], t.k[1]);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(o.v[i], t.out[i]) << "word " << i;
  }
  // The uniform is 53 bits in [0, 1); different steps and seeds give different draws.
  std::set<double> seen;
  for (uint64_t seed : {0ull, 1ull, 0xFFFFFFFFFFFFFFFFull})
    for (uint64_t step = 0; step < 100; ++step) {
      const double u = cuda::sampling_uniform(seed, step);
      EXPECT_GE(u, 0.0);
      EXPECT_LT(u, 1.0);
      EXPECT_EQ(u, std::ldexp(static_cast<double>(cuda::sampling_draw_bits(seed, step)), -53));
      seen.insert(u);
    }
  EXPECT_EQ(seen.size(), 300u);
}

TEST(GpuSamplerHost, CandidateKeysOrderLikeTheCpuComparison) {
  // Ascending key = descending logit, −0 = +0, ties by id: the CPU's `better`.
  const std::vector<float> v = {INFINITY, FLT_MAX, 3.0f,     1.0f,     FLT_TRUE_MIN, 0.0f, -0.0f,
                                -FLT_TRUE_MIN, -1.0f, -FLT_MAX, -INFINITY, 1.0f,     0.0f};
  for (size_t a = 0; a < v.size(); ++a)
    for (size_t b = 0; b < v.size(); ++b) {
      const bool cpu = v[a] > v[b] || (v[a] == v[b] && a < b);
      const bool gpu = cuda::candidate_key(cuda::desc_key(v[a]), static_cast<uint32_t>(a)) <
                       cuda::candidate_key(cuda::desc_key(v[b]), static_cast<uint32_t>(b));
      EXPECT_EQ(cpu, gpu) << v[a] << " (" << a << ") vs " << v[b] << " (" << b << ")";
      if (v[a] == v[b]) {
        EXPECT_EQ(cuda::desc_key_value(cuda::desc_key(v[a])), v[b]);
      }
    }
}

TEST_F(GpuSampler, GreedyRowsTakeTheArgmaxLowestIdOnTies) {
  for (int64_t V : {int64_t{512}, kRealVocab}) {
    std::mt19937_64 g(11 + V);
    std::vector<std::vector<float>> rows;
    auto normal = [&] { return randn(V, g()); };
    {  // ties planted at several ids, the first not at 0
      auto x = normal();
      for (int64_t i : {V / 3, V / 7, V - 1, V / 2}) x[i] = 50.0f;
      rows.push_back(x);
    }
    rows.push_back(std::vector<float>(V, -3.0f));  // all equal: id 0
    {
      auto x = normal();
      x[V - 1] = FLT_MAX;
      x[5] = FLT_MAX;
      x[0] = INFINITY;
      rows.push_back(x);  // +inf wins at 0
    }
    {
      std::vector<float> x(V, -INFINITY);
      x[V - 2] = -FLT_MAX;
      rows.push_back(x);
    }
    {
      std::vector<float> x(V, -1.0f);
      x[V / 2] = -0.0f;
      x[V / 2 + 1] = 0.0f;  // −0 == +0: the lower id
      x[3] = -FLT_TRUE_MIN;
      rows.push_back(x);
    }
    {
      std::vector<float> x(V, FLT_TRUE_MIN);
      x[V - 1] = 2 * FLT_TRUE_MIN;
      rows.push_back(x);
    }
    {
      auto x = normal();
      x[V - 1] = 9.0f;  // the best at the last id
      rows.push_back(x);
    }
    for (int i = 0; i < 9; ++i) rows.push_back(random_logits(V, static_cast<LogitShape>(i % 7), g));
    const int64_t R = static_cast<int64_t>(rows.size());
    HostPenalties hp(R, V);
    std::vector<Row> batch;
    for (int64_t r = 0; r < R; ++r) {
      Row row;
      row.logits = rows[r];
      row.config.temperature = r % 3 == 0 ? -1.0f : 0.0f;
      if (r >= 7) {  // penalties move the argmax
        hp.randomise(r, g);
        row.config.repetition_penalty = 1.7f;
        row.config.presence_penalty = 0.4f;
        row.config.frequency_penalty = 0.3f;
      }
      row.params = cuda::sampling_row_params(row.config, r >= 7 ? static_cast<int32_t>(r) : -1, g(), g(), -1);
      batch.push_back(row);
    }
    DevPenalties dp(hp);
    const SampleRun out = run_sampler(logits_of(batch), R, V, params_of(batch), dp.state, 3);
    Verdict v;
    for (int64_t r = 0; r < R; ++r) judge(batch[r], hp, out.trace[r], out.tokens[r], r, v);
    EXPECT_EQ(v.bad, 0) << "V=" << V;
    EXPECT_EQ(v.greedy, R);
  }
}

// The main check: thousands of random rows at V = 512.
TEST_F(GpuSampler, SampledRowsMatchSampleFromWithTheGpuUniform) {
  const int64_t V = 512, R = 2400;
  std::mt19937_64 g(2024);
  HostPenalties hp(R, V);
  std::vector<Row> rows;
  for (int64_t r = 0; r < R; ++r) {
    rows.push_back(random_row(V, r, R, g));
    hp.randomise(r, g);
  }
  DevPenalties dp(hp);
  const SampleRun out = run_sampler(logits_of(rows), R, V, params_of(rows), dp.state);
  Verdict v;
  for (int64_t r = 0; r < R && v.bad < 20; ++r) judge(rows[r], hp, out.trace[r], out.tokens[r], r, v);
  EXPECT_EQ(v.bad, 0);
  EXPECT_LE(v.ambiguous, R / 200) << "too many rows decided within rounding of a boundary";
  std::printf("[ sampler  ] V=%lld rows=%lld: %d exact, %d within rounding of a cut, %d greedy, %d wrong\n",
              static_cast<long long>(V), static_cast<long long>(R), v.exact, v.ambiguous, v.greedy, v.bad);
}

// The real vocabulary, with rows that force every descent path (a run too big to gather, the
// overflow bin, ties over the whole row) plus random ones; then the same rows reversed and
// interleaved with others give the same bits.
TEST_F(GpuSampler, RealVocabularyMatchesAndIsBatchInvariant) {
  const int64_t V = kRealVocab;
  std::mt19937_64 g(77);
  std::vector<Row> rows;
  auto forced = [&](LogitShape shape, SamplingConfig c) {
    Row row;
    row.logits = random_logits(V, shape, g);
    row.config = c;
    row.params = cuda::sampling_row_params(c, -1, g(), g() % 100, -1);
    rows.push_back(row);
  };
  SamplingConfig plain;  // T = 1, no filters
  forced(LogitShape::Constant, plain);  // bin 0 holds all V: range pass, digit level, gather
  SamplingConfig k100k;
  k100k.top_k = 100000;
  forced(LogitShape::Wide, k100k);  // the k-th candidate in the overflow bin
  SamplingConfig tp;
  tp.top_p = 0.5f;
  forced(LogitShape::Ties, tp);
  SamplingConfig hot;
  hot.temperature = 3.5f;
  hot.top_p = 0.97f;
  forced(LogitShape::Normal, hot);
  SamplingConfig cold;
  cold.temperature = 0.07f;
  cold.min_p = 0.01f;
  forced(LogitShape::Offset, cold);
  SamplingConfig k1;
  k1.top_k = 1;
  forced(LogitShape::Masked, k1);
  const int64_t n_forced = static_cast<int64_t>(rows.size());
  const int64_t R = n_forced + 14;
  HostPenalties hp(R, V);
  for (int64_t r = n_forced; r < R; ++r) {
    rows.push_back(random_row(V, r, R, g));
    hp.randomise(r, g);
  }
  DevPenalties dp(hp);
  const SampleRun out = run_sampler(logits_of(rows), R, V, params_of(rows), dp.state);
  Verdict v;
  for (int64_t r = 0; r < R; ++r) judge(rows[r], hp, out.trace[r], out.tokens[r], r, v);
  EXPECT_EQ(v.bad, 0);
  EXPECT_GE(out.trace[0].row_passes, 3) << "the all-equal row should need the deep descent";
  EXPECT_GE(out.trace[1].row_passes, 3) << "the top-k = 100000 row should need the deep descent";
  // Reversed order, every other slot taken by a fresh random row, penalty state restored.
  std::vector<Row> mixed;
  std::vector<int64_t> where(R);
  for (int64_t r = R - 1; r >= 0; --r) {
    Row other = random_row(V, r, 0, g);  // no slot
    mixed.push_back(other);
    where[r] = static_cast<int64_t>(mixed.size());
    mixed.push_back(rows[r]);
  }
  dp.load(hp);
  const SampleRun again = run_sampler(logits_of(mixed), static_cast<int64_t>(mixed.size()), V, params_of(mixed), dp.state);
  for (int64_t r = 0; r < R; ++r) {
    EXPECT_EQ(again.tokens[where[r]], out.tokens[r]) << "row " << r << " moved to " << where[r];
    EXPECT_EQ(bit_mismatches(&again.trace[where[r]], &out.trace[r], 1), 0u) << "trace of row " << r;
  }
}

TEST_F(GpuSampler, SeedAndStepAloneDecideTheDraw) {
  const int64_t V = 512;
  std::mt19937_64 g(5);
  Row x;
  x.logits = random_logits(V, LogitShape::Normal, g);
  x.config.temperature = 1.3f;
  x.config.top_p = 0.97f;
  x.config.repetition_penalty = 1.2f;
  x.config.seed = 123456789;
  HostPenalties hp(40, V);
  hp.randomise(0, g);
  x.params = cuda::sampling_row_params(x.config, 0, 0, 17, -1);
  DevPenalties dp(hp);
  auto run_alone_and_among = [&](int64_t at, int64_t n, uint64_t salt) {
    std::mt19937_64 og(salt);
    std::vector<Row> batch;
    for (int64_t i = 0; i < n; ++i) {
      Row o = random_row(V, i + 1, 40, og);
      o.params.slot = static_cast<int32_t>(1 + i);
      batch.push_back(o);
    }
    batch.insert(batch.begin() + at, x);
    dp.load(hp);
    const SampleRun out = run_sampler(logits_of(batch), static_cast<int64_t>(batch.size()), V, params_of(batch), dp.state);
    return std::make_pair(out.tokens[at], out.trace[at]);
  };
  const auto alone = run_alone_and_among(0, 0, 1);
  const std::vector<std::tuple<int64_t, int64_t, uint64_t>> placements = {{3, 7, 2}, {0, 31, 3}, {31, 31, 4}, {12, 20, 5}};
  for (const auto& [at, n, salt] : placements) {
    const auto among = run_alone_and_among(at, n, salt);
    EXPECT_EQ(among.first, alone.first) << "at " << at << " of " << n + 1;
    EXPECT_EQ(bit_mismatches(&among.second, &alone.second, 1), 0u) << "at " << at << " of " << n + 1;
  }
  // Another step is another draw; the same step again is the same draw.
  x.params.step = 18;
  const auto next = run_alone_and_among(0, 0, 1);
  EXPECT_NE(next.second.u01, alone.second.u01);
  x.params.step = 17;
  EXPECT_EQ(run_alone_and_among(0, 0, 1).second.u01, alone.second.u01);
  // Without a seed in the config the engine's seed is used.
  SamplingConfig unseeded = x.config;
  unseeded.seed.reset();
  EXPECT_EQ(cuda::sampling_row_params(unseeded, 0, 99, 0, -1).seed, 99u);
  EXPECT_EQ(cuda::sampling_row_params(x.config, 0, 99, 0, -1).seed, 123456789u);
}

TEST_F(GpuSampler, CountsOfTheSampledTokensGoUp) {
  const int64_t V = 512, R = 64, slots = 80;
  std::mt19937_64 g(9);
  HostPenalties hp(slots, V);
  std::vector<Row> rows;
  for (int64_t r = 0; r < R; ++r) {
    Row row = random_row(V, r, slots, g);
    row.params.slot = r % 5 == 4 ? -1 : static_cast<int32_t>(slots - 1 - r);  // not the row index
    if (row.params.slot >= 0) hp.randomise(row.params.slot, g);
    rows.push_back(row);
  }
  DevPenalties dp(hp);
  const SampleRun out = run_sampler(logits_of(rows), R, V, params_of(rows), dp.state);
  std::vector<std::vector<int32_t>> want = hp.counts;
  for (int64_t r = 0; r < R; ++r)
    if (rows[r].params.slot >= 0) ++want[rows[r].params.slot][out.tokens[r]];
  const std::vector<int32_t> got = dp.counts.download();
  int wrong = 0;
  for (int64_t s = 0; s < slots; ++s)
    for (int64_t t = 0; t < V; ++t)
      if (got[s * V + t] != want[s][t] && ++wrong < 10)
        ADD_FAILURE() << "slot " << s << " token " << t << ": count " << got[s * V + t] << ", want " << want[s][t];
  EXPECT_EQ(wrong, 0);
}

// One decode step captured into a graph: replays after the engine rewrites the parameter buffer
// give what direct calls give.
TEST_F(GpuSampler, CapturedStepReplaysWithFreshParameters) {
  const int64_t V = 4096, R = 8;
  std::mt19937_64 g(31);
  std::vector<Row> rows;
  for (int64_t r = 0; r < R; ++r) {
    rows.push_back(random_row(V, r, 0, g));
    rows.back().params.logprobs = 5;
  }
  HostPenalties hp(0, V);
  DevPenalties dp(hp);
  DevBuf<float> logits(logits_of(rows));
  DevBuf<SamplingRowParams> params(params_of(rows));
  const size_t ws_bytes = cuda::sampling_workspace_bytes(R, V), lp_bytes = cuda::logprobs_workspace_bytes(R, V);
  DevBuf<char> ws(ws_bytes), lp_ws(lp_bytes);
  DevBuf<int32_t> tokens(R), top_ids(R * cuda::kMaxTopLogprobs);
  DevBuf<float> chosen_lp(R), top_lp(R * cuda::kMaxTopLogprobs);
  cudaStream_t stream;
  FT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  auto step = [&] {
    cuda::sample_tokens(logits.get(), V, R, V, params.get(), dp.state, ws.get(), ws_bytes, tokens.get(), nullptr,
                        stream);
    cuda::token_logprobs(logits.get(), V, R, V, params.get(), tokens.get(), lp_ws.get(), lp_bytes, chosen_lp.get(),
                         top_ids.get(), top_lp.get(), stream);
  };
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  FT_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  step();
  FT_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  FT_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int replay = 0; replay < 3; ++replay) {
    for (Row& r : rows) r.params.step += 1 + replay;
    params.upload(params_of(rows));
    FT_CUDA_CHECK(cudaDeviceSynchronize());  // the upload ran on the legacy stream, the graph runs on `stream`
    FT_CUDA_CHECK(cudaGraphLaunch(exec, stream));
    FT_CUDA_CHECK(cudaStreamSynchronize(stream));
    const auto t_graph = tokens.download();
    const auto lp_graph = chosen_lp.download();
    const auto ids_graph = top_ids.download();
    step();
    FT_CUDA_CHECK(cudaStreamSynchronize(stream));
    EXPECT_EQ(tokens.download(), t_graph) << "replay " << replay;
    const auto lp_direct = chosen_lp.download();
    EXPECT_EQ(bit_mismatches(lp_direct.data(), lp_graph.data(), R), 0u) << "replay " << replay;
    EXPECT_EQ(top_ids.download(), ids_graph) << "replay " << replay;
  }
  FT_CUDA_CHECK(cudaGraphExecDestroy(exec));
  FT_CUDA_CHECK(cudaGraphDestroy(graph));
  FT_CUDA_CHECK(cudaStreamDestroy(stream));
}

// Not a check: what a decode step's sampling costs at the real vocabulary (printed for the log).
TEST_F(GpuSampler, TimingAtTheRealVocabulary) {
  const int64_t V = kRealVocab;
  std::mt19937_64 g(3);
  struct Kind {
    const char* name;
    SamplingConfig c;
  };
  std::vector<Kind> kinds(4);
  kinds[0] = {"greedy", {}};
  kinds[0].c.temperature = 0.0f;
  kinds[1] = {"T=1 top_p=0.95", {}};
  kinds[1].c.top_p = 0.95f;
  kinds[2] = {"T=1 no filters", {}};
  kinds[3] = {"T=0.7 top_k=50", {}};
  kinds[3].c.temperature = 0.7f;
  kinds[3].c.top_k = 50;
  for (int64_t R : {1, 8, 32}) {
    for (const Kind& kind : kinds) {
      std::vector<Row> rows;
      for (int64_t r = 0; r < R; ++r) {
        Row row;
        row.logits = randn(V, g(), 3.0f);
        row.config = kind.c;
        row.params = cuda::sampling_row_params(row.config, -1, g(), 0, -1);
        rows.push_back(row);
      }
      DevBuf<float> logits(logits_of(rows));
      DevBuf<SamplingRowParams> params(params_of(rows));
      const size_t ws_bytes = cuda::sampling_workspace_bytes(R, V);
      DevBuf<char> ws(ws_bytes);
      DevBuf<int32_t> tokens(R);
      HostPenalties hp(0, V);
      DevPenalties dp(hp);
      auto once = [&] {
        cuda::sample_tokens(logits.get(), V, R, V, params.get(), dp.state, ws.get(), ws_bytes, tokens.get(), nullptr,
                            nullptr);
      };
      once();
      cudaEvent_t a, b;
      FT_CUDA_CHECK(cudaEventCreate(&a));
      FT_CUDA_CHECK(cudaEventCreate(&b));
      FT_CUDA_CHECK(cudaEventRecord(a));
      const int iters = 20;
      for (int i = 0; i < iters; ++i) once();
      FT_CUDA_CHECK(cudaEventRecord(b));
      FT_CUDA_CHECK(cudaEventSynchronize(b));
      float ms = 0;
      FT_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
      std::printf("[ sampler  ] V=%lld rows=%2lld %-16s %8.1f us per step\n", static_cast<long long>(V),
                  static_cast<long long>(R), kind.name, 1000.0 * ms / iters);
      FT_CUDA_CHECK(cudaEventDestroy(a));
      FT_CUDA_CHECK(cudaEventDestroy(b));
    }
  }
}

}  // namespace
}  // namespace ft::test::sampling
