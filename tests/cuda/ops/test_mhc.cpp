// mhc_site_in / mhc_site_out against shared/ops/mhc (mhc_mix + mhc_collapse + rms_norm,
// mhc_expand) at HC = 1…4, tiny (D = 64, 66) and real (D = 4096) widths, N = 1, 3, 17, 300,
// Sinkhorn NIT = 20, 1, 7, and a large hc_eps that exposes where ε_hc enters. m_raw = F·x̂ comes
// from the CPU in double (the engine gets it from linear_f32). Two references:
//   * the reference ops themselves (≤ 1e-5: they project the normalised values in fp32, the
//     kernel folds r after the projection);
//   * the same map on the kernel's own logits m = m_raw·r (≤ 1e-6: only expf's last ulps
//     differ), which pins a mistake in the mixing map or Sinkhorn to the kernel.
// Batch invariance: a token alone, misaligned (scalar path), with and without the y output.
#include "gpu-worker/backends/cuda/ops/mhc.h"
#include "gpu-worker/backends/cuda/ops/moe.h"

#include <cmath>
#include <cstdio>

#include "shared/ops/activations.h"
#include "shared/ops/mhc.h"
#include "shared/ops/norms.h"
#include "tests/cuda/ops/misc_checks.h"

namespace ft::cuda {
namespace {

using test::DevBuf;
using test::misc::expect_rows_close;
using test::misc::expect_same_bits;
using test::misc::Shifted;

class CudaMhc : public test::GpuTest {};

struct SiteCase {
  int64_t hc = 0, D = 0, N = 0, iters = 0;
  float hc_eps = 0.0f;
  float rms_eps = 1e-5f;
  std::vector<float> X, fn, base, scale, norm_w, m_raw;

