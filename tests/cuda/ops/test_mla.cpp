// mla_attend against shared/ops/mla (mla_attend) on the fp16-rounded cache (or an fp32 cache):
// the SIMT path to accumulation order (≤ 1e-5), the tensor-core path within 2e-3 of the
// unrounded fp32 math (where it cannot run, the request falls back to the SIMT bits); an
// empty selection gives exact zeros; batch invariance on both paths (a row alone vs among rows
// of other sequences, reversed row order, and row passes forced by a small workspace: bits).
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>

#include "gpu-worker/backends/cuda/ops/mla.h"
#include "shared/ops/mla.h"
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

struct AttendCase {
  const char* name;
  int64_t NH, Rkv;
  int kpool;
  int64_t Bp;
  bool tail;
  float scale;
  std::vector<int64_t> lens;
  bool fp32_cache = false;  // an fp32-precision engine's cache (SIMT only; the fp32 latents)
};

class MlaAttendTest : public test::GpuTest, public ::testing::WithParamInterface<AttendCase> {};

struct AttendRun {
  std::vector<float> simt, mma;
};

TEST_P(MlaAttendTest, MatchesReferenceAndIsBatchInvariant) {
  const AttendCase& tc = GetParam();
  const int64_t NH = tc.NH, Rkv = tc.Rkv, Bp = tc.Bp;
  const int kp = tc.kpool;
  Seqs q(tc.lens, kp, 31);
  const size_t S = tc.lens.size();
  const SparseCacheGeometry g{Rkv, 0, kp, q.max_blocks};
  const MlaAttendShape sh{NH, Rkv, kp, Bp, tc.tail, tc.scale};

  // Latents: fp32 per sequence, the cache holds their fp16 rounding.
  std::vector<std::vector<float>> lat(S), lat16(S);
  DevBuf<__half> cache(q.n_blocks * q.bt * Rkv);
  DevBuf<float> cache32(tc.fp32_cache ? q.n_blocks * q.bt * Rkv : 1);
  {
    std::vector<float> f(tc.fp32_cache ? q.n_blocks * q.bt * Rkv : 0, NAN);
    std::vector<__half> h(q.n_blocks * q.bt * Rkv, __float2half_rn(NAN));  // unused rows: NaN if ever read
    for (size_t s = 0; s < S; ++s) {
      lat[s] = fast_uniform(tc.lens[s] * Rkv, 700 + s, -3.0f, 3.0f);
      lat16[s].resize(lat[s].size());
      for (int64_t p = 0; p < tc.lens[s]; ++p)
        for (int64_t c = 0; c < Rkv; ++c) {
          lat16[s][p * Rkv + c] = to_f16(lat[s][p * Rkv + c]);
          h[q.token_row(static_cast<int>(s), p) * Rkv + c] = __float2half_rn(lat[s][p * Rkv + c]);
          if (tc.fp32_cache) f[q.token_row(static_cast<int>(s), p) * Rkv + c] = lat[s][p * Rkv + c];
        }
    }
    if (tc.fp32_cache) FT_CUDA_CHECK(cudaMemcpy(cache32.get(), f.data(), f.size() * 4, cudaMemcpyHostToDevice));
    FT_CUDA_CHECK(cudaMemcpy(cache.get(), h.data(), h.size() * sizeof(__half), cudaMemcpyHostToDevice));
  }
  SparseCacheLayer layer{cache.get(), nullptr, nullptr, nullptr};
  if (tc.fp32_cache) {
    layer.latent = nullptr;
    layer.latent32 = cache32.get();
  }
  // Where the tensor-core path cannot run (an fp32 cache, Rkv not a multiple of 32) a request
  // for it runs the SIMT path: the same bits.
  const bool simt_only = tc.fp32_cache || Rkv % 32 != 0;

  // Rows: first token, a query without complete pools, the largest dense selection, the first
  // sparse position, the sequence end and a random one; selections ascending random pools.
  Rows rows;
  std::mt19937_64 gen(5);
  for (size_t s = 0; s < S; ++s) {
    const int64_t L = tc.lens[s];
    std::vector<int64_t> ps = {0, kp - 2, Bp * kp + kp - 2, (Bp + 1) * kp - 1, L - 1,
                               static_cast<int64_t>(gen() % L)};
    std::sort(ps.begin(), ps.end());
    ps.erase(std::unique(ps.begin(), ps.end()), ps.end());
    for (int64_t p : ps)
      if (p >= 0 && p < L) rows.add(static_cast<int>(s), p);
  }
  rows.upload();
  const int64_t n = rows.n();
  std::vector<int32_t> sel(n * Bp, -1), cnt(n);
  std::vector<std::vector<int32_t>> toks(n);
  for (int64_t r = 0; r < n; ++r) {
    const int64_t pos = rows.pos[r], nvis = (pos + 1) / kp;
    std::vector<int32_t> pools(nvis);
    std::iota(pools.begin(), pools.end(), 0);
    if (nvis > Bp) {
      std::shuffle(pools.begin(), pools.end(), gen);
      pools.resize(Bp);
      std::sort(pools.begin(), pools.end());
    }
    cnt[r] = static_cast<int32_t>(pools.size());
    std::copy(pools.begin(), pools.end(), sel.begin() + r * Bp);
    for (int32_t p : pools)
      for (int j = 0; j < kp; ++j) toks[r].push_back(p * kp + j);
    if (tc.tail)
      for (int64_t t = nvis * kp; t <= pos; ++t) toks[r].push_back(static_cast<int32_t>(t));
  }
  DevBuf<int32_t> d_sel(sel), d_cnt(cnt);
  const std::vector<float> qa = fast_uniform(n * NH * Rkv, 800, -2.0f, 2.0f);
  DevBuf<float> d_q(qa);

  auto run = [&](const SparseRows& v, const int32_t* sp, const int32_t* sc, const float* qp, int64_t m,
                 MlaAttendPath path, size_t ws_rows) {
    const size_t bytes = std::max<size_t>(mla_attend_workspace_bytes(static_cast<int64_t>(ws_rows), sh), 1);
    DevBuf<char> ws(bytes);
    DevBuf<float> out(m * NH * Rkv);
    mla_attend(sh, layer, g, q.tables(), v, sp, sc, qp, out.get(), ws.get(), bytes, nullptr, path);
    return out.download();
  };
  const std::vector<float> simt = run(rows.view(), d_sel.get(), d_cnt.get(), d_q.get(), n, MlaAttendPath::Simt, n);
  const std::vector<float> mma =
      run(rows.view(), d_sel.get(), d_cnt.get(), d_q.get(), n, MlaAttendPath::TensorCore, n);

  const MlaDims dims{NH, 0, 0, Rkv};
  int64_t empty_rows = 0;
  for (int64_t r = 0; r < n; ++r) {
    const int slot = rows.slot[r];
    std::vector<float> want16(NH * Rkv), want32(NH * Rkv);
    const int64_t ns = static_cast<int64_t>(toks[r].size());
    ASSERT_EQ(ns, mla_selection_size(rows.pos[r], cnt[r], kp, tc.tail));
    ft::mla_attend(qa.data() + r * NH * Rkv, lat16[slot].data(), toks[r].data(), ns, dims, tc.scale, want16.data());
    ft::mla_attend(qa.data() + r * NH * Rkv, lat[slot].data(), toks[r].data(), ns, dims, tc.scale, want32.data());
    const float* gs = simt.data() + r * NH * Rkv;
    const float* gm = mma.data() + r * NH * Rkv;
    const char* what = tc.name;
    if (ns == 0) {
      ++empty_rows;
      size_t nonzero = 0;
      for (int64_t i = 0; i < NH * Rkv; ++i) nonzero += (gs[i] != 0.0f) + (gm[i] != 0.0f);
      EXPECT_EQ(nonzero, 0u) << what << " row " << r << " (pos " << rows.pos[r] << "): empty selection not zero";
      continue;
    }
    double worst_s = 0, worst_m = 0;
    int64_t hs = -1, hm = -1;
    for (int64_t h = 0; h < NH; ++h) {
      const double es = rel_l2(gs + h * Rkv, want16.data() + h * Rkv, Rkv);
      const double em = rel_l2(gm + h * Rkv, want32.data() + h * Rkv, Rkv);
      if (!(es <= worst_s)) worst_s = es, hs = h;
      if (!(em <= worst_m)) worst_m = em, hm = h;
    }
    if (tc.fp32_cache) want16 = want32;  // the SIMT path on fp32 latents: the reference on the same latents
    if (simt_only) {
      EXPECT_EQ(bit_mismatches(gs, gm, NH * Rkv), 0u) << tc.name << " row " << r << ": the fallback is not the SIMT path";
    }
    const double es = rel_l2(gs, want16.data(), NH * Rkv), em = rel_l2(gm, want32.data(), NH * Rkv);
    EXPECT_LE(es, 1e-5) << what << " SIMT row " << r << " (slot " << slot << ", pos " << rows.pos[r] << ", |Sel| "
                        << ns << "): worst head " << hs << " rel " << worst_s << "; ctx[" << hs << "][0] = "
                        << (hs >= 0 ? gs[hs * Rkv] : NAN) << ", expected " << (hs >= 0 ? want16[hs * Rkv] : NAN);
    EXPECT_LE(em, 2e-3) << what << " mma row " << r << " (slot " << slot << ", pos " << rows.pos[r] << ", |Sel| "
                        << ns << "): worst head " << hm << " rel " << worst_m << " (vs rounded latents: "
                        << rel_l2(gm, want16.data(), NH * Rkv) << "); ctx[" << hm << "][0] = "
                        << (hm >= 0 ? gm[hm * Rkv] : NAN) << ", expected " << (hm >= 0 ? want32[hm * Rkv] : NAN);
  }
  if (!tc.tail) {
    EXPECT_GT(empty_rows, 0) << "the case has no empty selection";
  }

  // Invariance: each row alone, the rows in reverse order, and one row per workspace pass.
  for (MlaAttendPath path : {MlaAttendPath::Simt, MlaAttendPath::TensorCore}) {
    const std::vector<float>& all = path == MlaAttendPath::Simt ? simt : mma;
    const char* pname = path == MlaAttendPath::Simt ? "SIMT" : "mma";
    for (int64_t r = 0; r < n; ++r) {
      const std::vector<float> one = run(rows.view(r, 1), d_sel.get() + r * Bp, d_cnt.get() + r,
                                         d_q.get() + r * NH * Rkv, 1, path, 1);
      EXPECT_EQ(bit_mismatches(one.data(), all.data() + r * NH * Rkv, NH * Rkv), 0u)
          << tc.name << " " << pname << " row " << r << " alone differs from the batch";
    }
    Rows rev;
    std::vector<int32_t> rsel(n * Bp), rcnt(n);
    std::vector<float> rq(n * NH * Rkv);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t r = n - 1 - i;
      rev.add(rows.slot[r], rows.pos[r]);
      std::copy_n(sel.begin() + r * Bp, Bp, rsel.begin() + i * Bp);
      rcnt[i] = cnt[r];
      std::copy_n(qa.begin() + r * NH * Rkv, NH * Rkv, rq.begin() + i * NH * Rkv);
    }
    rev.upload();
    DevBuf<int32_t> d_rsel(rsel), d_rcnt(rcnt);
    DevBuf<float> d_rq(rq);
    const std::vector<float> back = run(rev.view(), d_rsel.get(), d_rcnt.get(), d_rq.get(), n, path, 1);
    size_t bad = 0;
    for (int64_t i = 0; i < n; ++i)
      bad += bit_mismatches(back.data() + i * NH * Rkv, all.data() + (n - 1 - i) * NH * Rkv, NH * Rkv);
    EXPECT_EQ(bad, 0u) << tc.name << " " << pname << ": reversed rows in one-row passes differ";
  }
}

