// Grouped EXL3 MoE on the GPU: packed expert blocks (expert_block.h) in VRAM, in mapped host
// memory (zero-copy) and mixed give bit-identical rows; the rows equal three separate EXL3
// linears + the SwiGLU transform bit for bit; the combined token outputs agree with the CPU
// expert tier (ExpertRunner with the GPU operand rounding) to accumulation order (max rel diff
// printed); padded intermediate widths; experts with more than one 32-row batch; both the
// split-K (≤ 64 picks) and the whole-input (more picks) orders of work; the prefill form (128-row
// tiles for crowded experts) gives the 32-row form's bits.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "gpu-worker/backends/cuda/exl3/exl3_linear.h"
#include "gpu-worker/backends/cuda/exl3/moe.h"
#include "shared/exl3/expert_block.h"
#include "shared/exl3/expert_forward.h"
#include "shared/exl3/thread_pool.h"
#include "tests/cuda/exl3/exl3_test_util.h"
#include "tests/cuda/support/gpu_test.h"

namespace ft::test {
namespace {

using exl3gpu::Codebook;
using exl3gpu::RandomLinear;
constexpr float kLimit = 10.0f;

struct Layer {
  int64_t D, I;
  int E;
  std::vector<std::unique_ptr<RandomLinear>> lin;  // [E][3]
  uint64_t block_bytes = 0;
  uint8_t* host = nullptr;  // E blocks, page-aligned
  DevBuf<unsigned char> vram;
  void* mapped = nullptr;  // device alias of host
  cuda::Exl3MoeLayer geo;

