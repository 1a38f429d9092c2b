// Fused EXL3 linears on the GPU against ft::exl3::forward_reference (fp32 math on the same fp16
// weights): every K × codebook, padded and unpadded widths, bias, 1…32 rows (skinny kernel,
// split-K and full), prefill rows (row batches), the real model's widths; batch invariance as
// bit equality of a row alone and among others; Accumulate; the padding columns untouched.
#include <cstring>
#include <memory>

#include "gpu-worker/backends/cuda/exl3/exl3_linear.h"
#include "gpu-worker/backends/cuda/exl3/wgmma_layout.h"
#include "gpu-worker/backends/cuda/ops/linear_layout.h"
#include "tests/cuda/exl3/exl3_test_util.h"
#include "tests/cuda/support/gpu_test.h"

namespace ft::test {
namespace {

using exl3gpu::case_name;
using exl3gpu::Codebook;
using exl3gpu::RandomLinear;

constexpr double kTol = 1e-3;

struct Gpu {
  cuda::VramBudget budget;
  cuda::Exl3LinearGpu lin;
  DevBuf<unsigned char> ws;
  Gpu(const RandomLinear& r, int64_t max_rows) {
    lin = cuda::upload_exl3_linear(r.q, r.out, r.in, budget);
    ws = DevBuf<unsigned char>(cuda::exl3_linear_workspace_bytes(lin.dev(), max_rows));
    cuda::exl3_linear_workspace_init(ws.get(), ws.size(), nullptr);
  }
  // y [rows][ld_y] (poisoned first), x [rows][in].
  std::vector<float> run(const std::vector<float>& x, int64_t rows, int64_t ld_y,
                         cuda::LinearStore store = cuda::LinearStore::Overwrite, const std::vector<float>* y0 = nullptr) {
    DevBuf<float> dx(x);
    DevBuf<float> dy(static_cast<size_t>(rows * ld_y));
    if (y0) dy.upload(*y0);
    cuda::exl3_linear(lin.dev(), dx.get(), lin.dev().in, rows, dy.get(), ld_y, ws.get(), nullptr, store);
    return dy.download();
  }
};

// Worst row's rel L2 (a broken row cannot hide behind good ones), with its index.
std::pair<double, int64_t> worst_row(const std::vector<float>& got, const std::vector<float>& want, int64_t rows,
                                     int64_t out) {
  std::pair<double, int64_t> w{0.0, -1};
  for (int64_t r = 0; r < rows; ++r) {
    const double e = rel_l2(got.data() + r * out, want.data() + r * out, out);
    if (!(e <= w.first)) w = {e, r};
  }
  return w;
}

void check_against_reference(int K, Codebook cb, int64_t in, int64_t out, const std::vector<int64_t>& row_counts,
                             bool bias, uint64_t seed) {
  const RandomLinear r(K, cb, in, out, seed, bias);
  const std::vector<float> wq = r.wq();
  int64_t max_rows = 0;
  for (int64_t n : row_counts) max_rows = std::max(max_rows, n);
  Gpu g(r, max_rows);
  for (int64_t rows : row_counts) {
    const std::vector<float> x = randn(static_cast<size_t>(rows * in), seed * 31 + rows);
    const std::vector<float> want = r.forward(wq, x, rows);
    const std::vector<float> got = g.run(x, rows, out);
    const auto [e, row] = worst_row(got, want, rows, out);
    EXPECT_LE(e, kTol) << case_name(K, cb) << " " << in << "→" << out << (bias ? " +bias" : "") << " rows " << rows
                       << ": worst row " << row << " rel L2 " << e << " (whole " << rel_l2(got, want) << ")";
  }
}

class Exl3GpuLinear : public GpuTest, public ::testing::WithParamInterface<std::tuple<int, Codebook>> {};

TEST_P(Exl3GpuLinear, SmallUnpadded) {
  const auto [K, cb] = GetParam();
  check_against_reference(K, cb, 256, 256, {1, 2, 5, 8, 9, 16, 32}, false, 100 + K);
}

TEST_P(Exl3GpuLinear, PaddedWithBias) {
  const auto [K, cb] = GetParam();
  check_against_reference(K, cb, 200, 72, {1, 3, 8, 13, 32}, true, 200 + K);
  check_against_reference(K, cb, 384, 328, {1, 7, 24}, true, 300 + K);
}

TEST_P(Exl3GpuLinear, PrefillRows) {
  const auto [K, cb] = GetParam();
  check_against_reference(K, cb, 128, 256, {33, 100, 1000}, false, 400 + K);
}

// A row's bits do not depend on the rows around it or on which kernel path ran (1 row: skinny
// split-K; 9–32 rows: 4 row groups; > 32: row batches of 32 over the full input).
TEST_P(Exl3GpuLinear, BatchInvariantBits) {
  const auto [K, cb] = GetParam();
  const RandomLinear r(K, cb, 512, 384, 500 + K, true);
  Gpu g(r, 70);
  const int64_t rows = 70, out = r.out;
  const std::vector<float> x = randn(static_cast<size_t>(rows * r.in), 501 + K);
  const std::vector<float> all = g.run(x, rows, out);
  for (int64_t n : {1, 5, 8, 9, 32, 33}) {
    const int64_t first = rows - n;  // the last n rows, so every row lands at a different batch position
    const std::vector<float> xs(x.begin() + first * r.in, x.end());
    const std::vector<float> part = g.run(xs, n, out);
    const size_t bad = bit_mismatches(part.data(), all.data() + first * out, static_cast<size_t>(n * out));
    EXPECT_EQ(bad, 0u) << case_name(K, cb) << ": rows " << first << "… alone (" << n << " rows) differ from the "
                       << rows << "-row call in " << bad << " of " << n * out << " values";
  }
}

// Auto's rule against the H100 measurements it was fitted to (docs/perf.md, session 17, 132 SMs):
// 4096→4096 × 512 rows ran 152 TFLOP/s narrow and 91 wide; 4096→8192 × 512 165 and 182; 2048 and
// 8192 rows of either shape were faster wide. Host-only: runs without a GPU.
TEST(Exl3WidePolicy, AutoPicksTheShapeTheMeasurementsFavour) {
  EXPECT_FALSE(cuda::exl3_wide_prefill_pays(4096, 512, 132));
  EXPECT_TRUE(cuda::exl3_wide_prefill_pays(8192, 512, 132));
  EXPECT_TRUE(cuda::exl3_wide_prefill_pays(4096, 2048, 132));
  EXPECT_TRUE(cuda::exl3_wide_prefill_pays(4096, 8192, 132));
  EXPECT_TRUE(cuda::exl3_wide_prefill_pays(8192, 8192, 132));
  // One narrow wave that a wide grid also needs a whole wave for: narrow wins.
  EXPECT_FALSE(cuda::exl3_wide_prefill_pays(256, 33, 132));
  EXPECT_FALSE(cuda::exl3_wide_prefill_pays(128, 8192, 132));
}

// Host-only: the wgmma prefill block's row words (exl3/wgmma_layout.h) land where the swizzled
// natural-order tile keeps their inputs — unit 4b + d of row n, byte 4·quad inside it — for every
// thread, chunk and word, and no two words share bytes.
TEST(Exl3WgmmaLayout, RowWordsLandWhereTheSwizzleKeepsTheirInputs) {
  std::vector<int> seen(128 * 128 / 4, 0);
  for (int tid = 0; tid < 256; ++tid)
    for (int m = 0; m < 4; ++m)
      for (int d = 0; d < 4; ++d) {
        const int q = tid + 256 * m, n = q >> 3, c = q & 7, b = c >> 2, quad = c & 3;
        const uint32_t want = cuda::lin::tile_offset(n, 4 * b + d) + 4 * quad;
        const uint32_t got = cuda::exl3dev::wg_row_word_offset(tid, d) + cuda::exl3dev::kWgRowChunkStride * m;
        ASSERT_EQ(got, want) << "tid " << tid << " chunk " << m << " word " << d;
        ++seen[got / 4];
      }
  for (size_t w = 0; w < seen.size(); ++w) ASSERT_EQ(seen[w], 1) << "word " << w << " of the tile";
}

// The wide prefill shape (16 warps × 256 columns, running sums in shared memory) gives the
// narrow shape's bits: outputs that fill one and a half wide blocks (the second's upper pairs
// past the output), two, or a padded part of one; bias; Accumulate; short last row tiles and
// tiles of at most 64 rows (the upper row groups skipped).
TEST_P(Exl3GpuLinear, WidePrefillGivesTheNarrowBits) {
  const auto [K, cb] = GetParam();
  if (!cuda::exl3_wide_prefill_fits(K)) GTEST_SKIP() << "this device's shared memory does not hold the wide shape";
  struct Shape {
    int64_t in, out;
    bool bias;
  };
  for (const Shape s : {Shape{256, 384, true}, Shape{384, 512, false}, Shape{200, 72, true}}) {
    const RandomLinear r(K, cb, s.in, s.out, 900 + 10 * K + s.out, s.bias);
    Gpu g(r, 300);
    for (int64_t rows : {33, 100, 300}) {
      const std::vector<float> x = randn(static_cast<size_t>(rows * r.in), 901 + rows);
      const std::vector<float> y0 = randn(static_cast<size_t>(rows * r.out), 902 + rows);
      std::vector<float> want, want_acc, got, got_acc;
      {
        exl3gpu::WidePrefill narrow(false);
        want = g.run(x, rows, r.out);
        want_acc = g.run(x, rows, r.out, cuda::LinearStore::Accumulate, &y0);
      }
      {
        exl3gpu::WidePrefill wide(true);
        const uint64_t launches = cuda::exl3_wide_prefill_launches();
        got = g.run(x, rows, r.out);
        got_acc = g.run(x, rows, r.out, cuda::LinearStore::Accumulate, &y0);
        EXPECT_EQ(cuda::exl3_wide_prefill_launches(), launches + 2) << "the wide shape did not run";
      }
      const size_t n = static_cast<size_t>(rows * r.out);
      EXPECT_EQ(bit_mismatches(got.data(), want.data(), n), 0u)
          << case_name(K, cb) << " " << s.in << "→" << s.out << " rows " << rows << ": wide differs from narrow";
      EXPECT_EQ(bit_mismatches(got_acc.data(), want_acc.data(), n), 0u)
          << case_name(K, cb) << " " << s.in << "→" << s.out << " rows " << rows << ": wide Accumulate differs";
    }
  }
}

// The narrow prefill block on wgmma (sm_90; elsewhere both runs take mma.sync) gives the mma.sync
// block's bits: padded and unpadded widths, bias, Accumulate, row tiles of at most 64 rows (the
// 64-column wgmma), a short last tile, and several 128-row tiles.
TEST_P(Exl3GpuLinear, WgmmaPrefillGivesTheMmaSyncBits) {
  const auto [K, cb] = GetParam();
  struct Shape {
    int64_t in, out;
    bool bias;
  };
  const cuda::Exl3Wgmma was = cuda::exl3_wgmma_policy();
  cuda::exl3_set_wgmma_prefill(cuda::Exl3Wgmma::On);
  const bool wgmma = cuda::exl3_wgmma_prefill();  // this device runs it
  exl3gpu::WidePrefill narrow(false);
  for (const Shape s : {Shape{256, 384, true}, Shape{512, 256, false}, Shape{200, 72, true}}) {
    const RandomLinear r(K, cb, s.in, s.out, 950 + 10 * K + s.out, s.bias);
    Gpu g(r, 300);
    for (int64_t rows : {33, 64, 100, 300}) {
      const std::vector<float> x = randn(static_cast<size_t>(rows * r.in), 951 + rows);
      const std::vector<float> y0 = randn(static_cast<size_t>(rows * r.out), 952 + rows);
      cuda::exl3_set_wgmma_prefill(cuda::Exl3Wgmma::Off);
      const std::vector<float> want = g.run(x, rows, r.out);
      const std::vector<float> want_acc = g.run(x, rows, r.out, cuda::LinearStore::Accumulate, &y0);
      cuda::exl3_set_wgmma_prefill(cuda::Exl3Wgmma::On);
      const uint64_t launches = cuda::exl3_wgmma_prefill_launches();
      const std::vector<float> got = g.run(x, rows, r.out);
      const std::vector<float> got_acc = g.run(x, rows, r.out, cuda::LinearStore::Accumulate, &y0);
      if (wgmma) {
        EXPECT_EQ(cuda::exl3_wgmma_prefill_launches(), launches + 2) << "the wgmma form did not run";
      }
      const size_t n = static_cast<size_t>(rows * r.out);
      EXPECT_EQ(bit_mismatches(got.data(), want.data(), n), 0u)
          << case_name(K, cb) << " " << s.in << "→" << s.out << " rows " << rows << ": wgmma differs from mma.sync";
      EXPECT_EQ(bit_mismatches(got_acc.data(), want_acc.data(), n), 0u)
          << case_name(K, cb) << " " << s.in << "→" << s.out << " rows " << rows << ": wgmma Accumulate differs";
    }
  }
  cuda::exl3_set_wgmma_prefill(was);
}

INSTANTIATE_TEST_SUITE_P(AllKCodebooks, Exl3GpuLinear,
                         ::testing::Combine(::testing::Range(1, 9),
                                            ::testing::Values(Codebook::Inst3, Codebook::Mcg, Codebook::Mul1)),
                         [](const auto& info) { return case_name(std::get<0>(info.param), std::get<1>(info.param)); });

// The model's widths (few K/codebook combinations: the CPU reference is the slow part).
#define EXL3_REAL_SHAPE(name, K, cb, in, out, rows, bias, seed)                 \
  TEST(Exl3GpuLinearReal, name) {                                              \
    if (!have_gpu()) GTEST_SKIP() << "no CUDA device";                         \
    check_against_reference(K, Codebook::cb, in, out, rows, bias, seed);       \
  }
EXL3_REAL_SHAPE(ExpertGateUp_K3_mul1, 3, Mul1, 4096, 2048, (std::vector<int64_t>{1, 4, 8}), false, 601)
EXL3_REAL_SHAPE(ExpertGateUp_K2_3inst, 2, Inst3, 4096, 2048, (std::vector<int64_t>{1, 32}), false, 602)
EXL3_REAL_SHAPE(ExpertDown_K4_mcg, 4, Mcg, 2048, 4096, (std::vector<int64_t>{1, 8}), false, 603)
EXL3_REAL_SHAPE(KdaQkv_K3_mul1, 3, Mul1, 4096, 8192, (std::vector<int64_t>{2}), false, 604)
EXL3_REAL_SHAPE(KdaOut_K5_mul1, 5, Mul1, 8192, 4096, (std::vector<int64_t>{1, 3}), false, 605)
EXL3_REAL_SHAPE(KvB_K6_mul1_bias, 6, Mul1, 512, 4096, (std::vector<int64_t>{1}), true, 606)
#undef EXL3_REAL_SHAPE

TEST(Exl3GpuLinearReal, LongPrefill) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  check_against_reference(3, Codebook::Mul1, 128, 128, {8192}, false, 701);
  check_against_reference(4, Codebook::Mul1, 512, 256, {2048}, true, 702);
}

TEST(Exl3GpuLinearReal, AccumulateAndPaddingColumns) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  const RandomLinear r(3, Codebook::Mul1, 256, 100, 801, true);
  Gpu g(r, 40);
  for (int64_t rows : {3, 40}) {
    const int64_t ld = 130;
    const std::vector<float> x = randn(static_cast<size_t>(rows * r.in), 802 + rows);
    const std::vector<float> y = g.run(x, rows, ld);
    size_t touched = 0;
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t c = r.out; c < ld; ++c) touched += !std::isnan(y[i * ld + c]);
    EXPECT_EQ(touched, 0u) << "rows " << rows << ": columns out…ld must stay as they were (NaN poison)";
    std::vector<float> y0 = randn(static_cast<size_t>(rows * ld), 803);
    const std::vector<float> acc = g.run(x, rows, ld, cuda::LinearStore::Accumulate, &y0);
    size_t bad = 0;
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t c = 0; c < r.out; ++c) {
        const float want = y0[i * ld + c] + y[i * ld + c];
        bad += std::memcmp(&want, &acc[i * ld + c], 4) != 0;
      }
    EXPECT_EQ(bad, 0u) << "rows " << rows << ": Accumulate must add the Overwrite result to y";
  }
}