  int64_t nmix() const { return mhc_nmix(hc); }
  std::string label() const {
    char b[160];
    std::snprintf(b, sizeof b, "site_in hc %lld D %lld N %lld NIT %lld hc_eps %g", static_cast<long long>(hc),
                  static_cast<long long>(D), static_cast<long long>(N), static_cast<long long>(iters), hc_eps);
    return b;
  }
};

// Streams that share a component (they start as copies of one embedding) plus their own parts, at
// token scales spread over two decades; projections sized so the mixing logits are O(1).
SiteCase make_site(int64_t hc, int64_t D, int64_t N, int64_t iters, float hc_eps, uint64_t seed) {
  SiteCase c;
  c.hc = hc, c.D = D, c.N = N, c.iters = iters, c.hc_eps = hc_eps;
  const int64_t n = hc * D, nmix = c.nmix();
  const std::vector<float> common = test::randn(static_cast<size_t>(N * D), seed);
  const std::vector<float> own = test::randn(static_cast<size_t>(N * n), seed + 1, 0.5f);
  const std::vector<float> tok_scale = test::randu(static_cast<size_t>(N), seed + 2, -1.0f, 1.0f);
  c.X.resize(static_cast<size_t>(N * n));
  for (int64_t t = 0; t < N; ++t)
    for (int64_t i = 0; i < hc; ++i)
      for (int64_t d = 0; d < D; ++d)
        c.X[t * n + i * D + d] = (common[t * D + d] + own[t * n + i * D + d]) * std::pow(10.0f, tok_scale[t]);
  c.fn = test::randn(static_cast<size_t>(nmix * n), seed + 3, 1.0f / std::sqrt(static_cast<float>(n)));
  c.base = test::randn(static_cast<size_t>(nmix), seed + 4, 0.7f);
  c.scale = test::randu(3, seed + 5, 0.5f, 1.5f);
  c.norm_w = test::randn(static_cast<size_t>(D), seed + 6, 0.2f, 1.0f);
  c.m_raw.resize(static_cast<size_t>(N * nmix));
  for (int64_t t = 0; t < N; ++t)
    for (int64_t k = 0; k < nmix; ++k) {
      double s = 0;
      const float* f = c.fn.data() + k * n;
      const float* x = c.X.data() + t * n;
      for (int64_t j = 0; j < n; ++j) s += static_cast<double>(f[j]) * x[j];
      c.m_raw[t * nmix + k] = static_cast<float>(s);
    }
  return c;
}

struct SiteOut {
  std::vector<float> mix, a, y;
};

void put_mix(const MhcMix& m, int64_t hc, float* row) {
  std::copy(m.pre.begin(), m.pre.end(), row);
  std::copy(m.post.begin(), m.post.end(), row + hc);
  std::copy(m.comb.begin(), m.comb.end(), row + 2 * hc);
}

MhcMix get_mix(const float* row, int64_t hc) {
  MhcMix m;
  m.pre.assign(row, row + hc);
  m.post.assign(row + hc, row + 2 * hc);
  m.comb.assign(row + 2 * hc, row + 2 * hc + hc * hc);
  return m;
}

// The reference engine's site_in: mhc_mix, mhc_collapse, rms_norm.
SiteOut reference_site_in(const SiteCase& c) {
  const int64_t n = c.hc * c.D, nmix = c.nmix();
  SiteOut r{std::vector<float>(static_cast<size_t>(c.N * nmix)), std::vector<float>(static_cast<size_t>(c.N * c.D)),
            std::vector<float>(static_cast<size_t>(c.N * c.D))};
  const MhcParams p{c.fn.data(), c.base.data(), c.scale.data(), c.hc, c.D, c.rms_eps, c.hc_eps, c.iters};
  for (int64_t t = 0; t < c.N; ++t) {
    const float* X = c.X.data() + t * n;
    const MhcMix m = mhc_mix(p, X);
    put_mix(m, c.hc, r.mix.data() + t * nmix);
    mhc_collapse(m, X, c.hc, c.D, r.y.data() + t * c.D);
    rms_norm(r.y.data() + t * c.D, c.norm_w.data(), c.D, c.rms_eps, r.a.data() + t * c.D);
  }
  return r;
}

// The same map on the kernel's logits m = m_raw·r, r from the double sum of squares.
SiteOut same_logits_site_in(const SiteCase& c) {
  const int64_t hc = c.hc, n = hc * c.D, nmix = c.nmix();
  SiteOut r{std::vector<float>(static_cast<size_t>(c.N * nmix)), std::vector<float>(static_cast<size_t>(c.N * c.D)),
            std::vector<float>(static_cast<size_t>(c.N * c.D))};
  for (int64_t t = 0; t < c.N; ++t) {
    const float* X = c.X.data() + t * n;
    double ss = 0;
    for (int64_t j = 0; j < n; ++j) ss += static_cast<double>(X[j]) * X[j];
    const float rx = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(n) + c.rms_eps));
    std::vector<float> m(static_cast<size_t>(nmix));
    for (int64_t k = 0; k < nmix; ++k) m[k] = c.m_raw[t * nmix + k] * rx;
    MhcMix mx;
    mx.pre.resize(hc);
    mx.post.resize(hc);
    mx.comb.resize(hc * hc);
    for (int64_t i = 0; i < hc; ++i) mx.pre[i] = sigmoid(c.scale[0] * m[i] + c.base[i]) + c.hc_eps;
    for (int64_t j = 0; j < hc; ++j) mx.post[j] = 2.0f * sigmoid(c.scale[1] * m[hc + j] + c.base[hc + j]);
    for (int64_t k = 0; k < hc * hc; ++k) mx.comb[k] = c.scale[2] * m[2 * hc + k] + c.base[2 * hc + k];
    sinkhorn(mx.comb.data(), hc, c.hc_eps, c.iters);
    put_mix(mx, hc, r.mix.data() + t * nmix);
    mhc_collapse(mx, X, hc, c.D, r.y.data() + t * c.D);
    rms_norm(r.y.data() + t * c.D, c.norm_w.data(), c.D, c.rms_eps, r.a.data() + t * c.D);
  }
  return r;
}

// The kernel on a case; X and a start `offset` floats into their buffers; y output optional.
struct GpuSite {
  Shifted<float> X, m_raw, a, y;
  DevBuf<float> base, scale, norm_w, mix;
  GpuSite(const SiteCase& c, int64_t offset)
      : X(c.X, offset),
        m_raw(c.m_raw, 0),
        a(static_cast<size_t>(c.N * c.D), offset),
        y(static_cast<size_t>(c.N * c.D), offset),
        base(c.base),
        scale(c.scale),
        norm_w(c.norm_w),
        mix(static_cast<size_t>(c.N * c.nmix())) {}
  MhcSite site(const SiteCase& c) const {
    return MhcSite{base.get(), scale.get(), norm_w.get(), c.hc, c.D, c.rms_eps, c.hc_eps, c.iters};
  }
  // Tokens [t0, t0 + count) into the given outputs.
  void run(const SiteCase& c, int64_t t0, int64_t count, float* mix_out, float* a_out, float* y_out) const {
    mhc_site_in(site(c), X.get() + t0 * c.hc * c.D, m_raw.get() + t0 * c.nmix(), c.nmix(), count, mix_out, a_out, c.D,
                y_out, nullptr);
  }
  SiteOut run_all(const SiteCase& c, bool with_y) {
    run(c, 0, c.N, mix.get(), a.get(), with_y ? y.get() : nullptr);
    return SiteOut{mix.download(), a.download(), with_y ? y.download() : std::vector<float>{}};
  }
};