INSTANTIATE_TEST_SUITE_P(
    Widths, MlaAttendTest,
    ::testing::Values(AttendCase{"tiny", 4, 32, 4, 4, true, 0.25f, {37, 300, 130, 3}},
                      AttendCase{"tiny_notail", 4, 32, 4, 4, false, 0.25f, {37, 300, 2}},
                      AttendCase{"real_k16", 64, 512, 16, 128, true, 0.0625f, {40000, 2100}},
                      AttendCase{"real_k4", 64, 512, 4, 512, true, 0.0625f, {9000, 600}},
                      AttendCase{"real_k16_notail", 64, 512, 16, 128, false, 0.0625f, {3000}},
                      AttendCase{"tiny_rkv40", 4, 40, 4, 4, true, 0.25f, {37, 300, 3}},
                      AttendCase{"tiny_fp32", 4, 32, 4, 4, true, 0.25f, {37, 300, 130, 3}, true},
                      AttendCase{"tiny_rkv40_fp32", 4, 40, 4, 4, true, 0.25f, {37, 300, 3}, true},
                      AttendCase{"real_k16_fp32", 64, 512, 16, 128, true, 0.0625f, {9000, 2100}, true}),
    [](const auto& i) { return std::string(i.param.name); });

// The latent-only append of shared-indexer layers (no indexer cache): fp16 of the input, bits.
class SparseCacheAppendTest : public test::GpuTest {};