// One workspace serves every linear of a stream, one after the other, at any row count: each
// output equals the same linear on a workspace of its own, bit for bit, every column written
// (the y buffers start as NaN). The attention's sequence at the real widths: q_a (12 output
// blocks), then q_b (128 blocks, split K at decode sizes), kv_a, the KDA projections, q_b again.
TEST(Exl3GpuLinearReal, OneWorkspaceServesEveryLinear) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  struct Shape {
    int64_t in, out;
  };
  const std::vector<Shape> shapes = {{4096, 1536}, {1536, 16384}, {4096, 576}, {4096, 8192}, {1536, 16384}};
  std::vector<std::unique_ptr<RandomLinear>> lin;
  std::vector<std::unique_ptr<Gpu>> own;
  size_t bytes = 0;
  for (size_t i = 0; i < shapes.size(); ++i) {
    lin.push_back(std::make_unique<RandomLinear>(3, Codebook::Mul1, shapes[i].in, shapes[i].out, 900 + i));
    own.push_back(std::make_unique<Gpu>(*lin.back(), 32));
    bytes = std::max(bytes, cuda::exl3_linear_workspace_bytes(own.back()->lin.dev(), 32));
  }
  DevBuf<unsigned char> shared(bytes);
  cuda::exl3_linear_workspace_init(shared.get(), shared.size(), nullptr);
  for (int64_t rows : {1, 8, 3, 32}) {
    for (size_t i = 0; i < shapes.size(); ++i) {
      const std::vector<float> x = randn(static_cast<size_t>(rows * shapes[i].in), 950 + 10 * i + rows);
      const std::vector<float> want = own[i]->run(x, rows, shapes[i].out);
      DevBuf<float> dx(x);
      DevBuf<float> dy(static_cast<size_t>(rows * shapes[i].out));
      cuda::exl3_linear(own[i]->lin.dev(), dx.get(), shapes[i].in, rows, dy.get(), shapes[i].out, shared.get(), nullptr);
      const std::vector<float> got = dy.download();
      EXPECT_EQ(bit_mismatches(want.data(), got.data(), want.size()), 0u)
          << shapes[i].in << "→" << shapes[i].out << ", rows " << rows << ", after the linears before it";
    }
  }
}