  Layer(int64_t D_, int64_t I_, int E_, const int (&K)[3], const Codebook (&cb)[3], uint64_t seed)
      : D(D_), I(I_), E(E_) {
    ft::exl3::ExpertGeometry g;
    g.hidden = D, g.inter = I;
    for (int p = 0; p < 3; ++p) g.K[p] = K[p], g.codebook[p] = cb[p];
    block_bytes = ft::exl3::plan_expert_block(g).block_bytes;
    host = static_cast<uint8_t*>(std::aligned_alloc(ft::exl3::kExpertBlockAlign, block_bytes * E));
    for (int e = 0; e < E; ++e) {
      for (int p = 0; p < 3; ++p) {
        const int64_t in = p == 2 ? I : D, out = p == 2 ? D : I;
        lin.push_back(std::make_unique<RandomLinear>(K[p], cb[p], in, out, seed + 10 * e + p));
      }
      ft::exl3::pack_expert_block(q(e, 0), q(e, 1), q(e, 2), D, I, host + e * block_bytes);
    }
    vram = DevBuf<unsigned char>(block_bytes * E);
    FT_CUDA_CHECK(cudaMemcpy(vram.get(), host, block_bytes * E, cudaMemcpyHostToDevice));
    mapped = cuda::exl3_map_host_experts(host, block_bytes * E);
    geo = cuda::exl3_moe_geometry(host, E);
    for (int e = 0; e < E; ++e) cuda::exl3_moe_check_block(geo, host + e * block_bytes, e);
  }
  ~Layer() {
    if (mapped) cuda::exl3_unmap_host_experts(host);
    std::free(host);
  }
  const ft::exl3::Exl3Linear& q(int e, int p) const { return lin[3 * e + p]->q; }
  const uint8_t* block(int e) const { return host + e * block_bytes; }
  // where[e]: 0 VRAM, 1 mapped host memory.
  std::vector<cuda::Exl3ExpertPtrs> table(const std::vector<int>& where) const {
    std::vector<cuda::Exl3ExpertPtrs> t(E);
    for (int e = 0; e < E; ++e)
      t[e] = cuda::exl3_expert_ptrs(block(e), where[e] ? static_cast<unsigned char*>(mapped) + e * block_bytes
                                                       : vram.get() + e * block_bytes);
    return t;
  }
};

struct Routes {
  int64_t n;
  int top_k;
  std::vector<int32_t> expert;
  std::vector<float> weight;
  // Host counting sort (what moe_dispatch computes).
  std::vector<int32_t> offsets, sorted, active;
  Routes(int64_t n_, int top_k_, int E, uint64_t seed, bool crowd = false) : n(n_), top_k(top_k_) {
    std::mt19937_64 g(seed);
    for (int64_t t = 0; t < n; ++t) {
      std::vector<int32_t> all(E);
      for (int e = 0; e < E; ++e) all[e] = e;
      if (!crowd) std::shuffle(all.begin(), all.end(), g);
      std::vector<int32_t> pick(all.begin(), all.begin() + top_k);
      std::sort(pick.begin(), pick.end());
      for (int k = 0; k < top_k; ++k) {
        expert.push_back(pick[k]);
        weight.push_back(0.1f + 0.5f * static_cast<float>(g() % 1000) / 1000.0f);
      }
    }
    dispatch(E);
  }
  // The first n tokens of another batch (same picks, same weights).
  Routes(const Routes& all, int64_t n_, int E) : n(n_), top_k(all.top_k) {
    expert.assign(all.expert.begin(), all.expert.begin() + n * top_k);
    weight.assign(all.weight.begin(), all.weight.begin() + n * top_k);
    dispatch(E);
  }
  void dispatch(int E) {
    offsets.assign(E + 1, 0);
    for (int32_t e : expert) ++offsets[e + 1];
    for (int e = 0; e < E; ++e) offsets[e + 1] += offsets[e];
    std::vector<int32_t> fill(offsets.begin(), offsets.end() - 1);
    sorted.resize(expert.size());
    for (size_t p = 0; p < expert.size(); ++p) sorted[fill[expert[p]]++] = static_cast<int32_t>(p);
    for (int e = 0; e < E; ++e)
      if (offsets[e + 1] > offsets[e]) active.push_back(e);
  }
};

struct MoeRun {
  DevBuf<int32_t> expert, offsets, sorted, active, n_active;
  DevBuf<float> weight;
  DevBuf<unsigned char> ws;
  cuda::MoeRoutes r;
  cuda::MoeDispatch d;
  MoeRun(const Layer& L, const Routes& R)
      : expert(R.expert), offsets(R.offsets), sorted(R.sorted),
        active(R.active.empty() ? std::vector<int32_t>{0} : R.active),
        n_active(std::vector<int32_t>{static_cast<int32_t>(R.active.size())}), weight(R.weight),
        ws(cuda::exl3_moe_workspace_bytes(L.geo, R.n, R.top_k)) {
    cuda::exl3_moe_workspace_init(ws.get(), ws.size(), nullptr);
    r.expert = expert.get(), r.weight = weight.get(), r.n = R.n, r.top_k = R.top_k;
    d.offsets = offsets.get(), d.sorted_pick = sorted.get(), d.active = active.get(), d.n_active = n_active.get();
  }
  // On this run's own workspace, or on `shared` (zeroed once, used before by other runs).
  // gemm_min_picks: the layer's choice of form (moe.h; −1 the default).
  std::vector<float> run(const Layer& L, const std::vector<int>& where, const std::vector<float>& x,
                         void* shared = nullptr, int gemm_min_picks = -1) {
    DevBuf<cuda::Exl3ExpertPtrs> table(L.table(where));
    cuda::Exl3MoeLayer geo = L.geo;
    geo.table = table.get();
    geo.gemm_min_picks = gemm_min_picks;
    DevBuf<float> dx(x), Y(static_cast<size_t>(r.n * r.top_k * L.D));
    cuda::exl3_moe_experts(geo, r, d, dx.get(), L.D, kLimit, Y.get(), shared ? shared : ws.get(), nullptr);
    return Y.download();
  }
};

// The exact token outputs: every expert in double from its effective weights (reference.h,
// the fp16 weights' dense equivalent rounded once to fp32), fp32 inputs as given, clamped
// SwiGLU in double, Σ_k w·expert in double. What each tier's rounding is measured against.
std::vector<double> exact_outputs(const Layer& L, const Routes& R, const std::vector<float>& x) {
  const int64_t Dp = ft::exl3::pad128(L.D), Ip = ft::exl3::pad128(L.I);
  std::vector<double> out(static_cast<size_t>(R.n * L.D), 0.0);
  std::vector<std::vector<float>> w(static_cast<size_t>(3 * L.E));
  for (int64_t p = 0; p < R.n * R.top_k; ++p) {
    const int e = R.expert[p];
    for (int j = 0; j < 3; ++j)
      if (w[3 * e + j].empty()) w[3 * e + j] = ft::exl3::effective_weight(L.q(e, j));  // [in_p][out_p]
    const float* xr = &x[(p / R.top_k) * L.D];
    std::vector<double> g(static_cast<size_t>(Ip), 0.0), u(g), h(g);
    for (int64_t i = 0; i < L.D; ++i)
      for (int64_t c = 0; c < Ip; ++c) {
        g[c] += static_cast<double>(xr[i]) * w[3 * e][i * Ip + c];
        u[c] += static_cast<double>(xr[i]) * w[3 * e + 1][i * Ip + c];
      }
    for (int64_t c = 0; c < L.I; ++c) {
      const double gc = std::min<double>(g[c], kLimit), uc = std::clamp<double>(u[c], -kLimit, kLimit);
      h[c] = gc / (1.0 + std::exp(-gc)) * uc;
    }
    const double wt = R.weight[p];
    double* o = &out[(p / R.top_k) * L.D];
    for (int64_t c = 0; c < L.I; ++c)
      for (int64_t d = 0; d < L.D; ++d) o[d] += wt * h[c] * w[3 * e + 2][c * Dp + d];
  }
  return out;
}

double rel_l2_to(const std::vector<float>& a, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) num += (a[i] - ref[i]) * (a[i] - ref[i]), den += ref[i] * ref[i];
  return std::sqrt(num / std::max(den, 1e-300));
}

// Token outputs Σ_k w·Y[t·top_k + k], ascending k (= ascending expert), fp32.
std::vector<float> combine(const std::vector<float>& Y, const Routes& R, int64_t D) {
  std::vector<float> out(static_cast<size_t>(R.n * D), 0.0f);
  for (int64_t t = 0; t < R.n; ++t)
    for (int k = 0; k < R.top_k; ++k)
      for (int64_t c = 0; c < D; ++c) out[t * D + c] += R.weight[t * R.top_k + k] * Y[(t * R.top_k + k) * D + c];
  return out;
}

void check_layer(Layer& L, const Routes& R, const char* what, uint64_t seed) {
  const std::vector<float> x = randn(static_cast<size_t>(R.n * L.D), seed);
  MoeRun m(L, R);
  std::vector<int> all_vram(L.E, 0), all_host(L.E, 1), mixed(L.E);
  for (int e = 0; e < L.E; ++e) mixed[e] = e % 2;
  const std::vector<float> yv = m.run(L, all_vram, x);
  const std::vector<float> yh = m.run(L, all_host, x);
  const std::vector<float> ym = m.run(L, mixed, x);
  const size_t P = static_cast<size_t>(R.n * R.top_k);
  EXPECT_EQ(bit_mismatches(yv.data(), yh.data(), P * L.D), 0u) << what << ": VRAM vs mapped host memory";
  EXPECT_EQ(bit_mismatches(yv.data(), ym.data(), P * L.D), 0u) << what << ": VRAM vs mixed";
  size_t finite = 0;
  for (float v : yv) finite += std::isfinite(v);
  EXPECT_EQ(finite, yv.size()) << what << ": unwritten or non-finite rows";

  // The CPU expert tier on the same blocks.
  ft::exl3::ThreadPool pool(2, false);
  ft::exl3::ExpertRunner runner(pool, kLimit);
  std::vector<std::vector<int32_t>> rows(L.E);
  std::vector<std::vector<float>> wts(L.E);
  for (int64_t p = 0; p < static_cast<int64_t>(P); ++p) {
    rows[R.expert[p]].push_back(static_cast<int32_t>(p / R.top_k));
    wts[R.expert[p]].push_back(R.weight[p]);
  }
  std::vector<ft::exl3::ExpertTask> tasks;
  for (int e = 0; e < L.E; ++e)
    if (!rows[e].empty()) tasks.push_back({L.block(e), rows[e].data(), wts[e].data(), static_cast<int>(rows[e].size())});
  std::vector<float> cpu(static_cast<size_t>(R.n * L.D));
  // With the GPU's operand rounding (exl3/operands.h), as the tier split runs it.
  runner.forward(tasks.data(), static_cast<int>(tasks.size()), x.data(), R.n, cpu.data(),
                 ft::exl3::Operands::F16Rows);
  const std::vector<float> gpu = combine(yv, R, L.D);
  double max_rel = 0, ref_max = 0;
  for (float v : cpu) ref_max = std::max(ref_max, static_cast<double>(std::fabs(v)));
  for (size_t i = 0; i < cpu.size(); ++i) max_rel = std::max(max_rel, std::fabs(double(gpu[i]) - cpu[i]) / ref_max);
  const double e = rel_l2(gpu, cpu);
  std::printf("[ exl3 moe ] %s: GPU vs CPU expert tier: rel L2 %.3g, max |diff| / max |ref| %.3g\n", what, e, max_rel);
  // Each side against the exact outputs: which one's rounding the distance above is.
  std::vector<float> cpu32(cpu.size());
  runner.forward(tasks.data(), static_cast<int>(tasks.size()), x.data(), R.n, cpu32.data(), ft::exl3::Operands::F32);
  const std::vector<double> exact = exact_outputs(L, R, x);
  const double e_gpu = rel_l2_to(gpu, exact), e_f16 = rel_l2_to(cpu, exact), e_f32 = rel_l2_to(cpu32, exact);
  std::printf("[ exl3 moe ] %s: rel L2 to the exact (fp64) outputs: GPU %.3g, CPU tier F16Rows %.3g, CPU tier F32 %.3g\n",
              what, e_gpu, e_f16, e_f32);
  EXPECT_LE(e_gpu, 1e-3) << what << ": GPU vs exact";
  EXPECT_LE(e_f32, 1e-5) << what << ": CPU tier (fp32 operands) vs exact";
  // Accumulation order, and the fp16 down inputs it moves across a rounding boundary (H200,
  // session 8: at most 2.8e-5; 4.5e-4 before the CPU tier rounded as the GPU does).
  EXPECT_LE(e, 1e-4) << what << ": GPU vs CPU expert tier (max rel diff " << max_rel << ")";
}

// Three separate linears + the SwiGLU transform, per expert, give the MoE's rows bit for bit.
void check_separate_linears(Layer& L, const Routes& R, uint64_t seed, int gemm_min_picks = -1) {
  const std::vector<float> x = randn(static_cast<size_t>(R.n * L.D), seed);
  MoeRun m(L, R);
  const std::vector<float> y = m.run(L, std::vector<int>(L.E, 0), x, nullptr, gemm_min_picks);
  const int64_t Ip = ft::exl3::pad128(L.I);
  size_t bad = 0, checked = 0;
  for (int e = 0; e < L.E; ++e) {
    std::vector<int64_t> picks;
    for (int64_t p = 0; p < R.n * R.top_k; ++p)
      if (R.expert[p] == e) picks.push_back(p);
    if (picks.empty()) continue;
    const int64_t n = static_cast<int64_t>(picks.size());
    std::vector<float> xe(static_cast<size_t>(n * L.D));
    for (int64_t i = 0; i < n; ++i)
      std::memcpy(&xe[i * L.D], &x[(picks[i] / R.top_k) * L.D], L.D * sizeof(float));
    const cuda::Exl3ExpertPtrs dp = L.table(std::vector<int>(L.E, 0))[e];
    cuda::Exl3LinearDev lin[3];
    for (int p = 0; p < 3; ++p) {
      const int64_t in = p == 2 ? L.I : L.D, out = p == 2 ? L.D : Ip;  // gate/up keep the padded width
      lin[p] = cuda::exl3_linear_view(L.geo.K[p], L.geo.codebook[p], in, out, dp.trellis[p], dp.suh[p], dp.svh[p]);
    }
    DevBuf<unsigned char> ws(std::max(cuda::exl3_linear_workspace_bytes(lin[0], n),
                                      cuda::exl3_linear_workspace_bytes(lin[2], n)));
    cuda::exl3_linear_workspace_init(ws.get(), ws.size(), nullptr);
    DevBuf<float> dx(xe), g(static_cast<size_t>(n * Ip)), u(static_cast<size_t>(n * Ip));
    DevBuf<float> out(static_cast<size_t>(n * L.D));
    DevBuf<__half> xh(static_cast<size_t>(n * Ip));
    DevBuf<float> rs(static_cast<size_t>(n));
    cuda::exl3_linear(lin[0], dx.get(), L.D, n, g.get(), Ip, ws.get(), nullptr);
    cuda::exl3_linear(lin[1], dx.get(), L.D, n, u.get(), Ip, ws.get(), nullptr);
    cuda::exl3_swiglu_input_transform(g.get(), u.get(), Ip, n, Ip, kLimit, dp.suh[2], xh.get(), rs.get(), nullptr);
    cuda::exl3_matmul_transformed(lin[2], xh.get(), rs.get(), n, out.get(), L.D, ws.get(), nullptr);
    const std::vector<float> o = out.download();
    for (int64_t i = 0; i < n; ++i) {
      const size_t b = bit_mismatches(&o[i * L.D], &y[picks[i] * L.D], static_cast<size_t>(L.D));
      if (b && bad == 0)
        ADD_FAILURE() << "expert " << e << " pick " << picks[i] << " (" << n << " rows): " << b
                      << " values differ from the grouped kernel, e.g. col 0: " << o[i * L.D] << " vs "
                      << y[picks[i] * L.D];
      bad += b;
      checked += L.D;
    }
  }
  EXPECT_EQ(bad, 0u) << "separate linears vs grouped MoE: " << bad << " of " << checked << " values differ";
}

class Exl3GpuMoe : public GpuTest {};

TEST_F(Exl3GpuMoe, SmallPaddedIntermediate) {
  Layer L(256, 200, 12, {3, 3, 4}, {Codebook::Mul1, Codebook::Mul1, Codebook::Mcg}, 11);
  check_layer(L, Routes(5, 4, L.E, 12), "D 256, I 200, 12 experts, 5 tokens top-4", 13);
  check_separate_linears(L, Routes(6, 3, L.E, 14), 15);
}

TEST_F(Exl3GpuMoe, GateUpDifferentK) {
  Layer L(384, 256, 6, {2, 5, 3}, {Codebook::Inst3, Codebook::Mul1, Codebook::Mul1}, 21);
  check_layer(L, Routes(3, 2, L.E, 22), "gate K2 3inst, up K5 mul1, down K3", 23);
}

TEST_F(Exl3GpuMoe, CrowdedExperts) {
  // Every token picks experts 0 and 1: 40 rows each, two 32-row batches.
  Layer L(256, 256, 4, {4, 4, 4}, {Codebook::Mul1, Codebook::Mul1, Codebook::Mul1}, 31);
  check_layer(L, Routes(40, 2, L.E, 32, true), "40 tokens on 2 experts", 33);
  check_separate_linears(L, Routes(40, 2, L.E, 34, true), 35);
}

// A token's rows do not depend on the batch: 20 tokens (80 picks: whole-input items) and their
// first 6 (24 picks: split-K items) give the same bits for those 6.
TEST_F(Exl3GpuMoe, BatchInvariantBits) {
  Layer L(256, 384, 10, {3, 3, 2}, {Codebook::Mul1, Codebook::Mul1, Codebook::Mul1}, 51);
  const Routes all(20, 4, L.E, 52);
  const Routes few(all, 6, L.E);
  const std::vector<float> x = randn(static_cast<size_t>(all.n * L.D), 53);
  MoeRun ma(L, all), mf(L, few);
  const std::vector<float> ya = ma.run(L, std::vector<int>(L.E, 0), x);
  const std::vector<float> yf = mf.run(L, std::vector<int>(L.E, 1), std::vector<float>(x.begin(), x.begin() + 6 * L.D));
  const size_t n = static_cast<size_t>(few.n * few.top_k * L.D);
  EXPECT_EQ(bit_mismatches(yf.data(), ya.data(), n), 0u) << "first 6 tokens alone vs among 20";
}

// Picks with expert −1 (another tier computes them) are left out: the kernel writes only the
// others' rows, with the bits a run over every pick gives them (the fast tier mode relies on it).
TEST_F(Exl3GpuMoe, PicksLeftOutAreSkipped) {
  Layer L(256, 256, 8, {3, 3, 3}, {Codebook::Mul1, Codebook::Mul1, Codebook::Mul1}, 61);
  const Routes all(6, 4, L.E, 62);
  const std::vector<float> x = randn(static_cast<size_t>(all.n * L.D), 63);
  MoeRun full(L, all);
  const std::vector<float> want = full.run(L, std::vector<int>(L.E, 1), x);
  // Every pick of an odd expert left out, and the dispatch of the rest (as moe_dispatch makes it).
  std::vector<int32_t> masked = all.expert;
  for (int32_t& e : masked)
    if (e % 2) e = -1;
  std::vector<int32_t> offsets(L.E + 1, 0), sorted, active;
  for (int32_t e : masked)
    if (e >= 0) ++offsets[e + 1];
  for (int e = 0; e < L.E; ++e) offsets[e + 1] += offsets[e];
  sorted.assign(masked.size(), 12345);  // past the count: stale entries the kernel must not read
  std::vector<int32_t> fill(offsets.begin(), offsets.end() - 1);
  for (size_t p = 0; p < masked.size(); ++p)
    if (masked[p] >= 0) sorted[fill[masked[p]]++] = static_cast<int32_t>(p);
  for (int e = 0; e < L.E; ++e)
    if (offsets[e + 1] > offsets[e]) active.push_back(e);
  DevBuf<int32_t> de(masked), doff(offsets), dsorted(sorted), dact(active),
      dn(std::vector<int32_t>{static_cast<int32_t>(active.size())});
  DevBuf<float> dw(all.weight), dx(x);
  const size_t P = masked.size();
  const float sentinel = -7.25f;
  DevBuf<float> Y(std::vector<float>(P * L.D, sentinel));
  DevBuf<unsigned char> ws(cuda::exl3_moe_workspace_bytes(L.geo, all.n, all.top_k));
  cuda::exl3_moe_workspace_init(ws.get(), ws.size(), nullptr);
  DevBuf<cuda::Exl3ExpertPtrs> table(L.table(std::vector<int>(L.E, 1)));
  cuda::Exl3MoeLayer geo = L.geo;
  geo.table = table.get();
  const cuda::MoeRoutes r{de.get(), dw.get(), all.n, all.top_k};
  const cuda::MoeDispatch d{doff.get(), dsorted.get(), dact.get(), dn.get()};
  cuda::exl3_moe_experts(geo, r, d, dx.get(), L.D, kLimit, Y.get(), ws.get(), nullptr);
  const std::vector<float> got = Y.download();
  size_t kept = 0;
  for (size_t p = 0; p < P; ++p) {
    const float* g = got.data() + p * L.D;
    if (masked[p] < 0) {
      EXPECT_EQ(std::count(g, g + L.D, sentinel), L.D) << "pick " << p << " was left out but written";
    } else {
      ++kept;
      EXPECT_EQ(bit_mismatches(want.data() + p * L.D, g, static_cast<size_t>(L.D)), 0u) << "pick " << p;
    }
  }
  EXPECT_GT(kept, 0u);
  EXPECT_LT(kept, P);
}

// One workspace serves steps of any size one after the other (the engine keeps one per
// stream): every step's rows equal the same step on a workspace of its own, bit for bit. Steps
// of 1…8 tokens split K, so each leaves partial sums where a larger step keeps counters unless
// the counters' region is the same for every size.
// Host-only (runs without a GPU): the counters span the same bytes at every step size.
TEST(Exl3MoeWorkspace, CountersSpanTheSameBytesAtEveryStepSize) {
  cuda::Exl3MoeLayer L;
  L.hidden = 4096, L.inter = 2048, L.n_experts = 288;
  const size_t first = cuda::exl3_moe_workspace_counters_end(L, 1, 8);
  for (int64_t n : {2, 3, 8, 9, 64, 512}) EXPECT_EQ(cuda::exl3_moe_workspace_counters_end(L, n, 8), first) << n;
}

TEST_F(Exl3GpuMoe, OneWorkspaceServesStepsOfAnySize) {
  Layer L(1024, 512, 16, {3, 3, 3}, {Codebook::Mul1, Codebook::Mul1, Codebook::Mul1}, 61);
  const std::vector<int64_t> sizes = {1, 4, 2, 8, 1, 3, 80};
  DevBuf<unsigned char> shared(cuda::exl3_moe_workspace_bytes(L.geo, 80, 8));
  cuda::exl3_moe_workspace_init(shared.get(), shared.size(), nullptr);
  std::vector<int> where(L.E);
  for (int e = 0; e < L.E; ++e) where[e] = e % 3 == 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    const Routes R(sizes[i], 8, L.E, 62 + i);
    const std::vector<float> x = randn(static_cast<size_t>(R.n * L.D), 63 + i);
    MoeRun m(L, R);
    const std::vector<float> want = m.run(L, where, x);
    const std::vector<float> got = m.run(L, where, x, shared.get());
    EXPECT_EQ(bit_mismatches(want.data(), got.data(), want.size()), 0u)
        << sizes[i] << " tokens, after steps of other sizes on the same workspace";
  }
}