TEST_F(SparseCacheAppendTest, LatentOnlyLayerWritesFp16) {
  const int64_t Rkv = 512;
  Seqs q({1500, 70}, 16, 41);
  const SparseCacheGeometry g{Rkv, 128, 16, q.max_blocks};
  Rows rows;
  for (int64_t p = 0; p < 1500; p += 7) rows.add(0, p);
  for (int64_t p = 0; p < 70; ++p) rows.add(1, p);
  rows.upload();
  const int64_t n = rows.n(), ld = Rkv + 4;
  const std::vector<float> in = fast_uniform(n * ld, 900, -70000.0f, 70000.0f);  // beyond fp16: ±inf as __float2half_rn
  DevBuf<float> d_in(in);
  DevBuf<__half> cache(q.n_blocks * q.bt * Rkv);
  sparse_cache_append({cache.get(), nullptr, nullptr, nullptr}, g, q.tables(), rows.view(), d_in.get(), ld, nullptr,
                      nullptr, 0, nullptr);
  const std::vector<__half> h = cache.download();
  size_t bad = 0;
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < Rkv; ++c) {
      const __half got = h[q.token_row(rows.slot[r], rows.pos[r]) * Rkv + c], want = __float2half_rn(in[r * ld + c]);
      if (std::memcmp(&got, &want, 2) != 0 && bad++ < 3)
        ADD_FAILURE() << "row " << r << " (slot " << rows.slot[r] << ", pos " << rows.pos[r] << ") channel " << c
                      << ": " << __half2float(got) << ", expected " << __half2float(want);
    }
  EXPECT_EQ(bad, 0u);
}

}  // namespace
}  // namespace ft::cuda
