// swiglu_rows against shared/ops/swiglu swiglu_clamped: expert (2048), dense (12288), tiny (64)
// and non-multiple-of-4 (1001: scalar path) widths, N = 1, 3, 17, 300 rows, values far beyond
// ±limit (both clamps), exactly ±limit, the exp overflow region of silu, strided rows and in place.
#include "gpu-worker/backends/cuda/ops/swiglu.h"

#include <cmath>

#include "shared/ops/swiglu.h"
#include "tests/cuda/ops/misc_checks.h"

namespace ft::cuda {
namespace {

using test::misc::expect_same_bits;
using test::misc::Shifted;

class CudaSwiglu : public test::GpuTest {};

constexpr float kLimit = 10.0f;

// gu rows [gate | up | padding] with N(0, 8) values plus planted specials.
std::vector<float> make_gu(int64_t rows, int64_t inter, int64_t ld, uint64_t seed) {
  std::vector<float> gu = test::randn(static_cast<size_t>(rows * ld), seed, 8.0f);
  const float special[] = {kLimit,
                           -kLimit,
                           std::nextafter(kLimit, 0.0f),
                           std::nextafter(kLimit, 100.0f),
                           1e4f,
                           -1e4f,
                           -87.5f,
                           -90.0f,
                           -100.0f,
                           -0.0f,
                           0.0f,
                           1e-30f,
                           -200.0f,
                           88.0f};
  const int ns = static_cast<int>(sizeof special / sizeof special[0]);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < std::min<int64_t>(inter, 2 * ns); ++i) {
      gu[r * ld + i] = special[(i + r) % ns];              // gate
      gu[r * ld + inter + i] = special[(i / 2 + r) % ns];  // up
    }
  return gu;
}

std::vector<float> reference(const std::vector<float>& gu, int64_t rows, int64_t inter, int64_t ld_gu, int64_t ld_h) {
  std::vector<float> h(static_cast<size_t>(rows * ld_h), 0.0f);
  for (int64_t r = 0; r < rows; ++r)
    swiglu_clamped(gu.data() + r * ld_gu, gu.data() + r * ld_gu + inter, inter, kLimit, h.data() + r * ld_h);
  return h;
}

// Per element: |got − want| ≤ 1e-6·|want| (zeros exact), over the first `inter` of each row.
void expect_elementwise(const std::string& what, const std::vector<float>& got, const std::vector<float>& want,
                        const std::vector<float>& gu, int64_t rows, int64_t inter, int64_t ld_gu, int64_t ld_h) {
  int64_t bad = 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < inter; ++i) {
      const float g = got[r * ld_h + i], w = want[r * ld_h + i];
      const double d = std::fabs(static_cast<double>(g) - w);
      if (!(d <= 1e-6 * std::fabs(w)) && bad++ < 5)
        ADD_FAILURE() << what << " row " << r << " col " << i << ": gate " << gu[r * ld_gu + i] << " up "
                      << gu[r * ld_gu + inter + i] << " expected " << w << " got " << g;
    }
  EXPECT_EQ(bad, 0) << what << ": elements off";
}

TEST_F(CudaSwiglu, MatchesSwigluClamped) {
  uint64_t seed = 1;
  for (int64_t inter : {64, 1001, 2048, 12288})
    for (int64_t rows : {1, 3, 17, 300}) {
      if (inter == 12288 && rows == 300) continue;  // 17 rows already cover the dense width
      const int64_t ld = 2 * inter;
      const std::vector<float> gu = make_gu(rows, inter, ld, seed++);
      Shifted<float> dgu(gu, 0), dh(static_cast<size_t>(rows * inter), 0);
      swiglu_rows(dgu.get(), ld, rows, inter, kLimit, dh.get(), inter, nullptr);
      const std::string what = "swiglu I " + std::to_string(inter) + " rows " + std::to_string(rows);
      const std::vector<float> got = dh.download();
      expect_elementwise(what, got, reference(gu, rows, inter, ld, inter), gu, rows, inter, ld, inter);
    }
}

TEST_F(CudaSwiglu, StridedMisalignedAndInPlaceGiveTheSameBits) {
  for (int64_t inter : {64, 2048}) {
    const int64_t rows = 17;
    const std::vector<float> gu = make_gu(rows, inter, 2 * inter, 40 + inter);
    Shifted<float> dgu(gu, 0), dh(static_cast<size_t>(rows * inter), 0);
    swiglu_rows(dgu.get(), 2 * inter, rows, inter, kLimit, dh.get(), inter, nullptr);
    const std::vector<float> base = dh.download();
    const std::string what = "swiglu I " + std::to_string(inter);

    // Rows ld_gu = 2I + 3 and ld_h = I + 1 apart, one float into the buffers (scalar path).
    const int64_t ld_gu = 2 * inter + 3, ld_h = inter + 1;
    std::vector<float> s(static_cast<size_t>(rows * ld_gu), 0.0f);
    for (int64_t r = 0; r < rows; ++r)
      std::copy(gu.begin() + r * 2 * inter, gu.begin() + (r + 1) * 2 * inter, s.begin() + r * ld_gu);
    Shifted<float> sgu(s, 1), sh(static_cast<size_t>(rows * ld_h), 1);
    swiglu_rows(sgu.get(), ld_gu, rows, inter, kLimit, sh.get(), ld_h, nullptr);
    const std::vector<float> strided = sh.download();
    for (int64_t r = 0; r < rows; ++r)
      expect_same_bits(what + " misaligned row " + std::to_string(r), strided.data() + r * ld_h,
                       base.data() + r * inter, static_cast<size_t>(inter));

    // In place over the gate half; and one row alone.
    swiglu_rows(dgu.get(), 2 * inter, rows, inter, kLimit, dgu.get(), 2 * inter, nullptr);
    const std::vector<float> inplace = dgu.download();
    for (int64_t r = 0; r < rows; ++r)
      expect_same_bits(what + " in place row " + std::to_string(r), inplace.data() + r * 2 * inter,
                       base.data() + r * inter, static_cast<size_t>(inter));
    Shifted<float> fresh(gu, 0), one(static_cast<size_t>(inter), 0);
    swiglu_rows(fresh.get() + 9 * 2 * inter, 2 * inter, 1, inter, kLimit, one.get(), inter, nullptr);
    expect_same_bits(what + " row 9 alone", one.download().data(), base.data() + 9 * inter, static_cast<size_t>(inter));
  }
}

TEST_F(CudaSwiglu, RejectsBadShapes) {
  Shifted<float> b(64, 0);
  EXPECT_THROW(swiglu_rows(b.get(), 10, 1, 8, kLimit, b.get(), 8, nullptr), Error);
  EXPECT_THROW(swiglu_rows(b.get(), 16, 1, 8, kLimit, b.get(), 4, nullptr), Error);
}

}  // namespace
}  // namespace ft::cuda