// A prefill-sized step at the real widths (512 picks: whole-input items, 32-row batches, no
// split-K): the same bits from VRAM, mapped host memory or a mix. The tier panel at the real
// widths (docs/perf.md, session 10) gave other logits with a VRAM cache than without one.
TEST_F(Exl3GpuMoe, RealWidthsPrefillStepReadsTheSameBitsAnywhere) {
  Layer L(4096, 2048, 24, {3, 3, 3}, {Codebook::Mul1, Codebook::Mul1, Codebook::Mul1}, 51);
  const Routes R(64, 8, L.E, 52);
  const std::vector<float> x = randn(static_cast<size_t>(R.n * L.D), 53);
  MoeRun m(L, R);
  std::vector<int> all_vram(L.E, 0), all_host(L.E, 1), mixed(L.E);
  for (int e = 0; e < L.E; ++e) mixed[e] = (e / 3) % 2;
  const std::vector<float> yv = m.run(L, all_vram, x), yh = m.run(L, all_host, x), ym = m.run(L, mixed, x);
  const size_t n = static_cast<size_t>(R.n * R.top_k * L.D);
  EXPECT_EQ(bit_mismatches(yv.data(), yh.data(), n), 0u) << "VRAM vs mapped host memory";
  EXPECT_EQ(bit_mismatches(yv.data(), ym.data(), n), 0u) << "VRAM vs mixed";
  size_t finite = 0;
  for (float v : yv) finite += std::isfinite(v);
  EXPECT_EQ(finite, yv.size()) << "unwritten or non-finite rows";
}

