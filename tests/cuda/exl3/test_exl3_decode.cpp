// GPU decode of EXL3 trellises: bit for bit against exllamav3's own CUDA output
// (tests/fixtures/exl3-decode, all 24 (K, codebook) cases) through the same staging and lane
// fragments the matmul kernels use, and the dense W_eff against the reference formula.
#include <cmath>
#include <cstring>

#include "gpu-worker/backends/cuda/exl3/exl3_linear.h"
#include "shared/exl3/reference.h"
#include "shared/model/tensor_convert.h"
#include "tests/cuda/exl3/exl3_test_util.h"
#include "tests/cuda/support/gpu_test.h"
#include "tests/exl3/golden.h"

namespace ft::test {
namespace {

using ft::exl3::test::GoldenCase;

ft::exl3::Exl3Linear golden_q(const GoldenCase& c) {
  const TensorStore& st = ft::exl3::test::golden_store();
  const TensorInfo& tr = st.get(c.prefix() + ".trellis");
  ft::exl3::Exl3Linear q;
  q.name = c.prefix();
  q.where = "exl3-decode fixture";
  q.K = c.K;
  q.codebook = c.cb;
  q.in_p = tr.shape[0] * 16;
  q.out_p = tr.shape[1] * 16;
  q.trellis = tr.data;
  q.suh = to_f32(st.get(c.prefix() + ".suh"));
  q.svh = to_f32(st.get(c.prefix() + ".svh"));
  return q;
}

class Exl3GpuGolden : public GpuTest, public ::testing::WithParamInterface<GoldenCase> {};

TEST_P(Exl3GpuGolden, DecodeIsBitExact) {
  const GoldenCase c = GetParam();
  const ft::exl3::Exl3Linear q = golden_q(c);
  cuda::VramBudget budget;
  const cuda::Exl3LinearGpu g = cuda::upload_exl3_linear(q, q.out_p, q.in_p, budget);
  DevBuf<__half> wq(static_cast<size_t>(q.in_p * q.out_p));
  cuda::exl3_decode_wq(g.dev(), wq.get(), nullptr);
  const std::vector<__half> got = wq.download();
  const TensorInfo& want = ft::exl3::test::golden_store().get(c.prefix() + ".wq");
  ASSERT_EQ(want.shape, (std::vector<int64_t>{q.in_p, q.out_p}));
  int64_t bad = 0;
  for (int64_t i = 0; i < q.in_p * q.out_p; ++i) {
    uint16_t w, h;
    std::memcpy(&w, want.data + 2 * i, 2);
    std::memcpy(&h, &got[i], 2);
    if (w != h && ++bad <= 8)
      ADD_FAILURE() << c.prefix() << " " << q.in_p << "x" << q.out_p << ": Wq[" << i / q.out_p << "][" << i % q.out_p
                    << "] (tile " << i / q.out_p / 16 << "," << i % q.out_p / 16 << ") got 0x" << std::hex << h
                    << " want 0x" << w << std::dec;
  }
  EXPECT_EQ(bad, 0) << c.prefix() << ": mismatching weights of " << q.in_p * q.out_p;
}

TEST_P(Exl3GpuGolden, DenseWeightMatchesReference) {
  const GoldenCase c = GetParam();
  ft::exl3::Exl3Linear q = golden_q(c);
  // A logical slice narrower than the padded sizes checks the orientation and the slicing.
  const int64_t out = q.out_p - 8, in = q.in_p - 24;
  for (int64_t i = in; i < q.in_p; ++i) q.suh[i] = 0.0f;  // what padding looks like in a checkpoint
  cuda::VramBudget budget;
  const cuda::Exl3LinearGpu g = cuda::upload_exl3_linear(q, out, in, budget);
  DevBuf<float> w(static_cast<size_t>(out * in));
  cuda::exl3_decode_dense(g.dev(), w.get(), nullptr);
  const std::vector<float> got = w.download();
  const std::vector<float> want = ft::exl3::dense_weight(q, out, in);
  const double e = rel_l2(got, want);
  EXPECT_LT(e, 1e-5) << c.prefix() << " dense " << out << "x" << in << ": rel L2 " << e << ", max abs diff "
                     << max_abs_diff(got, want);
}

INSTANTIATE_TEST_SUITE_P(AllCases, Exl3GpuGolden, ::testing::ValuesIn(ft::exl3::test::golden_cases()),
                         [](const auto& info) {
                           std::string s = info.param.prefix();
                           s[s.find('.')] = '_';
                           return s;
                         });

}  // namespace
}  // namespace ft::test
