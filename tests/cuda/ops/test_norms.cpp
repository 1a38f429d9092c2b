// rms_norm_rows / layer_norm_rows against shared/ops/norms at tiny and real widths (warp path
// ≤ 1024, block path above; widths not a multiple of 4 take the scalar path), N = 1, 3, 17, 300;
// batch invariance (a row alone, in another batch order, strided, misaligned, in place: the same
// bits).
#include "gpu-worker/backends/cuda/ops/norms.h"

#include "shared/ops/norms.h"
#include "tests/cuda/ops/misc_checks.h"

namespace ft::cuda {
namespace {

using test::DevBuf;
using test::misc::expect_rows_close;
using test::misc::expect_same_bits;

class CudaNorms : public test::GpuTest {};

enum class Kind { Rms, RmsUnweighted, Layer };
const char* name(Kind k) {
  return k == Kind::Rms ? "rms_norm" : k == Kind::RmsUnweighted ? "rms_norm(no w)" : "layer_norm";
}
float eps_of(Kind k) { return k == Kind::Layer ? 1e-6f : 1e-5f; }

constexpr int64_t kWidths[] = {64, 128, 130, 1001, 1027, 1536, 4096};
constexpr int64_t kRowCounts[] = {1, 3, 17, 300};

struct Case {
  Kind kind;
  int64_t rows, n, ld;
  std::vector<float> x, w, b;  // x is [rows, ld]
};

Case make_case(Kind kind, int64_t rows, int64_t n, int64_t ld, uint64_t seed) {
  Case c{kind, rows, n, ld, {}, {}, {}};
  const std::vector<float> v = test::misc::scaled_rows(rows, n, seed);
  c.x.assign(static_cast<size_t>(rows * ld), 0.0f);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < n; ++i)
      c.x[r * ld + i] = v[r * n + i] + (kind == Kind::Layer ? 3.0f * static_cast<float>(r % 5) : 0.0f);
  if (rows > 2)  // a zero row: r = 1/√eps exactly as the reference forms it
    for (int64_t i = 0; i < n; ++i) c.x[1 * ld + i] = 0.0f;
  c.w = test::randn(static_cast<size_t>(n), seed + 1, 0.2f, 1.0f);
  c.b = test::randn(static_cast<size_t>(n), seed + 2, 0.5f);
  return c;
}

std::vector<float> reference(const Case& c) {
  std::vector<float> y(c.x.size(), 0.0f);
  for (int64_t r = 0; r < c.rows; ++r) {
    const float* x = c.x.data() + r * c.ld;
    float* o = y.data() + r * c.ld;
    if (c.kind == Kind::Layer) layer_norm(x, c.w.data(), c.b.data(), c.n, eps_of(c.kind), o);
    else rms_norm(x, c.kind == Kind::Rms ? c.w.data() : nullptr, c.n, eps_of(c.kind), o);
  }
  return y;
}

// Device copies of a case; x and y start `offset` floats into their buffers (offset 1: every row
// misaligned, so the scalar path runs).
struct Dev {
  DevBuf<float> x, y, w, b;
  int64_t offset;
  Dev(const Case& c, int64_t offset_) : x(c.x.size() + 4), y(c.x.size() + 4), w(c.w), b(c.b), offset(offset_) {
    FT_CUDA_CHECK(cudaMemcpy(x.get() + offset, c.x.data(), c.x.size() * 4, cudaMemcpyHostToDevice));
  }
  float* xp() const { return x.get() + offset; }
  float* yp() const { return y.get() + offset; }
};

void launch(const Case& c, const Dev& d, const float* x, int64_t rows, float* y) {
  if (c.kind == Kind::Layer)
    layer_norm_rows(x, c.ld, rows, c.n, d.w.get(), d.b.get(), eps_of(c.kind), y, c.ld, nullptr);
  else rms_norm_rows(x, c.ld, rows, c.n, c.kind == Kind::Rms ? d.w.get() : nullptr, eps_of(c.kind), y, c.ld, nullptr);
}

std::vector<float> download(const DevBuf<float>& b, int64_t offset, size_t n) {
  std::vector<float> all = b.download();
  return std::vector<float>(all.begin() + offset, all.begin() + offset + static_cast<int64_t>(n));
}

std::string label(const Case& c, const char* extra = "") {
  return std::string(name(c.kind)) + " rows " + std::to_string(c.rows) + " n " + std::to_string(c.n) + " ld " +
         std::to_string(c.ld) + extra;
}

TEST_F(CudaNorms, MatchReferenceAtEveryWidthAndRowCount) {
  uint64_t seed = 100;
  for (Kind kind : {Kind::Rms, Kind::RmsUnweighted, Kind::Layer})
    for (int64_t n : kWidths)
      for (int64_t rows : kRowCounts) {
        const Case c = make_case(kind, rows, n, n, seed++);
        Dev d(c, 0);
        launch(c, d, d.xp(), rows, d.yp());
        const std::vector<float> got = download(d.y, 0, c.x.size()), want = reference(c);
        expect_rows_close(label(c), got, want, rows, n, n, 1e-6);
      }
}

TEST_F(CudaNorms, RowAloneEqualsRowAmongOthers) {
  for (Kind kind : {Kind::Rms, Kind::Layer})
    for (int64_t n : {int64_t{130}, int64_t{4096}}) {
      const int64_t rows = 17;
      const Case c = make_case(kind, rows, n, n, 7 + n);
      Dev d(c, 0);
      launch(c, d, d.xp(), rows, d.yp());
      const std::vector<float> all = download(d.y, 0, c.x.size());
      for (int64_t r : {int64_t{0}, int64_t{8}, int64_t{16}}) {
        DevBuf<float> one(static_cast<size_t>(n));
        launch(c, d, d.xp() + r * n, 1, one.get());
        expect_same_bits(label(c, " row alone") + " row " + std::to_string(r), one.download().data(),
                         all.data() + r * n, static_cast<size_t>(n));
      }
      // The same rows in reverse order (each row sits at another position in the grid).
      Case rev = c;
      for (int64_t r = 0; r < rows; ++r)
        std::copy(c.x.begin() + r * n, c.x.begin() + (r + 1) * n, rev.x.begin() + (rows - 1 - r) * n);
      Dev dr(rev, 0);
      launch(rev, dr, dr.xp(), rows, dr.yp());
      const std::vector<float> back = download(dr.y, 0, rev.x.size());
      for (int64_t r = 0; r < rows; ++r)
        expect_same_bits(label(c, " reversed") + " row " + std::to_string(r), back.data() + (rows - 1 - r) * n,
                         all.data() + r * n, static_cast<size_t>(n));
    }
}

TEST_F(CudaNorms, StridedMisalignedAndInPlaceRowsGiveTheSameBits) {
  for (Kind kind : {Kind::Rms, Kind::Layer})
    for (int64_t n : {int64_t{128}, int64_t{4096}}) {
      const int64_t rows = 17;
      // Reference bits: contiguous, aligned (float4 path).
      const Case c = make_case(kind, rows, n, n, 55 + n);
      Dev d(c, 0);
      launch(c, d, d.xp(), rows, d.yp());
      const std::vector<float> base = download(d.y, 0, c.x.size());
      expect_rows_close(label(c), base, reference(c), rows, n, n, 1e-6);

      // Rows ld = n + 3 apart starting one float in: every row misaligned (scalar path).
      Case s{kind, rows, n, n + 3, std::vector<float>(static_cast<size_t>(rows * (n + 3)), 0.0f), c.w, c.b};
      for (int64_t r = 0; r < rows; ++r)
        std::copy(c.x.begin() + r * n, c.x.begin() + (r + 1) * n, s.x.begin() + r * s.ld);
      Dev ds(s, 1);
      launch(s, ds, ds.xp(), rows, ds.yp());
      const std::vector<float> strided = download(ds.y, 1, s.x.size());
      for (int64_t r = 0; r < rows; ++r)
        expect_same_bits(label(s, " misaligned") + " row " + std::to_string(r), strided.data() + r * s.ld,
                         base.data() + r * n, static_cast<size_t>(n));

      // In place.
      launch(c, d, d.xp(), rows, d.xp());
      const std::vector<float> inplace = download(d.x, 0, c.x.size());
      expect_same_bits(label(c, " in place"), inplace, base);
    }
}

TEST_F(CudaNorms, RejectsBadShapes) {
  DevBuf<float> x(64), y(64), w(64);
  EXPECT_THROW(rms_norm_rows(x.get(), 8, 1, 16, w.get(), 1e-5f, y.get(), 16, nullptr), Error);
  EXPECT_THROW(layer_norm_rows(x.get(), 16, 1, 16, w.get(), nullptr, 1e-6f, y.get(), 16, nullptr), Error);
  EXPECT_NO_THROW(rms_norm_rows(x.get(), 16, 0, 16, w.get(), 1e-5f, y.get(), 16, nullptr));  // no rows: nothing
}

}  // namespace
}  // namespace ft::cuda