void check_site_in(const SiteCase& c) {
  GpuSite g(c, 0);
  const SiteOut got = g.run_all(c, true);
  const SiteOut ref = reference_site_in(c), same = same_logits_site_in(c);
  const std::string L = c.label();
  expect_rows_close(L + " mix vs mhc_mix", got.mix, ref.mix, c.N, c.nmix(), c.nmix(), 1e-5);
  expect_rows_close(L + " y vs mhc_collapse", got.y, ref.y, c.N, c.D, c.D, 1e-5);
  expect_rows_close(L + " a vs rms_norm(y)", got.a, ref.a, c.N, c.D, c.D, 1e-5);
  expect_rows_close(L + " mix vs same-logit map", got.mix, same.mix, c.N, c.nmix(), c.nmix(), 1e-6);
  expect_rows_close(L + " y vs same-logit collapse", got.y, same.y, c.N, c.D, c.D, 1e-6);
  expect_rows_close(L + " a vs same-logit norm", got.a, same.a, c.N, c.D, c.D, 1e-6);
  // The map's invariants: 0 < post < 2; with the real ε_hc the columns of M sum to ≈ 1 (the
  // last step is a column step; a large ε_hc leaves each column at s / (s + ε_hc)).
  for (int64_t t = 0; t < c.N; ++t) {
    const float* m = got.mix.data() + t * c.nmix();
    for (int64_t j = 0; j < c.hc; ++j) {
      double col = 0;
      for (int64_t i = 0; i < c.hc; ++i) col += m[2 * c.hc + i * c.hc + j];
      if (c.hc_eps <= 1e-5f) {
        EXPECT_NEAR(col, 1.0, 1e-4) << L << " token " << t << " column " << j;
      }
      EXPECT_GT(m[c.hc + j], 0.0f) << L << " token " << t;
      EXPECT_LT(m[c.hc + j], 2.0f) << L << " token " << t;
    }
  }
}

TEST_F(CudaMhc, SiteInMatchesReferenceTiny) {
  uint64_t seed = 1;
  for (int64_t hc : {1, 2, 3, 4})
    for (int64_t N : {1, 3, 17, 300}) check_site_in(make_site(hc, 64, N, 20, 1e-6f, seed++));
}

TEST_F(CudaMhc, SiteInMatchesReferenceAtOtherSinkhornCountsAndLargeEps) {
  uint64_t seed = 50;
  for (int64_t iters : {1, 7}) check_site_in(make_site(4, 64, 17, iters, 1e-6f, seed++));
  // A large ε_hc moves every result: it catches ε_hc in the wrong place (pre, softmax, denominators).
  for (int64_t hc : {2, 4})
    for (int64_t iters : {1, 20}) check_site_in(make_site(hc, 64, 17, iters, 0.05f, seed++));
  // A width that is not a multiple of 4 (scalar path).
  check_site_in(make_site(3, 66, 17, 20, 1e-6f, seed++));
}

TEST_F(CudaMhc, SiteInMatchesReferenceAtRealWidth) {
  uint64_t seed = 90;
  for (int64_t N : {1, 3, 17, 300}) check_site_in(make_site(4, 4096, N, 20, 1e-6f, seed++));
  for (int64_t iters : {1, 7}) check_site_in(make_site(4, 4096, 3, iters, 1e-6f, seed++));
}

