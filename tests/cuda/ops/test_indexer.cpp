// The DSA indexer kernels against shared/ops/indexer + topk: the cache append and pool keys
// (indexer_pool_key on the fp16-rounded cache), the pool scores (indexer_pool_scores), the
// selection (select_tokens on the same scores: identical pool sets, ties to the lower id) and
// batch invariance (a row alone vs among others, a sequence in one call vs split over calls).
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <random>
#include <sstream>

#include "gpu-worker/backends/cuda/ops/indexer.h"
#include "gpu-worker/backends/cuda/ops/mla.h"
#include "gpu-worker/backends/cuda/ops/topk.h"
#include "shared/ops/indexer.h"
#include "shared/ops/topk.h"
#include "tests/cuda/support/gpu_test.h"

namespace ft::cuda {
namespace {

using test::bit_mismatches;
using test::DevBuf;
using test::rel_l2;

// Seeded uniform values from splitmix64: caches of ~40k tokens fill in milliseconds.
std::vector<float> fast_uniform(size_t n, uint64_t seed, float lo, float hi) {
  std::vector<float> v(n);
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (float& f : v) {
    uint64_t z = (x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    f = lo + (hi - lo) * static_cast<float>(z >> 40) * (1.0f / 16777216.0f);
  }
  return v;
}

float to_f16(float x) { return __half2float(__float2half_rn(x)); }

// Sequences in slots 0…S−1 whose logical blocks map to shuffled, non-contiguous physical blocks
// (a few physical blocks stay unused); table entries past a sequence's blocks are −1.
struct Seqs {
  int kpool = 1;
  int64_t bt = 0, max_blocks = 0, n_blocks = 0;
  std::vector<int64_t> len;
  std::vector<int32_t> table;
  DevBuf<int32_t> d_table;
  Seqs(std::vector<int64_t> lens, int kp, uint64_t seed) : kpool(kp), len(std::move(lens)) {
    bt = kPoolsPerBlock * static_cast<int64_t>(kp);
    int64_t total = 0;
    for (int64_t L : len) {
      max_blocks = std::max(max_blocks, (L + bt - 1) / bt);
      total += (L + bt - 1) / bt;
    }
    max_blocks += 1;
    n_blocks = total + 3;
    std::vector<int32_t> ids(static_cast<size_t>(n_blocks));
    std::iota(ids.begin(), ids.end(), 0);
    std::mt19937_64 g(seed);
    std::shuffle(ids.begin(), ids.end(), g);
    table.assign(len.size() * max_blocks, -1);
    size_t next = 0;
    for (size_t s = 0; s < len.size(); ++s)
      for (int64_t j = 0; j < (len[s] + bt - 1) / bt; ++j) table[s * max_blocks + j] = ids[next++];
    d_table = DevBuf<int32_t>(table);
  }
  SparseTables tables() const { return {d_table.get(), max_blocks}; }
  int64_t token_row(int slot, int64_t s) const { return int64_t{table[slot * max_blocks + s / bt]} * bt + s % bt; }
  int64_t pool_row(int slot, int64_t p) const {
    return int64_t{table[slot * max_blocks + p / kPoolsPerBlock]} * kPoolsPerBlock + p % kPoolsPerBlock;
  }
};

struct Rows {
  std::vector<int32_t> slot, pos;
  DevBuf<int32_t> d_slot, d_pos;
  void add(int s, int64_t p) {
    slot.push_back(s);
    pos.push_back(static_cast<int32_t>(p));
  }
  void upload() {
    d_slot = DevBuf<int32_t>(slot);
    d_pos = DevBuf<int32_t>(pos);
  }
  int64_t n() const { return static_cast<int64_t>(slot.size()); }
  SparseRows view(int64_t first = 0, int64_t count = -1) const {
    return {d_slot.get() + first, d_pos.get() + first, count < 0 ? n() - first : count};
  }
};

// ---------------------------------------------------------------------------------------------
// Append + pool keys.

struct IndexerCache {
  DevBuf<__half> latent, key, gate;
  DevBuf<float> pool_keys;
  DevBuf<float> latent32, key32, gate32;  // an fp32-precision engine's cache (when fp32)
  bool fp32 = false;
  IndexerCache(const Seqs& q, int64_t Rkv, int64_t ID, bool f32 = false)
      : latent(q.n_blocks * q.bt * Rkv), key(q.n_blocks * q.bt * ID), gate(q.n_blocks * q.bt * ID),
        pool_keys(q.n_blocks * kPoolsPerBlock * ID), fp32(f32) {
    if (fp32) {
      latent32 = DevBuf<float>(q.n_blocks * q.bt * Rkv);
      key32 = DevBuf<float>(q.n_blocks * q.bt * ID);
      gate32 = DevBuf<float>(q.n_blocks * q.bt * ID);
    }
  }
  SparseCacheLayer layer() const {
    if (!fp32) return {latent.get(), key.get(), gate.get(), pool_keys.get()};
    SparseCacheLayer l{nullptr, nullptr, nullptr, pool_keys.get()};
    l.latent32 = latent32.get();
    l.key32 = key32.get();
    l.gate32 = gate32.get();
    return l;
  }
  // The cache's entries as fp32.
  static std::vector<float> widen(const std::vector<__half>& h) {
    std::vector<float> f(h.size());
    for (size_t i = 0; i < h.size(); ++i) f[i] = __half2float(h[i]);
    return f;
  }
  std::vector<float> latents() const { return fp32 ? latent32.download() : widen(latent.download()); }
  std::vector<float> keys() const { return fp32 ? key32.download() : widen(key.download()); }
  std::vector<float> gates() const { return fp32 ? gate32.download() : widen(gate.download()); }
};

struct AppendCase {
  const char* name;
  int64_t Rkv, ID;
  int kpool;
  std::vector<int64_t> lens;
  bool fp32 = false;  // fp32 cache: entries hold the inputs as they are
};

class IndexerAppendTest : public test::GpuTest, public ::testing::WithParamInterface<AppendCase> {};

// Feeds the rows (slot, pos) of `rows` with their per-token inputs from the host sequences.
void append_rows(const IndexerCache& c, const SparseCacheGeometry& g, const Seqs& q, Rows& rows,
                 const std::vector<std::vector<float>>& lat, const std::vector<std::vector<float>>& kI,
                 const std::vector<std::vector<float>>& gI, const DevBuf<float>& ape) {
  const int64_t Rkv = g.latent, ID = g.index_dim, ldl = Rkv + 8, ldi = ID + 4;  // padded rows: ld honoured
  std::vector<float> hl(rows.n() * ldl, 0.0f), hk(rows.n() * ldi, 0.0f), hg(rows.n() * ldi, 0.0f);
  for (int64_t r = 0; r < rows.n(); ++r) {
    const int s = rows.slot[r];
    const int64_t p = rows.pos[r];
    std::copy_n(lat[s].data() + p * Rkv, Rkv, hl.data() + r * ldl);
    std::copy_n(kI[s].data() + p * ID, ID, hk.data() + r * ldi);
    std::copy_n(gI[s].data() + p * ID, ID, hg.data() + r * ldi);
  }
  rows.upload();
  DevBuf<float> dl(hl), dk(hk), dg(hg);
  sparse_cache_append(c.layer(), g, q.tables(), rows.view(), dl.get(), ldl, dk.get(), dg.get(), ldi, nullptr);
  indexer_pool_keys(c.layer(), g, q.tables(), rows.view(), ape.get(), nullptr);
  FT_CUDA_CHECK(cudaDeviceSynchronize());
}

TEST_P(IndexerAppendTest, CacheAndPoolKeysMatchReference) {
  const AppendCase& tc = GetParam();
  const int64_t Rkv = tc.Rkv, ID = tc.ID;
  const int kp = tc.kpool;
  Seqs q(tc.lens, kp, 11);
  const SparseCacheGeometry g{Rkv, ID, kp, q.max_blocks};
  const size_t S = tc.lens.size();
  std::vector<std::vector<float>> lat(S), kI(S), gI(S);
  for (size_t s = 0; s < S; ++s) {
    lat[s] = fast_uniform(tc.lens[s] * Rkv, 100 + s, -3.0f, 3.0f);
    kI[s] = fast_uniform(tc.lens[s] * ID, 200 + s, -2.0f, 2.0f);
    gI[s] = fast_uniform(tc.lens[s] * ID, 300 + s, -4.0f, 4.0f);
  }
  const std::vector<float> ape_h = fast_uniform(kp * ID, 400, -1.0f, 1.0f);
  DevBuf<float> ape(ape_h);

  // Split form: a prefill chunk of every sequence (first ~40%) in one call, then the rest
  // interleaved across sequences in a second call.
  IndexerCache split(q, Rkv, ID, tc.fp32);
  auto rnd = [&](float x) { return tc.fp32 ? x : to_f16(x); };
  Rows a, b;
  for (size_t s = 0; s < S; ++s)
    for (int64_t p = 0; p < tc.lens[s] * 2 / 5; ++p) a.add(static_cast<int>(s), p);
  for (int64_t p = 0;; ++p) {
    bool any = false;
    for (size_t s = 0; s < S; ++s)
      if (p >= tc.lens[s] * 2 / 5 && p < tc.lens[s]) b.add(static_cast<int>(s), p), any = true;
    if (!any && p > *std::max_element(tc.lens.begin(), tc.lens.end())) break;
  }
  append_rows(split, g, q, a, lat, kI, gI, ape);
  append_rows(split, g, q, b, lat, kI, gI, ape);
  // One-call form, rows in reverse order.
  IndexerCache whole(q, Rkv, ID, tc.fp32);
  Rows all;
  for (int64_t i = b.n() - 1; i >= 0; --i) all.add(b.slot[i], b.pos[i]);
  for (int64_t i = a.n() - 1; i >= 0; --i) all.add(a.slot[i], a.pos[i]);
  append_rows(whole, g, q, all, lat, kI, gI, ape);

  const std::vector<float> cl = split.latents(), ck = split.keys(), cg = split.gates();
  const std::vector<float> pk = split.pool_keys.download(), pk_whole = whole.pool_keys.download();
  for (size_t s = 0; s < S; ++s) {
    const int slot = static_cast<int>(s);
    size_t bad = 0;
    for (int64_t p = 0; p < tc.lens[s]; ++p) {
      const int64_t row = q.token_row(slot, p);
      for (int64_t c = 0; c < Rkv; ++c) {
        const float got = cl[row * Rkv + c], want = rnd(lat[s][p * Rkv + c]);
        if (std::memcmp(&got, &want, 4) != 0 && bad++ < 3)
          ADD_FAILURE() << tc.name << " slot " << slot << " token " << p << " latent[" << c << "] = " << got
                        << ", expected " << want;
      }
      for (int64_t c = 0; c < ID; ++c) {
        const float gk = ck[row * ID + c], wk = rnd(kI[s][p * ID + c]);
        const float gg = cg[row * ID + c], wg = rnd(gI[s][p * ID + c]);
        if ((std::memcmp(&gk, &wk, 4) != 0 || std::memcmp(&gg, &wg, 4) != 0) && bad++ < 3)
          ADD_FAILURE() << tc.name << " slot " << slot << " token " << p << " channel " << c << ": key " << gk
                        << " (expected " << wk << "), gate " << gg << " (expected " << wg << ")";
      }
    }
    EXPECT_EQ(bad, 0u) << tc.name << " slot " << slot << ": cache entries differing from the (rounded) input";

    // Pool keys vs indexer_pool_key on the rounded cache; same bits in both feeding orders.
    const int64_t P = tc.lens[s] / kp;
    std::vector<float> rk(kp * ID), rg(kp * ID), want(P * ID), got(P * ID), got_whole(P * ID);
    for (int64_t p = 0; p < P; ++p) {
      for (int64_t i = 0; i < kp * ID; ++i) {
        rk[i] = rnd(kI[s][p * kp * ID + i]);
        rg[i] = rnd(gI[s][p * kp * ID + i]);
      }
      ft::indexer_pool_key(rk.data(), rg.data(), ape_h.data(), kp, ID, want.data() + p * ID);
      std::copy_n(pk.data() + q.pool_row(slot, p) * ID, ID, got.data() + p * ID);
      std::copy_n(pk_whole.data() + q.pool_row(slot, p) * ID, ID, got_whole.data() + p * ID);
    }
    double worst = 0;
    int64_t worst_p = -1;
    for (int64_t p = 0; p < P; ++p) {
      const double e = rel_l2(got.data() + p * ID, want.data() + p * ID, ID);
      if (!(e <= worst)) worst = e, worst_p = p;
    }
    EXPECT_LE(rel_l2(got, want), 1e-5) << tc.name << " slot " << slot << " (" << P << " pools): worst pool "
                                       << worst_p << " rel " << worst;
    EXPECT_EQ(bit_mismatches(got.data(), got_whole.data(), got.size()), 0u)
        << tc.name << " slot " << slot << ": pool keys differ between split and one-call feeding";
  }
}

INSTANTIATE_TEST_SUITE_P(Widths, IndexerAppendTest,
                         ::testing::Values(AppendCase{"tiny", 32, 16, 4, {37, 300, 130, 3}},
                                           AppendCase{"real_k16", 512, 128, 16, {1100, 40, 2100}},
                                           AppendCase{"real_k4", 512, 128, 4, {700, 1500, 257}},
                                           AppendCase{"tiny_fp32", 32, 16, 4, {37, 300, 130, 3}, true},
                                           AppendCase{"real_k16_fp32", 512, 128, 16, {1100, 40, 2100}, true}),
                         [](const auto& i) { return std::string(i.param.name); });

// ---------------------------------------------------------------------------------------------
// Scores + selection.

struct SelectCase {
  const char* name;
  int64_t IH, ID;
  int kpool;
  int64_t Bp;
  std::vector<int64_t> lens;
};

class IndexerSelectTest : public test::GpuTest, public ::testing::WithParamInterface<SelectCase> {};

std::string ids_str(const int32_t* v, int64_t n) {
  std::ostringstream o;
  for (int64_t i = 0; i < std::min<int64_t>(n, 12); ++i) o << (i ? "," : "") << v[i];
  if (n > 12) o << ",…";
  return o.str();
}

TEST_P(IndexerSelectTest, ScoresAndPoolsMatchReference) {
  const SelectCase& tc = GetParam();
  const int64_t IH = tc.IH, ID = tc.ID, Bp = tc.Bp;
  const int kp = tc.kpool;
  Seqs q(tc.lens, kp, 23);
  const size_t S = tc.lens.size();

  // Pool keys straight into the cache (their own kernel is tested above); unused rows stay NaN.
  IndexerCache c(q, 32, ID);
  std::vector<float> pk_dev = c.pool_keys.download();
  std::vector<std::vector<float>> pk(S);
  for (size_t s = 0; s < S; ++s) {
    const int64_t P = tc.lens[s] / kp;
    pk[s] = fast_uniform(P * ID, 500 + s, -1.0f, 1.0f);
    for (int64_t p = 0; p < P; ++p)
      std::copy_n(pk[s].data() + p * ID, ID, pk_dev.data() + q.pool_row(static_cast<int>(s), p) * ID);
  }
  c.pool_keys.upload(pk_dev);

  // Rows: dense horizon, the first sparse position, the sequence end and a random middle.
  Rows rows;
  std::mt19937_64 gen(7);
  for (size_t s = 0; s < S; ++s) {
    const int64_t L = tc.lens[s];
    const int slot = static_cast<int>(s);
    std::vector<int64_t> ps = {std::min<int64_t>(L - 1, Bp * kp - 2), (Bp + 1) * kp - 1, L - 1,
                               static_cast<int64_t>(gen() % L)};
    for (int64_t p : ps)
      if (p >= 0 && p < L) rows.add(slot, p);
  }
  // Planted ties, both far beyond the dense horizon: a row whose head weights are all zero
  // (every score exactly 0) and a row with zero queries (every relu 0); both must pick the
  // lowest pool ids.
  ASSERT_GT(tc.lens[0], (Bp + 2) * kp);
  rows.add(0, tc.lens[0] - 1);
  rows.add(0, tc.lens[0] - 2);
  rows.upload();
  const int64_t n = rows.n(), ldq = IH * ID, ldw = IH + 3;
  std::vector<float> qI = fast_uniform(n * ldq, 600, -1.0f, 1.0f), om = fast_uniform(n * ldw, 601, -1.0f, 1.0f);
  std::fill_n(om.begin() + (n - 2) * ldw, IH, 0.0f);
  std::fill_n(qI.begin() + (n - 1) * ldq, ldq, 0.0f);
  DevBuf<float> d_qI(qI), d_om(om);
  const IndexerShape sh{IH, ID, kp, Bp, q.max_blocks * kPoolsPerBlock};

  // Scores vs the reference.
  DevBuf<float> scores(n * sh.max_pools);
  indexer_pool_scores(sh, c.layer(), q.tables(), rows.view(), d_qI.get(), ldq, d_om.get(), ldw, scores.get(),
                      sh.max_pools, nullptr);
  const std::vector<float> sc = scores.download();
  int64_t sparse_rows = 0;
  for (int64_t r = 0; r < n; ++r) {
    const int64_t nvis = (rows.pos[r] + 1) / kp;
    if (nvis <= Bp) continue;
    ++sparse_rows;
    std::vector<float> want(nvis);
    ft::indexer_pool_scores(qI.data() + r * ldq, om.data() + r * ldw, pk[rows.slot[r]].data(), nvis, IH, ID,
                        want.data());
    EXPECT_LE(rel_l2(sc.data() + r * sh.max_pools, want.data(), nvis), 1e-5)
        << tc.name << " row " << r << " (slot " << rows.slot[r] << ", pos " << rows.pos[r] << ", " << nvis
        << " pools)";
  }
  EXPECT_GT(sparse_rows, 0) << "the case has no row beyond the dense horizon";

  // Selection in passes of two rows vs select_tokens on the same scores.
  const size_t ws_bytes = indexer_select_workspace_bytes(2, sh);
  DevBuf<char> ws(ws_bytes);
  DevBuf<int32_t> sel(n * Bp), cnt(n);
  indexer_select(sh, c.layer(), q.tables(), rows.view(), d_qI.get(), ldq, d_om.get(), ldw, sel.get(), cnt.get(),
                 ws.get(), ws_bytes, nullptr);
  const std::vector<int32_t> hs = sel.download(), hc = cnt.download();
  for (int64_t r = 0; r < n; ++r) {
    const int64_t pos = rows.pos[r], nvis = (pos + 1) / kp;
    const std::vector<int32_t> toks = ft::select_tokens(sc.data() + r * sh.max_pools, pos, kp, Bp, false);
    std::vector<int32_t> want;
    for (size_t i = 0; i < toks.size(); i += kp) want.push_back(toks[i] / kp);
    want.resize(Bp, -1);
    const int64_t want_n = std::min(nvis, Bp);
    EXPECT_EQ(hc[r], want_n) << tc.name << " row " << r << " (pos " << pos << ", nvis " << nvis << ")";
    const int32_t* got = hs.data() + r * Bp;
    for (int64_t i = 0; i < Bp; ++i)
      if (got[i] != want[i]) {
        const float* rs = sc.data() + r * sh.max_pools;
        ADD_FAILURE() << tc.name << " row " << r << " (slot " << rows.slot[r] << ", pos " << pos << ", nvis "
                      << nvis << "): entry " << i << " is pool " << got[i] << " (score "
                      << (got[i] >= 0 && got[i] < nvis ? rs[got[i]] : NAN) << "), expected " << want[i]
                      << " (score " << (want[i] >= 0 ? rs[want[i]] : NAN) << "); got " << ids_str(got, Bp)
                      << " want " << ids_str(want.data(), Bp);
        break;
      }
  }

  // Invariance: every row alone gives the same scores and pools bit for bit.
  for (int64_t r = 0; r < n; ++r) {
    DevBuf<float> s1(sh.max_pools);
    DevBuf<int32_t> sel1(Bp), cnt1(1);
    indexer_pool_scores(sh, c.layer(), q.tables(), rows.view(r, 1), d_qI.get() + r * ldq, ldq, d_om.get() + r * ldw,
                        ldw, s1.get(), sh.max_pools, nullptr);
    indexer_select(sh, c.layer(), q.tables(), rows.view(r, 1), d_qI.get() + r * ldq, ldq, d_om.get() + r * ldw, ldw,
                   sel1.get(), cnt1.get(), ws.get(), ws_bytes, nullptr);
    const int64_t nvis = (rows.pos[r] + 1) / kp;
    if (nvis > Bp) {
      const std::vector<float> a = s1.download();
      EXPECT_EQ(bit_mismatches(a.data(), sc.data() + r * sh.max_pools, nvis), 0u)
          << tc.name << " row " << r << ": scores alone differ from scores in the batch";
    }
    const std::vector<int32_t> a = sel1.download(), ac = cnt1.download();
    EXPECT_EQ(bit_mismatches(a.data(), hs.data() + r * Bp, Bp) + (ac[0] != hc[r]), 0u)
        << tc.name << " row " << r << ": selection alone differs from selection in the batch";
  }
}

INSTANTIATE_TEST_SUITE_P(Widths, IndexerSelectTest,
                         ::testing::Values(SelectCase{"tiny", 8, 16, 4, 4, {37, 300, 130, 3}},
                                           SelectCase{"real_k16", 32, 128, 16, 128, {40000, 3000, 2063}},
                                           SelectCase{"real_k4", 32, 128, 4, 512, {40000, 2100}}),
                         [](const auto& i) { return std::string(i.param.name); });

// ---------------------------------------------------------------------------------------------
// Top-k with planted ties vs topk_indices.

class TopkPoolIdsTest : public test::GpuTest {};

struct TopkRow {
  std::string what;
  std::vector<float> s;
};

void check_topk(const std::vector<TopkRow>& cases, int kpool, int64_t k) {
  const int64_t n = static_cast<int64_t>(cases.size());
  int64_t ld = 1;
  for (const auto& c : cases) ld = std::max<int64_t>(ld, static_cast<int64_t>(c.s.size()));
  std::vector<float> h(n * ld, NAN);  // past nvis: NaN, which would win nothing if read anyway
  std::vector<int32_t> pos(n);
  for (int64_t r = 0; r < n; ++r) {
    std::copy(cases[r].s.begin(), cases[r].s.end(), h.begin() + r * ld);
    const int64_t nvis = static_cast<int64_t>(cases[r].s.size());
    // Any position with ⌊(pos+1)/κ⌋ = nvis (κ = 1 rows all have nvis ≥ 1).
    pos[r] = static_cast<int32_t>(std::max<int64_t>(0, nvis * kpool + r % kpool - 1));
  }
  DevBuf<float> d(h);
  DevBuf<int32_t> dp(pos), ids(n * k), cnt(n);
  topk_pool_ids(d.get(), ld, dp.get(), n, kpool, k, ids.get(), cnt.get(), nullptr);
  const std::vector<int32_t> hi = ids.download(), hc = cnt.download();
  for (int64_t r = 0; r < n; ++r) {
    const int64_t nvis = static_cast<int64_t>(cases[r].s.size());
    ASSERT_EQ((pos[r] + 1) / kpool, nvis);
    std::vector<int32_t> want;
    if (nvis <= k) {
      want.resize(nvis);
      std::iota(want.begin(), want.end(), 0);
    } else {
      want = ft::topk_indices(cases[r].s.data(), nvis, k);
      std::sort(want.begin(), want.end());
    }
    EXPECT_EQ(hc[r], static_cast<int32_t>(want.size())) << cases[r].what << " (nvis " << nvis << ", k " << k << ")";
    want.resize(k, -1);
    for (int64_t i = 0; i < k; ++i)
      if (hi[r * k + i] != want[i]) {
        const int32_t g = hi[r * k + i];
        ADD_FAILURE() << cases[r].what << " (nvis " << nvis << ", k " << k << "): entry " << i << " is " << g
                      << " (score " << (g >= 0 && g < nvis ? cases[r].s[g] : NAN) << "), expected " << want[i]
                      << " (score " << (want[i] >= 0 ? cases[r].s[want[i]] : NAN) << ")";
        break;
      }
  }
}

TEST_F(TopkPoolIdsTest, TiesGoToTheLowerPoolId) {
  std::mt19937_64 g(99);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  auto normal = [&](int64_t n) {
    std::vector<float> v(n);
    for (float& x : v) x = nd(g);
    return v;
  };
  std::vector<TopkRow> rows;
  rows.push_back({"all +0", std::vector<float>(1000, 0.0f)});
  {
    std::vector<float> v = normal(700);  // relu-like: 30 % exact zeros (half −0), the rest negative
    for (size_t i = 0; i < v.size(); ++i) v[i] = (i % 10 < 3) ? ((i % 2) ? -0.0f : 0.0f) : -std::fabs(v[i]) - 1e-3f;
    rows.push_back({"zeros of both signs among negatives", v});
  }
  {
    std::vector<float> v(5000);
    for (float& x : v) x = 0.5f * static_cast<float>(g() % 4);
    rows.push_back({"four levels, ties across the boundary", v});
  }
  {
    std::vector<float> v = normal(65536);
    for (int i = 0; i < 100; ++i) v[(g() % 65536)] = 10.0f + 0.01f * i;
    for (int i = 0; i < 200; ++i) v[(g() % 65536)] = 9.0f;  // the boundary value, 200 ways tied
    rows.push_back({"65536 pools, 200-way tie at the boundary", v});
  }
  {
    std::vector<float> v(65536, 0.0f);
    for (int i = 0; i < 50; ++i) v[(g() % 65536)] = 1.0f + i;
    rows.push_back({"65536 pools, 50 positive, the rest 0", v});
  }
  {
    std::vector<float> v(3000);
    for (size_t i = 0; i < v.size(); ++i) {
      float x = 1.0f;
      for (size_t j = 0; j < (i * 2654435761u) % 300; ++j) x = std::nextafter(x, 2.0f);
      v[i] = x;  // neighbours one ulp apart: the radix passes must reach the last bit
    }
    rows.push_back({"values one ulp apart", v});
  }
  rows.push_back({"all equal negative", std::vector<float>(300, -3.25f)});
  rows.push_back({"nvis == k", normal(128)});
  rows.push_back({"nvis == k + 1", normal(129)});
  rows.push_back({"nvis < k", normal(50)});
  rows.push_back({"random normal 20000", normal(20000)});
  check_topk(rows, 1, 128);
  check_topk(rows, 16, 128);

  std::vector<TopkRow> tiny;
  {
    std::vector<float> v(20);
    for (float& x : v) x = static_cast<float>(g() % 3);
    tiny.push_back({"tiny, three levels", v});
  }
  tiny.push_back({"tiny, all zero", std::vector<float>(9, 0.0f)});
  tiny.push_back({"tiny, 4 of 4", normal(4)});
  tiny.push_back({"tiny, 5", normal(5)});
  tiny.push_back({"tiny, none", {}});
  check_topk(tiny, 4, 4);
}

}  // namespace
}  // namespace ft::cuda