// Programmatic dependent launch (sm_90+; the same launches below) gives the same bits, launched
// on a stream and replayed from a CUDA graph, on one shared workspace.
TEST(Exl3GpuLinearReal, ProgrammaticLaunchGivesTheSameBits) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  struct Shape {
    int64_t in, out;
  };
  const std::vector<Shape> shapes = {{4096, 2048}, {1536, 16384}, {4096, 576}, {2048, 4096}};
  std::vector<std::unique_ptr<RandomLinear>> lin;
  std::vector<std::unique_ptr<Gpu>> g;
  for (size_t i = 0; i < shapes.size(); ++i) {
    lin.push_back(std::make_unique<RandomLinear>(3, Codebook::Mul1, shapes[i].in, shapes[i].out, 1100 + i));
    g.push_back(std::make_unique<Gpu>(*lin.back(), 32));
  }
  size_t bytes = 0;
  for (const auto& gi : g) bytes = std::max(bytes, cuda::exl3_linear_workspace_bytes(gi->lin.dev(), 32));
  DevBuf<unsigned char> ws(bytes);
  cuda::exl3_linear_workspace_init(ws.get(), ws.size(), nullptr);
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  const cuda::Exl3Programmatic was = cuda::exl3_programmatic_launch();
  for (int64_t rows : {1, 8, 20}) {
    std::vector<DevBuf<float>> x, y_plain, y_pdl, y_graph;
    for (size_t i = 0; i < shapes.size(); ++i) {
      x.emplace_back(randn(static_cast<size_t>(rows * shapes[i].in), 1200 + 10 * i + rows));
      y_plain.emplace_back(static_cast<size_t>(rows * shapes[i].out));
      y_pdl.emplace_back(static_cast<size_t>(rows * shapes[i].out));
      y_graph.emplace_back(static_cast<size_t>(rows * shapes[i].out));
    }
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // the buffers' fills ran on the legacy stream
    // The linears back to back on one stream and workspace.
    auto all = [&](std::vector<DevBuf<float>>& y) {
      for (size_t i = 0; i < shapes.size(); ++i)
        cuda::exl3_linear(g[i]->lin.dev(), x[i].get(), shapes[i].in, rows, y[i].get(), shapes[i].out, ws.get(), s);
    };
    cuda::exl3_set_programmatic_launch(cuda::Exl3Programmatic::Off);
    all(y_plain);
    cuda::exl3_set_programmatic_launch(cuda::Exl3Programmatic::On);
    all(y_pdl);
    cudaGraph_t graph;
    ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
    all(y_graph);
    ASSERT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
    cudaGraphExec_t exec;
    ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
    ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cuda::exl3_set_programmatic_launch(was);
    for (size_t i = 0; i < shapes.size(); ++i) {
      const std::vector<float> a = y_plain[i].download(), b = y_pdl[i].download(), c = y_graph[i].download();
      EXPECT_EQ(bit_mismatches(a.data(), b.data(), a.size()), 0u) << shapes[i].in << "→" << shapes[i].out << " rows " << rows;
      EXPECT_EQ(bit_mismatches(a.data(), c.data(), a.size()), 0u)
          << shapes[i].in << "→" << shapes[i].out << " rows " << rows << " (graph)";
    }
  }
  cudaStreamDestroy(s);
}