TEST_F(CudaMhc, SiteInTokenBitsDoNotDependOnTheBatch) {
  for (int64_t D : {64, 4096}) {
    const SiteCase c = make_site(4, D, 17, 20, 1e-6f, 300 + D);
    GpuSite g(c, 0);
    const SiteOut all = g.run_all(c, true);
    const int64_t nmix = c.nmix();
    for (int64_t t : {0, 5, 16}) {
      DevBuf<float> mix(static_cast<size_t>(nmix)), a(static_cast<size_t>(D)), y(static_cast<size_t>(D));
      g.run(c, t, 1, mix.get(), a.get(), y.get());
      const std::string L = c.label() + " token " + std::to_string(t) + " alone";
      expect_same_bits(L + " mix", mix.download().data(), all.mix.data() + t * nmix, static_cast<size_t>(nmix));
      expect_same_bits(L + " a", a.download().data(), all.a.data() + t * D, static_cast<size_t>(D));
      expect_same_bits(L + " y", y.download().data(), all.y.data() + t * D, static_cast<size_t>(D));
    }
    // Misaligned streams and outputs (scalar path), and no y output: the same bits.
    GpuSite gm(c, 1);
    const SiteOut mis = gm.run_all(c, true);
    expect_same_bits(c.label() + " misaligned mix", mis.mix, all.mix);
    expect_same_bits(c.label() + " misaligned a", mis.a, all.a);
    expect_same_bits(c.label() + " misaligned y", mis.y, all.y);
    GpuSite gn(c, 0);
    const SiteOut noy = gn.run_all(c, false);
    expect_same_bits(c.label() + " without y: mix", noy.mix, all.mix);
    expect_same_bits(c.label() + " without y: a", noy.a, all.a);
  }
}

// The mix apart (mhc_site_mix, what the engine runs beside the sublayer in decode steps) and
// site_in without it: the same mix and a bits as site_in with it, aligned or not, hc 1–4.
TEST_F(CudaMhc, TheMixApartGivesSiteInsBits) {
  uint64_t seed = 400;
  for (int64_t hc : {1, 2, 3, 4})
    for (int64_t D : {64, 4096}) {
      const SiteCase c = make_site(hc, D, 5, 20, 1e-6f, seed++);
      for (int64_t offset : {0, 1}) {
        GpuSite g(c, offset);
        const SiteOut all = g.run_all(c, false);
        DevBuf<float> mix(static_cast<size_t>(c.N * c.nmix()));
        mhc_site_mix(g.site(c), g.X.get(), g.m_raw.get(), c.nmix(), c.N, mix.get(), nullptr);
        Shifted<float> a(static_cast<size_t>(c.N * c.D), offset);
        mhc_site_in(g.site(c), g.X.get(), g.m_raw.get(), c.nmix(), c.N, nullptr, a.get(), c.D, nullptr, nullptr);
        const std::string L = c.label() + (offset ? " misaligned" : "");
        expect_same_bits(L + " mix apart", mix.download(), all.mix);
        expect_same_bits(L + " a without the mix", a.download(), all.a);
      }
    }
}

// site_out: streams, a sublayer output and a mix with the ranges the map produces.
struct OutCase {
  int64_t hc, D, N;
  std::vector<float> X, o, mix;
  std::string label() const {
    return "site_out hc " + std::to_string(hc) + " D " + std::to_string(D) + " N " + std::to_string(N);
  }
};

OutCase make_out(int64_t hc, int64_t D, int64_t N, uint64_t seed) {
  OutCase c{hc, D, N, test::misc::scaled_rows(N, hc * D, seed), test::randn(static_cast<size_t>(N * D), seed + 1, 3.0f),
            {}};
  const int64_t nmix = mhc_nmix(hc);
  c.mix = test::randu(static_cast<size_t>(N * nmix), seed + 2, 0.0f, 1.0f);
  for (int64_t t = 0; t < N; ++t)
    for (int64_t j = 0; j < hc; ++j) c.mix[t * nmix + hc + j] *= 2.0f;  // post ∈ (0, 2)
  return c;
}

std::vector<float> reference_site_out(const OutCase& c) {
  std::vector<float> X = c.X;
  const int64_t nmix = mhc_nmix(c.hc);
  for (int64_t t = 0; t < c.N; ++t)
    mhc_expand(get_mix(c.mix.data() + t * nmix, c.hc), c.o.data() + t * c.D, c.hc, c.D, X.data() + t * c.hc * c.D);
  return X;
}

std::vector<float> gpu_site_out(const OutCase& c, int64_t offset) {
  Shifted<float> X(c.X, offset), o(c.o, offset);
  DevBuf<float> mix(c.mix);
  mhc_site_out(mix.get(), o.get(), c.D, c.N, c.hc, c.D, X.get(), nullptr);
  return X.download();
}

