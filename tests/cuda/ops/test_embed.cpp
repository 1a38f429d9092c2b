// The ends of the residual streams: embed_tokens for fp32 / fp16 / bf16 tables (exact widening,
// every stream a copy, ids outside the vocabulary → NaN rows) and final_norm against the
// reference engine's plain stream mean + rms_norm (≤ 1e-6), with a row gather; tiny and real
// widths, N = 1, 3, 17, 300; batch invariance.
#include "gpu-worker/backends/cuda/ops/embed.h"

#include <climits>
#include <cmath>
#include <random>

#include "shared/ops/norms.h"
#include "tests/cuda/ops/misc_checks.h"

namespace ft::cuda {
namespace {

using test::DevBuf;
using test::misc::expect_rows_close;
using test::misc::expect_same_bits;
using test::misc::Shifted;

class CudaEmbed : public test::GpuTest {};

const char* name(EmbedDtype d) { return d == EmbedDtype::F32 ? "f32" : d == EmbedDtype::F16 ? "f16" : "bf16"; }

// A table as stored (raw element bits) and its exact fp32 values.
struct Table {
  EmbedDtype dtype;
  int64_t vocab, dim;
  std::vector<uint32_t> f32;
  std::vector<uint16_t> f16;
  std::vector<float> values;
};

float half_to_float(uint16_t h) {  // exact: every fp16 value (subnormals included) is an fp32 value
  const int sign = h >> 15, exp = (h >> 10) & 31, mant = h & 1023;
  const float mag = exp == 0 ? std::ldexp(static_cast<float>(mant), -24)
                             : std::ldexp(1.0f + static_cast<float>(mant) / 1024.0f, exp - 15);
  return sign ? -mag : mag;
}

Table make_table(EmbedDtype dtype, int64_t vocab, int64_t dim, uint64_t seed) {
  Table t{dtype, vocab, dim, {}, {}, std::vector<float>(static_cast<size_t>(vocab * dim))};
  std::mt19937_64 g(seed);
  if (dtype == EmbedDtype::F32) {
    t.values = test::randn(t.values.size(), seed, 0.05f);
    t.f32.resize(t.values.size());
    for (size_t i = 0; i < t.values.size(); ++i) t.f32[i] = test::misc::bits(t.values[i]);
    return t;
  }
  t.f16.resize(t.values.size());
  for (size_t i = 0; i < t.values.size(); ++i) {
    uint16_t b;
    do b = static_cast<uint16_t>(g());
    while (dtype == EmbedDtype::F16 ? ((b >> 10) & 31) == 31 : ((b >> 7) & 255) == 255);  // no inf / NaN
    t.f16[i] = b;
    if (dtype == EmbedDtype::F16) {
      t.values[i] = half_to_float(b);
    } else {
      const uint32_t u = static_cast<uint32_t>(b) << 16;
      std::memcpy(&t.values[i], &u, 4);
    }
  }
  return t;
}

struct DevTable {
  DevBuf<uint32_t> f32;
  DevBuf<uint16_t> f16;
  EmbedTable view;
  explicit DevTable(const Table& t) {
    if (t.dtype == EmbedDtype::F32) f32 = DevBuf<uint32_t>(t.f32);
    else f16 = DevBuf<uint16_t>(t.f16);
    view = EmbedTable{t.dtype == EmbedDtype::F32 ? static_cast<const void*>(f32.get()) : f16.get(), t.dtype, t.vocab,
                      t.dim};
  }
};

std::vector<int32_t> random_tokens(int64_t n, int64_t vocab, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::vector<int32_t> tok(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) tok[i] = static_cast<int32_t>(g() % static_cast<uint64_t>(vocab));
  if (n > 1) tok[0] = 0, tok[n - 1] = static_cast<int32_t>(vocab - 1);
  return tok;
}

TEST_F(CudaEmbed, EveryStreamIsTheExactEmbeddingRow) {
  uint64_t seed = 1;
  struct Shape {
    int64_t vocab, dim;
  };
  for (EmbedDtype dt : {EmbedDtype::F32, EmbedDtype::F16, EmbedDtype::BF16})
    for (Shape s : {Shape{100, 64}, Shape{37, 66}, Shape{512, 4096}}) {
      const Table t = make_table(dt, s.vocab, s.dim, seed++);
      DevTable dtab(t);
      for (int64_t hc : {1, 4})
        for (int64_t N : {1, 3, 17, 300}) {
          const std::vector<int32_t> tok = random_tokens(N, s.vocab, seed++);
          DevBuf<int32_t> dtok(tok);
          DevBuf<float> X(static_cast<size_t>(N * hc * s.dim));
          embed_tokens(dtab.view, dtok.get(), N, hc, X.get(), nullptr);
          std::vector<float> want(X.size());
          for (int64_t i = 0; i < N; ++i)
            for (int64_t k = 0; k < hc; ++k)
              std::copy(t.values.begin() + tok[i] * s.dim, t.values.begin() + (tok[i] + 1) * s.dim,
                        want.begin() + (i * hc + k) * s.dim);
          expect_same_bits(std::string("embed ") + name(dt) + " V " + std::to_string(s.vocab) + " D " +
                               std::to_string(s.dim) + " hc " + std::to_string(hc) + " N " + std::to_string(N),
                           X.download(), want);
        }
    }
}

TEST_F(CudaEmbed, IdsOutsideTheVocabularyGiveNanRows) {
  for (EmbedDtype dt : {EmbedDtype::F32, EmbedDtype::BF16}) {
    const Table t = make_table(dt, 50, 64, 9);
    DevTable dtab(t);
    const std::vector<int32_t> tok = {3, -1, 50, INT_MAX, 49};
    DevBuf<int32_t> dtok(tok);
    DevBuf<float> X(tok.size() * 2 * 64);
    embed_tokens(dtab.view, dtok.get(), static_cast<int64_t>(tok.size()), 2, X.get(), nullptr);
    const std::vector<float> x = X.download();
    for (size_t i = 0; i < tok.size(); ++i) {
      const bool bad = tok[i] < 0 || tok[i] >= 50;
      int64_t wrong = 0;
      for (int64_t d = 0; d < 2 * 64; ++d) {
        const float v = x[i * 128 + d];
        wrong += bad ? !std::isnan(v) : test::misc::bits(v) != test::misc::bits(t.values[tok[i] * 64 + d % 64]);
      }
      EXPECT_EQ(wrong, 0) << name(dt) << " token " << tok[i] << (bad ? ": elements not NaN" : ": elements not the row");
    }
  }
}

// The reference engine's epilogue: h = (Σ_k X[k]) / HC in stream order, then rms_norm.
std::vector<float> reference_final(const std::vector<float>& X, int64_t N, int64_t hc, int64_t D,
                                   const std::vector<float>& w, float eps) {
  std::vector<float> out(static_cast<size_t>(N * D)), h(static_cast<size_t>(D));
  for (int64_t t = 0; t < N; ++t) {
    const float* x = X.data() + t * hc * D;
    for (int64_t d = 0; d < D; ++d) {
      float s = 0.0f;
      for (int64_t k = 0; k < hc; ++k) s += x[k * D + d];
      h[d] = s / static_cast<float>(hc);
    }
    rms_norm(h.data(), w.data(), D, eps, out.data() + t * D);
  }
  return out;
}

std::vector<float> gpu_final(const std::vector<float>& X, int64_t N, int64_t hc, int64_t D, const DevBuf<float>& w,
                             float eps, int64_t offset) {
  Shifted<float> dX(X, offset), h(static_cast<size_t>(N * D), offset);
  final_norm(dX.get(), N, hc, D, nullptr, N, w.get(), eps, h.get(), D, nullptr);
  return h.download();
}

TEST_F(CudaEmbed, FinalNormMatchesStreamMeanThenRmsNorm) {
  uint64_t seed = 200;
  const float eps = 1e-5f;
  for (int64_t hc : {1, 2, 3, 4})
    for (int64_t D : {64, 66, 4096})
      for (int64_t N : {1, 3, 17, 300}) {
        if (D == 4096 && N == 300 && hc != 4) continue;  // the real shape at 300 rows once
        const std::vector<float> X = test::misc::scaled_rows(N, hc * D, seed++);
        const std::vector<float> w = test::randn(static_cast<size_t>(D), seed++, 0.2f, 1.0f);
        DevBuf<float> dw(w);
        const std::string what =
            "final hc " + std::to_string(hc) + " D " + std::to_string(D) + " N " + std::to_string(N);
        expect_rows_close(what, gpu_final(X, N, hc, D, dw, eps, 0), reference_final(X, N, hc, D, w, eps), N, D, D,
                          1e-6);
      }
}

TEST_F(CudaEmbed, FinalNormRowBitsDoNotDependOnTheBatchOrGather) {
  for (int64_t D : {64, 4096}) {
    const int64_t hc = 4, N = 17;
    const float eps = 1e-5f;
    const std::vector<float> X = test::misc::scaled_rows(N, hc * D, 700 + D);
    DevBuf<float> dw(test::randn(static_cast<size_t>(D), 701 + D, 0.2f, 1.0f));
    const std::vector<float> all = gpu_final(X, N, hc, D, dw, eps, 0);
    const std::string what = "final D " + std::to_string(D);
    expect_same_bits(what + " misaligned", gpu_final(X, N, hc, D, dw, eps, 1), all);
    for (int64_t t : {0, 8, 16}) {
      const std::vector<float> one(X.begin() + t * hc * D, X.begin() + (t + 1) * hc * D);
      expect_same_bits(what + " token " + std::to_string(t) + " alone", gpu_final(one, 1, hc, D, dw, eps, 0).data(),
                       all.data() + t * D, static_cast<size_t>(D));
    }
    // Gathered rows (the engine's last-token-per-sequence rows), one invalid: NaN.
    const std::vector<int32_t> rows = {16, 0, 8, 16, 17, -1};
    DevBuf<float> dX(X), h(rows.size() * static_cast<size_t>(D));
    DevBuf<int32_t> drows(rows);
    final_norm(dX.get(), N, hc, D, drows.get(), static_cast<int64_t>(rows.size()), dw.get(), eps, h.get(), D, nullptr);
    const std::vector<float> g = h.download();
    for (size_t r = 0; r < rows.size(); ++r) {
      if (rows[r] >= 0 && rows[r] < N) {
        expect_same_bits(what + " gathered row " + std::to_string(r), g.data() + r * D, all.data() + rows[r] * D,
                         static_cast<size_t>(D));
      } else {
        int64_t finite = 0;
        for (int64_t d = 0; d < D; ++d) finite += !std::isnan(g[r * D + d]);
        EXPECT_EQ(finite, 0) << what << " invalid source row " << rows[r] << ": elements not NaN";
      }
    }
  }
}

}  // namespace
}  // namespace ft::cuda
