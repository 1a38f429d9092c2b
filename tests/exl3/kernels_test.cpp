// The fast kernels against the reference decoder and exllamav3's golden decode, once per
// instruction-set path (a path the CPU lacks is skipped).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "shared/core/half.h"
#include "shared/exl3/kernels.h"
#include "shared/exl3/packed.h"
#include "shared/exl3/trellis.h"
#include "tests/exl3/golden.h"
#include "tests/exl3/test_util.h"

namespace ft::exl3 {
namespace {

class KernelPath : public ::testing::TestWithParam<SimdPath> {
 protected:
  void SetUp() override {
    if (!simd_supported(GetParam())) GTEST_SKIP() << simd_name(GetParam()) << " not supported by this CPU";
  }
};

// The vector codebook arithmetic (byte sums, fp16 halves rebuilt from integers, the rounding
// split) equals the scalar reference on every one of the 65536 states.
TEST_P(KernelPath, CodebookOnAllStates) {
  std::vector<uint32_t> states(65536);
  for (uint32_t s = 0; s < 65536; ++s) states[s] = s;
  std::vector<float> got(65536);
  for (Codebook cb : {Codebook::Inst3, Codebook::Mcg, Codebook::Mul1}) {
    codebook_values(GetParam(), cb, states.data(), 65536, got.data());
    int bad = 0;
    for (uint32_t s = 0; s < 65536; ++s) {
      const float want = codebook_value(s, cb);
      if (std::memcmp(&want, &got[s], 4) != 0 && ++bad <= 5)
        ADD_FAILURE() << codebook_name(cb) << " state " << s << ": " << got[s] << " want " << want;
    }
    EXPECT_EQ(bad, 0) << codebook_name(cb);
  }
}

// With one-hot inputs the fused matmul returns the decoded weights themselves: they must equal
// exllamav3's golden decode bit for bit, for all 24 (K, codebook) cases.
TEST_P(KernelPath, GoldenDecodeBitExact) {
  for (const test::GoldenCase& c : test::golden_cases()) {
    const Exl3Linear q = test::golden_linear(c);
    test::PackedBuffer pk(q);
    const int64_t in = q.in_p, out = q.out_p;
    std::vector<float> eye(static_cast<size_t>(in * in), 0.0f), z(static_cast<size_t>(in * out), -1.0f);
    for (int64_t i = 0; i < in; ++i) eye[i * in + i] = 1.0f;
    matmul_pairs(GetParam(), pk.proj, 0, pk.proj.pairs(), eye.data(), in, static_cast<int>(in), z.data(), out);
    const TensorInfo& wq = test::golden_store().get(c.prefix() + ".wq");
    int bad = 0;
    for (int64_t i = 0; i < in * out; ++i) {
      uint16_t want;
      std::memcpy(&want, wq.data + 2 * i, 2);
      const uint16_t got = f32_to_f16(z[i]);
      if ((got != want || f16_to_f32(got) != z[i]) && ++bad <= 5)
        ADD_FAILURE() << c.prefix() << " weight " << i << ": got " << z[i] << " want 0x" << std::hex << want;
    }
    EXPECT_EQ(bad, 0) << c.prefix();
  }
}

// Random trellises of every K and codebook, 1 … 21 rows (register blocks and the panel path), against
// the reference decode with double accumulation.
TEST_P(KernelPath, MatmulMatchesReference) {
  std::mt19937 rng(1234);
  for (int K = 1; K <= 8; ++K)
    for (Codebook cb : {Codebook::Inst3, Codebook::Mcg, Codebook::Mul1}) {
      const int64_t in = 256, out = 128;
      const std::vector<uint8_t> bits = test::random_trellis(in, out, K, rng);
      test::PackedBuffer pk(bits.data(), in, out, K, cb);
      std::vector<float> wq(static_cast<size_t>(in * out));
      decode_trellis_f32(bits.data(), in, out, K, cb, wq.data());
      for (int n : {1, 3, 6, 9, 21}) {
        std::normal_distribution<float> nd;
        std::vector<float> x(static_cast<size_t>(n * in)), z(static_cast<size_t>(n * out));
        for (float& v : x) v = nd(rng);
        // The batch starts at an output pair other than 0 to exercise p0.
        matmul_pairs(GetParam(), pk.proj, 1, pk.proj.pairs() - 1, x.data(), in, n, z.data() + 32, out);
        double err = 0, ref = 0;
        for (int r = 0; r < n; ++r)
          for (int64_t c = 32; c < out; ++c) {
            double s = 0;
            for (int64_t i = 0; i < in; ++i) s += double(x[r * in + i]) * wq[i * out + c];
            err += (s - z[r * out + c]) * (s - z[r * out + c]);
            ref += s * s;
          }
        EXPECT_LT(std::sqrt(err / ref), 1e-6) << "K=" << K << " " << codebook_name(cb) << " n=" << n;
      }
    }
}

// A column's sum does not depend on how many pairs one call covers: the expert runner splits a
// 128-column block into calls of 1, 2 or 4 pairs by how many items it needs, with the same bits.
TEST_P(KernelPath, PairsPerCallDoNotChangeTheBits) {
  std::mt19937 rng(77);
  for (int K : {2, 3, 4})
    for (Codebook cb : {Codebook::Inst3, Codebook::Mul1}) {
      const int64_t in = 512, out = 256;
      const std::vector<uint8_t> bits = test::random_trellis(in, out, K, rng);
      test::PackedBuffer pk(bits.data(), in, out, K, cb);
      for (int n : {1, 2, 5, 9}) {
        std::normal_distribution<float> nd;
        std::vector<float> x(static_cast<size_t>(n * in)), whole(static_cast<size_t>(n * out)), split(whole.size());
        for (float& v : x) v = nd(rng);
        matmul_pairs(GetParam(), pk.proj, 0, pk.proj.pairs(), x.data(), in, n, whole.data(), out);
        for (int g : {1, 2}) {
          std::fill(split.begin(), split.end(), -1.0f);
          for (int64_t p0 = 0; p0 < pk.proj.pairs(); p0 += g)
            matmul_pairs(GetParam(), pk.proj, p0, g, x.data(), in, n, split.data() + 32 * p0, out);
          EXPECT_EQ(std::memcmp(whole.data(), split.data(), whole.size() * 4), 0)
              << "K=" << K << " " << codebook_name(cb) << " n=" << n << ", " << g << " pair(s) per call";
        }
      }
    }
}

INSTANTIATE_TEST_SUITE_P(Paths, KernelPath, ::testing::Values(SimdPath::Scalar, SimdPath::Avx2, SimdPath::Avx512, SimdPath::Avx512Fp16),
                         [](const auto& info) { return std::string(simd_name(info.param)); });

}  // namespace
}  // namespace ft::exl3