TEST_F(CudaMhc, SiteOutMatchesExpand) {
  uint64_t seed = 500;
  for (int64_t hc : {1, 2, 3, 4})
    for (int64_t D : {64, 66, 4096})
      for (int64_t N : {1, 3, 17, 300}) {
        if (D == 4096 && N == 300 && hc != 4) continue;
        const OutCase c = make_out(hc, D, N, seed++);
        const std::vector<float> got = gpu_site_out(c, 0), want = reference_site_out(c);
        const double worst = expect_rows_close(c.label(), got, want, N * hc, D, D, 1e-6);
        const size_t same = test::misc::exact_count(got, want);
        if (same != got.size())
          std::printf("note: %s: %zu of %zu values bit-equal to mhc_expand (worst row rel %.3g)\n", c.label().c_str(),
                      same, got.size(), worst);
      }
}

TEST_F(CudaMhc, SiteOutTokenBitsDoNotDependOnTheBatch) {
  for (int64_t D : {64, 4096}) {
    const OutCase c = make_out(4, D, 17, 900 + D);
    const std::vector<float> all = gpu_site_out(c, 0);
    const int64_t n = c.hc * D, nmix = mhc_nmix(c.hc);
    for (int64_t t : {0, 9, 16}) {
      OutCase one{c.hc,
                  D,
                  1,
                  std::vector<float>(c.X.begin() + t * n, c.X.begin() + (t + 1) * n),
                  std::vector<float>(c.o.begin() + t * D, c.o.begin() + (t + 1) * D),
                  std::vector<float>(c.mix.begin() + t * nmix, c.mix.begin() + (t + 1) * nmix)};
      expect_same_bits(c.label() + " token " + std::to_string(t) + " alone", gpu_site_out(one, 0).data(),
                       all.data() + t * n, static_cast<size_t>(n));
    }
    expect_same_bits(c.label() + " misaligned", gpu_site_out(c, 1), all);
  }
}

// The routed sum folded into the site's output: the bits of moe_combine into o (accumulating onto
// the shared expert's rows, or in their place) and then the site's output without it.
TEST_F(CudaMhc, SiteOutWithTheRoutedSumGivesCombineThenSiteOutBits) {
  uint64_t seed = 1300;
  for (int64_t hc : {1, 4})
    for (int64_t D : {64, 66, 4096})
      for (int64_t N : {1, 5, 33})
        for (int top_k : {1, 8})
          for (bool accumulate : {false, true})
            for (int64_t offset : {0, 1}) {
              if (offset && D != 66) continue;
              const OutCase c = make_out(hc, D, N, seed++);
              const std::vector<float> Y = test::randn(static_cast<size_t>(N * top_k * D), seed++, 2.0f);
              const std::vector<float> w = test::randu(static_cast<size_t>(N * top_k), seed++, 0.0f, 1.0f);
              const std::string tag = c.label() + " top_k " + std::to_string(top_k) + (accumulate ? " +o" : " o=") +
                                      (offset ? " misaligned" : "");
              DevBuf<float> dY(Y), dw(w), mix(c.mix);
              // Pieces: combine into o, then the site.
              Shifted<float> X1(c.X, offset), o1(c.o, offset);
              moe_combine(dY.get(), dw.get(), N, top_k, D, o1.get(), D,
                          accumulate ? LinearStore::Accumulate : LinearStore::Overwrite, nullptr);
              mhc_site_out(mix.get(), o1.get(), D, N, hc, D, X1.get(), nullptr);
              // One launch.
              Shifted<float> X2(c.X, offset), o2(c.o, offset);
              const RoutedSum r{dY.get(), dw.get(), top_k, accumulate};
              mhc_site_out(mix.get(), o2.get(), D, N, hc, D, X2.get(), nullptr, &r);
              expect_same_bits(tag, X2.download(), X1.download());
              expect_same_bits(tag + " (o untouched)", o2.download(), c.o);
            }
}

TEST_F(CudaMhc, RejectsUnsupportedShapes) {
  DevBuf<float> b(64);
  MhcSite p{b.get(), b.get(), b.get(), 5, 64, 1e-5f, 1e-6f, 20};
  EXPECT_THROW(mhc_site_in(p, b.get(), b.get(), 35, 1, b.get(), b.get(), 64, nullptr, nullptr), Error);
  EXPECT_THROW(mhc_site_mix(p, b.get(), b.get(), 35, 1, b.get(), nullptr), Error);
  EXPECT_THROW(mhc_site_out(b.get(), b.get(), 64, 1, 5, 64, b.get(), nullptr), Error);
}

}  // namespace
}  // namespace ft::cuda