// The prefill form (experts with more than 32 picks in 128-row tiles) gives every row the bits
// of the 32-row batches, from VRAM, mapped host memory or a mix, with every expert in either
// form or split between them (more than 32 picks: the prefill form). Picks crowd the first experts: several 128-row
// tiles, a short last tile, experts with 1…32 picks beside them; the padded intermediate width
// leaves the down projection's input short of its last 128-block and gate/up's last output block
// partly stored.
void check_forms(const Layer& L, int64_t n, int top_k, uint64_t seed) {
  Routes R(n, top_k, L.E, seed, true);  // crowd: every token picks experts 0 … top_k−1
  // Spread a third of the tokens' last pick over the other experts (1…32 picks each).
  for (int64_t t = 0; t < n; t += 3) R.expert[t * top_k + top_k - 1] = top_k + static_cast<int32_t>(t % (L.E - top_k));
  for (int64_t t = 0; t < n; ++t) std::sort(R.expert.begin() + t * top_k, R.expert.begin() + (t + 1) * top_k);
  R.active.clear();
  R.dispatch(L.E);
  const std::vector<float> x = randn(static_cast<size_t>(n * L.D), seed + 1);
  MoeRun m(L, R);
  std::vector<int> vram(L.E, 0), host(L.E, 1), mixed(L.E);
  for (int e = 0; e < L.E; ++e) mixed[e] = e % 2;
  constexpr int kBatchesOnly = std::numeric_limits<int>::max(), kPrefillOnly = 1, kCrowded = 33;
  const std::vector<float> want = m.run(L, vram, x, nullptr, kBatchesOnly);
  const size_t N = want.size();
  size_t finite = 0;
  for (float v : want) finite += std::isfinite(v);
  EXPECT_EQ(finite, N) << "unwritten or non-finite rows";
  int crowded = 0;
  for (int e = 0; e < L.E; ++e) crowded += R.offsets[e + 1] - R.offsets[e] > 32;
  EXPECT_GE(crowded, 2) << "the routes must crowd some experts";
  EXPECT_EQ(bit_mismatches(want.data(), m.run(L, vram, x).data(), N), 0u) << "the default, VRAM";
  EXPECT_EQ(bit_mismatches(want.data(), m.run(L, vram, x, nullptr, kCrowded).data(), N), 0u) << "split of forms, VRAM";
  EXPECT_EQ(bit_mismatches(want.data(), m.run(L, host, x, nullptr, kCrowded).data(), N), 0u) << "split of forms, host";
  EXPECT_EQ(bit_mismatches(want.data(), m.run(L, mixed, x, nullptr, kCrowded).data(), N), 0u)
      << "split of forms, mixed";
  EXPECT_EQ(bit_mismatches(want.data(), m.run(L, vram, x, nullptr, kPrefillOnly).data(), N), 0u)
      << "prefill form only, VRAM";
  EXPECT_EQ(bit_mismatches(want.data(), m.run(L, mixed, x, nullptr, kPrefillOnly).data(), N), 0u)
      << "prefill form only, mixed";
  EXPECT_EQ(bit_mismatches(want.data(), m.run(L, host, x, nullptr, kBatchesOnly).data(), N), 0u)
      << "32-row batches only, host";
  // The narrow block on wgmma (sm_90, the default there: it ran above) and on mma.sync, each
  // asked for explicitly.
  const cuda::Exl3Wgmma was = cuda::exl3_wgmma_policy();
  cuda::exl3_set_wgmma_prefill(cuda::Exl3Wgmma::On);
  if (cuda::exl3_wgmma_prefill()) {
    exl3gpu::WidePrefill narrow(false);
    const uint64_t launches = cuda::exl3_wgmma_prefill_launches();
    EXPECT_EQ(bit_mismatches(want.data(), m.run(L, mixed, x, nullptr, kCrowded).data(), N), 0u)
        << "wgmma block, split of forms, mixed";
    EXPECT_GT(cuda::exl3_wgmma_prefill_launches(), launches) << "the wgmma block did not run";
    cuda::exl3_set_wgmma_prefill(cuda::Exl3Wgmma::Off);
    EXPECT_EQ(bit_mismatches(want.data(), m.run(L, mixed, x, nullptr, kCrowded).data(), N), 0u)
        << "mma.sync block, split of forms, mixed";
  }
  cuda::exl3_set_wgmma_prefill(was);
  // The wide shape of the prefill form, where this device holds it (a projection whose K does
  // not fit runs narrow, so any mix is exercised).
  if (cuda::exl3_moe_wide_prefill_fits(std::min({L.geo.K[0], L.geo.K[1], L.geo.K[2]}))) {
    exl3gpu::WidePrefill wide(true);
    const uint64_t launches = cuda::exl3_wide_prefill_launches();
    EXPECT_EQ(bit_mismatches(want.data(), m.run(L, mixed, x, nullptr, kCrowded).data(), N), 0u)
        << "wide shape, split of forms, mixed";
    EXPECT_EQ(bit_mismatches(want.data(), m.run(L, vram, x, nullptr, kPrefillOnly).data(), N), 0u)
        << "wide shape, prefill form only, VRAM";
    EXPECT_GT(cuda::exl3_wide_prefill_launches(), launches) << "the wide shape did not run";
  }
}