// Host-only (runs without a GPU): the counters' bytes are the same for every linear and row
// count, and no other piece of any call starts inside them.
TEST(Exl3GpuLinearReal, WorkspaceCountersAreTheSameForEveryCall) {
  static const uint32_t fake_trellis = 0;
  const auto* h = reinterpret_cast<const __half*>(&fake_trellis);
  size_t counters = 0;
  for (const auto& [in, out] : {std::pair<int64_t, int64_t>{4096, 1536}, {1536, 16384}, {4096, 576}, {512, 32768},
                               {4096, 154880}, {256, 200}})
    for (int64_t rows : {1, 8, 32, 512}) {
      const cuda::Exl3LinearDev L = cuda::exl3_linear_view(3, Codebook::Mul1, in, out, &fake_trellis, h, h);
      const cuda::Exl3LinearWorkspaceLayout w = cuda::exl3_linear_workspace_layout(L, rows);
      if (counters == 0) counters = w.counters_end;
      EXPECT_EQ(w.counters_end, counters) << in << "→" << out << " rows " << rows;
      EXPECT_GE(w.row_scale, counters);
      EXPECT_GE(w.xh, counters);
      EXPECT_GE(w.partials, counters);
    }
}

TEST(Exl3GpuLinearReal, ChunkRule) {
  EXPECT_EQ(cuda::exl3_k_chunk(4096, 2048), 256);
  EXPECT_EQ(cuda::exl3_k_chunk(2048, 4096), 256);
  EXPECT_EQ(cuda::exl3_k_chunk(16384, 4096), 2048);
  EXPECT_EQ(cuda::exl3_k_chunk(1536, 16384), 512);
  EXPECT_EQ(cuda::exl3_k_chunk(512, 32768), 512);
  EXPECT_EQ(cuda::exl3_k_chunk(4096, 512), 128);
  EXPECT_EQ(cuda::exl3_k_chunk(4096, 154880), 4096);
}

}  // namespace
}  // namespace ft::test