TEST_F(Exl3GpuMoe, PrefillFormGivesTheBatchedBits) {
  Layer L(256, 200, 10, {3, 3, 4}, {Codebook::Mul1, Codebook::Mul1, Codebook::Mcg}, 71);
  check_forms(L, 300, 3, 72);  // experts 0, 1: 300 picks (3 tiles, the last short); 2: ~200
}

TEST_F(Exl3GpuMoe, PrefillFormGateUpDifferentK) {
  Layer L(384, 256, 6, {2, 5, 3}, {Codebook::Inst3, Codebook::Mul1, Codebook::Mul1}, 81);
  check_forms(L, 140, 2, 82);
  check_separate_linears(L, Routes(150, 2, L.E, 83, true), 84, 33);  // 150 rows each: the prefill form
}

TEST_F(Exl3GpuMoe, RealWidthsPrefillFormGivesTheBatchedBits) {
  Layer L(4096, 2048, 16, {3, 3, 3}, {Codebook::Mul1, Codebook::Mul1, Codebook::Mul1}, 91);
  check_forms(L, 160, 8, 92);
}

TEST_F(Exl3GpuMoe, RealWidths) {
  Layer L(4096, 2048, 8, {3, 3, 3}, {Codebook::Mul1, Codebook::Mul1, Codebook::Mul1}, 41);
  check_layer(L, Routes(2, 4, L.E, 42), "D 4096, I 2048, 8 experts, 2 tokens top-4", 43);
}

}  // namespace
}  // namespace ft::test
