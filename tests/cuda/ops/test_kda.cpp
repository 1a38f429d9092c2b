// GPU tests of the KDA kernels (gpu-worker/backends/cuda/ops/kda.h) against the fp32 reference
// (shared/ops/kda.h, norms.h, activations.h composed as ReferenceEngine::kda_layer does), at tiny
// widths (4 heads × 16) and the real ones (64 heads × 128), both forget-gate variants, on fresh
// random inputs of realistic size (raw z ~ N(0,1) before the convolution, r ~ 3·N(0,1),
// A_log ~ log U(1,16), β logits ~ N(0,1)). Outputs start poisoned (NaN), so an unwritten element
// fails. Where the CPU reference is slow (the recurrence at 128×128 per head), the GPU runs every
// head and the reference checks a spread subset of them.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "gpu-worker/backends/cuda/ops/kda.h"
#include "shared/ops/activations.h"
#include "shared/ops/kda.h"
#include "shared/ops/norms.h"
#include "tests/cuda/support/gpu_test.h"

namespace ft::cuda {
namespace {

using test::bit_mismatches;
using test::DevBuf;
using test::randn;
using test::randu;
using test::rel_l2;

struct Dims {
  int64_t H = 0, dl = 0, K = 0;
  int64_t Q() const { return H * dl; }
  int64_t C() const { return 3 * Q(); }
  KdaShape shape() const { return {H, dl}; }
  std::string str() const { return "H=" + std::to_string(H) + " dl=" + std::to_string(dl) + " K=" + std::to_string(K); }
};

const Dims kTiny{4, 16, 4};
const Dims kTiny8{3, 8, 4};  // head size 8: the per-token kernels only (no chunked prefill)
const Dims kReal{64, 128, 4};

std::vector<int> all_heads(const Dims& d) {
  std::vector<int> h(static_cast<size_t>(d.H));
  for (int i = 0; i < d.H; ++i) h[i] = i;
  return h;
}
// `count` heads spread over [0, H), first and last included.
std::vector<int> spread_heads(const Dims& d, int count) {
  if (count >= d.H) return all_heads(d);
  std::vector<int> h;
  for (int i = 0; i < count; ++i) h.push_back(static_cast<int>(i * (d.H - 1) / (count - 1)));
  return h;
}

// ---------------------------------------------------------------- comparisons with a diagnosis

using Where = std::function<std::string(size_t)>;

Where at_row_channel(int64_t width, int64_t dl) {
  return [=](size_t i) {
    const int64_t row = static_cast<int64_t>(i) / width, c = static_cast<int64_t>(i) % width;
    return "row " + std::to_string(row) + " channel " + std::to_string(c) + " (head block " + std::to_string(c / dl) +
           ", d " + std::to_string(c % dl) + ")";
  };
}
Where at_state(int64_t dl, const std::vector<int>& heads) {
  return [=](size_t i) {
    const int64_t per = dl * dl, hi = static_cast<int64_t>(i) / per, rem = static_cast<int64_t>(i) % per;
    return "head " + std::to_string(heads[hi]) + " S[" + std::to_string(rem / dl) + "][" + std::to_string(rem % dl) +
           "]";
  };
}

// EXPECTs rel L2 ≤ tol; the message names the worst element (and the first non-finite one).
double expect_close(const std::vector<float>& got, const std::vector<float>& want, double tol, const std::string& what,
                    const Where& where) {
  EXPECT_EQ(got.size(), want.size()) << what;
  const size_t n = std::min(got.size(), want.size());
  const double rel = rel_l2(got.data(), want.data(), n);
  size_t worst = 0, first_bad = n;
  double wd = -1.0;
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(got[i])) {
      if (first_bad == n) first_bad = i;
      continue;
    }
    const double dd = std::fabs(static_cast<double>(got[i]) - want[i]);
    if (dd > wd) wd = dd, worst = i;
  }
  std::string bad;
  if (first_bad < n)
    bad = "; first non-finite at " + where(first_bad) + " (got " + std::to_string(got[first_bad]) + ", want " +
          std::to_string(want[first_bad]) + ")";
  EXPECT_LE(rel, tol) << what << ": rel L2 " << rel << ", max |diff| " << wd << " at " << where(worst) << " (got "
                      << got[worst] << ", want " << want[worst] << ")" << bad;
  return rel;
}

template <class T>
void expect_bits(const std::vector<T>& a, const std::vector<T>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  const size_t bad = bit_mismatches(a.data(), b.data(), a.size());
  size_t first = a.size();
  for (size_t i = 0; i < a.size() && first == a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(T)) != 0) first = i;
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << a.size() << " elements differ in their bits"
                     << (first < a.size() ? ", first at index " + std::to_string(first) + " (" +
                                                std::to_string(a[first]) + " vs " + std::to_string(b[first]) + ")"
                                          : std::string());
}

size_t count_nonfinite(const std::vector<float>& v) {
  size_t bad = 0;
  for (float x : v) bad += !std::isfinite(x);
  return bad;
}

// ---------------------------------------------------------------- the reference, composed as kda_layer does

struct Layer {
  std::vector<float> conv_w;   // [3Q][K]
  std::vector<float> dt_bias;  // [Q]
  std::vector<float> a_log;    // [H]
  std::vector<float> norm_w;   // [dl]
  std::optional<float> bound;  // λ
};

Layer make_layer(const Dims& d, bool bounded, uint64_t seed) {
  Layer L;
  L.conv_w = randn(static_cast<size_t>(d.C() * d.K), seed, 0.5f);
  L.dt_bias = randn(static_cast<size_t>(d.Q()), seed + 1, 1.0f);
  L.a_log = randu(static_cast<size_t>(d.H), seed + 2, 1.0f, 16.0f);
  for (float& x : L.a_log) x = std::log(x);
  L.norm_w = randn(static_cast<size_t>(d.dl), seed + 3, 0.2f, 1.0f);
  if (bounded) L.bound = -5.0f;
  return L;
}

// Approximately normal values (the sum of four uniforms from splitmix64, scaled to unit variance;
// no tails past 3.5σ): cheap enough for the tens of millions of inputs of a long real-width prefill.
std::vector<float> fast_randn(size_t n, uint64_t seed, float sd) {
  std::vector<float> v(n);
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull;
  for (float& x : v) {
    s += 0x9E3779B97F4A7C15ull;
    uint64_t z = s;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    const double u =
        static_cast<double>((z & 0xFFFF) + ((z >> 16) & 0xFFFF) + ((z >> 32) & 0xFFFF) + (z >> 48)) / 65536.0;
    x = static_cast<float>((u - 2.0) * 1.7320508075688772 * sd);
  }
  return v;
}

struct Raw {
  std::vector<float> z, r, bl, gate;  // [n][3Q], [n][Q] (no dt_bias), [n][H], [n][Q]
};
Raw make_raw(const Dims& d, int64_t n, uint64_t seed) {
  Raw w;
  w.z = fast_randn(static_cast<size_t>(n * d.C()), seed, 1.0f);
  w.r = fast_randn(static_cast<size_t>(n * d.Q()), seed + 1, 3.0f);
  w.bl = fast_randn(static_cast<size_t>(n * d.H), seed + 2, 1.0f);
  w.gate = fast_randn(static_cast<size_t>(n * d.Q()), seed + 3, 2.0f);
  return w;
}

// Per-token inputs of the recurrence: q, k normalised (q scaled), v; g; β.
struct Prepared {
  std::vector<float> qkv, g, beta;
};

// Gates, β and the q/k normalisation of one row in place (kda_layer's order).
void prepare_row(const Dims& d, const Layer& L, float* qkv, const float* r_raw, const float* bl, float* g,
                 float* beta) {
  std::vector<float> r(static_cast<size_t>(d.Q()));
  for (int64_t i = 0; i < d.Q(); ++i) r[i] = r_raw[i] + L.dt_bias[i];
  kda_forget_gate(r.data(), L.a_log.data(), d.H, d.dl, L.bound, g);
  for (int64_t h = 0; h < d.H; ++h) beta[h] = sigmoid(bl[h]);
  const float qscale = 1.0f / std::sqrt(static_cast<float>(d.dl));
  float* q = qkv;
  float* k = qkv + d.Q();
  for (int64_t h = 0; h < d.H; ++h) {
    l2_normalize(q + h * d.dl, d.dl, 1e-6f);
    l2_normalize(k + h * d.dl, d.dl, 1e-6f);
    for (int64_t i = 0; i < d.dl; ++i) q[h * d.dl + i] *= qscale;
  }
}

// Convolution (window in/out) then preparation, token by token.
Prepared prepare_ref(const Dims& d, const Layer& L, const Raw& raw, int64_t n, std::vector<float>& window) {
  Prepared p;
  p.qkv.resize(static_cast<size_t>(n * d.C()));
  p.g.resize(static_cast<size_t>(n * d.Q()));
  p.beta.resize(static_cast<size_t>(n * d.H));
  for (int64_t t = 0; t < n; ++t) {
    short_conv_step(window.data(), raw.z.data() + t * d.C(), L.conv_w.data(), d.C(), d.K, p.qkv.data() + t * d.C());
    prepare_row(d, L, p.qkv.data() + t * d.C(), raw.r.data() + t * d.Q(), raw.bl.data() + t * d.H,
                p.g.data() + t * d.Q(), p.beta.data() + t * d.H);
  }
  return p;
}

// kda_step token by token for the listed heads: S [H][dl][dl], o [n][Q] (other heads untouched).
void recurrence_ref(const Dims& d, const Prepared& p, int64_t n, const std::vector<int>& heads, std::vector<float>& S,
                    std::vector<float>& o) {
  for (int64_t t = 0; t < n; ++t) {
    const float* q = p.qkv.data() + t * d.C();
    for (int h : heads)
      kda_step(S.data() + h * d.dl * d.dl, q + h * d.dl, q + d.Q() + h * d.dl, q + 2 * d.Q() + h * d.dl,
               p.g.data() + t * d.Q() + h * d.dl, p.beta[t * d.H + h], d.dl, d.dl, o.data() + t * d.Q() + h * d.dl);
  }
}

// rms_norm(o_h)·w·σ(gate) for the listed heads of one row.
void gated_norm_row(const Dims& d, const Layer& L, const float* o, const float* gate, const std::vector<int>& heads,
                    float eps, float* y) {
  for (int h : heads) {
    rms_norm(o + h * d.dl, L.norm_w.data(), d.dl, eps, y + h * d.dl);
    for (int64_t i = 0; i < d.dl; ++i) y[h * d.dl + i] *= sigmoid(gate[h * d.dl + i]);
  }
}

// The listed heads' blocks of rows of a [rows][ld] array (block h at offset off + h·dl).
std::vector<float> head_cols(const std::vector<float>& x, int64_t rows, int64_t ld, int64_t off, int64_t dl,
                             const std::vector<int>& heads) {
  std::vector<float> y;
  y.reserve(static_cast<size_t>(rows * dl) * heads.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int h : heads) y.insert(y.end(), x.begin() + r * ld + off + h * dl, x.begin() + r * ld + off + (h + 1) * dl);
  return y;
}
std::vector<float> head_states(const std::vector<float>& S, int64_t dl, const std::vector<int>& heads) {
  std::vector<float> y;
  for (int h : heads) y.insert(y.end(), S.begin() + h * dl * dl, S.begin() + (h + 1) * dl * dl);
  return y;
}

std::vector<float> random_state(const Dims& d, int64_t slots, uint64_t seed) {
  return fast_randn(static_cast<size_t>(slots * d.H * d.dl * d.dl), seed, 0.5f);
}

class KdaTest : public test::GpuTest {};

// ---------------------------------------------------------------- 1. short convolution

struct ConvCase {
  Dims d;
  int64_t n;
  bool random_window;
  int64_t ld_pad;
};

TEST_F(KdaTest, ConvPrefillMatchesTokenLoopAndLeavesTheWindow) {
  std::vector<ConvCase> cases;
  for (int64_t K : {1, 2, 3, 4, 8})
    for (int64_t n : {1, 2, 3, 70, 130}) cases.push_back({{4, 16, K}, n, n != 130, n == 70 ? 4 : 0});
  for (int64_t n : {1, 2, 70, 130}) cases.push_back({kReal, n, n != 130, n == 70 ? 4 : 0});
  uint64_t seed = 100;
  for (const ConvCase& cc : cases) {
    const Dims& d = cc.d;
    const int64_t C = d.C(), W = d.K - 1, ld_z = C + cc.ld_pad, ld_out = C + 2 * cc.ld_pad;
    SCOPED_TRACE(d.str() + " n=" + std::to_string(cc.n) + (cc.random_window ? " (continuing)" : " (fresh)"));
    const std::vector<float> w = randn(static_cast<size_t>(C * d.K), ++seed, 0.5f);
    const std::vector<float> z = randn(static_cast<size_t>(cc.n * ld_z), ++seed, 1.0f);
    std::vector<float> window = cc.random_window ? randn(static_cast<size_t>(W * C), ++seed, 1.0f)
                                                 : std::vector<float>(static_cast<size_t>(W * C), 0.0f);
    std::vector<float> want(static_cast<size_t>(cc.n * ld_out), 0.0f), ref_window = window;
    std::vector<float> zt(static_cast<size_t>(C));
    for (int64_t t = 0; t < cc.n; ++t) {
      std::copy(z.begin() + t * ld_z, z.begin() + t * ld_z + C, zt.begin());
      short_conv_step(ref_window.data(), zt.data(), w.data(), C, d.K, want.data() + t * ld_out);
    }
    DevBuf<float> dz(z), dw(w), dwin(window), dout(want.size());
    kda_conv_prefill(dwin.get(), dz.get(), ld_z, cc.n, dw.get(), C, d.K, dout.get(), ld_out, nullptr);
    std::vector<float> got = dout.download();
    // Compare only the C written columns of each row.
    std::vector<float> g2, w2;
    for (int64_t t = 0; t < cc.n; ++t) {
      g2.insert(g2.end(), got.begin() + t * ld_out, got.begin() + t * ld_out + C);
      w2.insert(w2.end(), want.begin() + t * ld_out, want.begin() + t * ld_out + C);
    }
    expect_close(g2, w2, 1e-6, "conv output", at_row_channel(C, d.dl));
    if (W > 0) expect_bits(dwin.download(), ref_window, "window after the call");
  }
}

TEST_F(KdaTest, ConvPrefillInPiecesAndOneTokenEqualsDecodeBits) {
  for (const Dims& d : {kTiny, kReal}) {
    SCOPED_TRACE(d.str());
    const int64_t C = d.C(), W = d.K - 1, n = 70;
    const std::vector<float> w = randn(static_cast<size_t>(C * d.K), 7, 0.5f);
    const std::vector<float> z = randn(static_cast<size_t>(n * C), 8, 1.0f);
    const std::vector<float> win0 = randn(static_cast<size_t>(W * C), 9, 1.0f);
    DevBuf<float> dz(z), dw(w);
    // One call.
    DevBuf<float> win_a(win0), out_a(static_cast<size_t>(n * C));
    kda_conv_prefill(win_a.get(), dz.get(), C, n, dw.get(), C, d.K, out_a.get(), C, nullptr);
    // Pieces of 2, 1 and 67 tokens (any boundaries: the convolution has no chunking).
    DevBuf<float> win_b(win0), out_b(static_cast<size_t>(n * C));
    int64_t t = 0;
    for (int64_t piece : {2, 1, 67}) {
      kda_conv_prefill(win_b.get(), dz.get() + t * C, C, piece, dw.get(), C, d.K, out_b.get() + t * C, C, nullptr);
      t += piece;
    }
    expect_bits(out_b.download(), out_a.download(), "outputs, pieces vs one call");
    expect_bits(win_b.download(), win_a.download(), "window, pieces vs one call");
    // A one-token prefill and a decode row of the same window give the same bits.
    DevBuf<float> win_c(win0), out_c(static_cast<size_t>(C));
    kda_conv_prefill(win_c.get(), dz.get(), C, 1, dw.get(), C, d.K, out_c.get(), C, nullptr);
    DevBuf<float> pool(win0), out_d(static_cast<size_t>(C));
    DevBuf<int32_t> slot0(std::vector<int32_t>{0});
    kda_conv_decode(pool.get(), slot0.get(), dz.get(), C, 1, dw.get(), C, d.K, out_d.get(), C, nullptr);
    expect_bits(out_d.download(), out_c.download(), "decode row vs one-token prefill");
    expect_bits(pool.download(), win_c.download(), "window, decode vs one-token prefill");
  }
}

TEST_F(KdaTest, ConvDecodeMatchesStepWithShuffledSlotsAndIsBatchInvariant) {
  for (const Dims& d : {kTiny, kReal}) {
    SCOPED_TRACE(d.str());
    const int64_t C = d.C(), W = d.K - 1, slots = 8, ld_z = C + 4;
    const std::vector<int32_t> slot = {6, 1, -1, 3, 0, 5, 7, 2};  // row 2 is skipped
    const int64_t B = static_cast<int64_t>(slot.size());
    const std::vector<float> w = randn(static_cast<size_t>(C * d.K), 21, 0.5f);
    const std::vector<float> z = randn(static_cast<size_t>(B * ld_z), 22, 1.0f);
    const std::vector<float> pool0 = randn(static_cast<size_t>(slots * W * C), 23, 1.0f);
    std::vector<float> ref_pool = pool0, want(static_cast<size_t>(B * C), 0.0f);
    for (int64_t b = 0; b < B; ++b)
      if (slot[b] >= 0)
        short_conv_step(ref_pool.data() + slot[b] * W * C, z.data() + b * ld_z, w.data(), C, d.K, want.data() + b * C);
    DevBuf<float> dz(z), dw(w), dpool(pool0), dout(static_cast<size_t>(B * C));
    DevBuf<int32_t> dslot(slot);
    kda_conv_decode(dpool.get(), dslot.get(), dz.get(), ld_z, B, dw.get(), C, d.K, dout.get(), C, nullptr);
    const std::vector<float> got = dout.download();
    for (int64_t b = 0; b < B; ++b) {
      const std::vector<float> g(got.begin() + b * C, got.begin() + (b + 1) * C);
      if (slot[b] < 0) {
        EXPECT_EQ(count_nonfinite(g), static_cast<size_t>(C)) << "row " << b << " has slot −1 but was written";
        continue;
      }
      expect_close(g, std::vector<float>(want.begin() + b * C, want.begin() + (b + 1) * C), 1e-6,
                   "row " + std::to_string(b) + " (slot " + std::to_string(slot[b]) + ")", at_row_channel(C, d.dl));
    }
    const std::vector<float> pool_got = dpool.download();
    expect_bits(pool_got, ref_pool, "window pool (used slots shifted, the others untouched)");
    // Row 3 alone gives the bits it had among the other seven.
    DevBuf<float> dpool1(pool0), dout1(static_cast<size_t>(C));
    DevBuf<int32_t> dslot1(std::vector<int32_t>{slot[3]});
    kda_conv_decode(dpool1.get(), dslot1.get(), dz.get() + 3 * ld_z, ld_z, 1, dw.get(), C, d.K, dout1.get(), C,
                    nullptr);
    expect_bits(dout1.download(), std::vector<float>(got.begin() + 3 * C, got.begin() + 4 * C),
                "row 3 alone vs among others");
    const std::vector<float> p1 = dpool1.download();
    expect_bits(std::vector<float>(p1.begin() + slot[3] * W * C, p1.begin() + (slot[3] + 1) * W * C),
                std::vector<float>(pool_got.begin() + slot[3] * W * C, pool_got.begin() + (slot[3] + 1) * W * C),
                "row 3's window alone vs among others");
  }
}

// ---------------------------------------------------------------- 2. gates and q/k preparation

TEST_F(KdaTest, PrepareMatchesForgetGateSigmoidAndL2Normalize) {
  for (const Dims& d : {kTiny8, kTiny, kReal})
    for (bool bounded : {true, false})
      for (bool in_place : {false, true}) {
        SCOPED_TRACE(d.str() + (bounded ? " λ=−5" : " softplus") + (in_place ? " g over r, β over logits" : ""));
        const int64_t rows = 6, Q = d.Q(), H = d.H, ld_qkv = d.C() + 4, ld_r = Q + 8;
        const Layer L = make_layer(d, bounded, 31);
        const std::vector<float> qkv = randn(static_cast<size_t>(rows * ld_qkv), 32, 1.0f);
        std::vector<float> r = randn(static_cast<size_t>(rows * ld_r), 33, 3.0f);
        for (int64_t t = 0; t < rows; ++t) r[t * ld_r + 3] = t % 2 ? 30.0f : -30.0f;  // softplus past its threshold
        const std::vector<float> bl = randn(static_cast<size_t>(rows * H), 34, 1.0f);
        std::vector<float> want_qkv = qkv, want_g(static_cast<size_t>(rows * Q)),
                           want_beta(static_cast<size_t>(rows * H));
        for (int64_t t = 0; t < rows; ++t)
          prepare_row(d, L, want_qkv.data() + t * ld_qkv, r.data() + t * ld_r, bl.data() + t * H, want_g.data() + t * Q,
                      want_beta.data() + t * H);
        DevBuf<float> dqkv(qkv), dr(r), dbl(bl), ddt(L.dt_bias), dalog(L.a_log);
        DevBuf<float> dg(static_cast<size_t>(rows * Q)), dbeta(static_cast<size_t>(rows * H));
        float* g_out = in_place ? dr.get() : dg.get();
        float* b_out = in_place ? dbl.get() : dbeta.get();
        const int64_t ld_g = in_place ? ld_r : Q;
        kda_prepare(dqkv.get(), ld_qkv, dr.get(), ld_r, dbl.get(), H, rows, ddt.get(), dalog.get(), L.bound, d.shape(),
                    g_out, ld_g, b_out, H, nullptr);
        const std::vector<float> got_qkv = dqkv.download();
        const std::vector<float> got_g_raw = in_place ? dr.download() : dg.download();
        const std::vector<float> got_beta = in_place ? dbl.download() : dbeta.download();
        std::vector<float> got_g;
        for (int64_t t = 0; t < rows; ++t)
          got_g.insert(got_g.end(), got_g_raw.begin() + t * ld_g, got_g_raw.begin() + t * ld_g + Q);
        const std::vector<int> heads = all_heads(d);
        expect_close(head_cols(got_qkv, rows, ld_qkv, 0, d.dl, heads),
                     head_cols(want_qkv, rows, ld_qkv, 0, d.dl, heads), 1e-6, "q (normalised, scaled)",
                     at_row_channel(Q, d.dl));
        expect_close(head_cols(got_qkv, rows, ld_qkv, Q, d.dl, heads),
                     head_cols(want_qkv, rows, ld_qkv, Q, d.dl, heads), 1e-6, "k (normalised)",
                     at_row_channel(Q, d.dl));
        expect_bits(head_cols(got_qkv, rows, ld_qkv, 2 * Q, d.dl, heads),
                    head_cols(qkv, rows, ld_qkv, 2 * Q, d.dl, heads), "v (untouched)");
        expect_close(got_g, want_g, 1e-6, "forget gate g", at_row_channel(Q, d.dl));
        expect_close(got_beta, want_beta, 1e-6, "beta", at_row_channel(H, 1));
      }
}

// ---------------------------------------------------------------- 3a. decode step

TEST_F(KdaTest, DecodeStepMatchesKdaStepWithShuffledSlotsAndIsBatchInvariant) {
  for (const Dims& d : {kTiny8, kTiny, kReal})
    for (bool bounded : {true, false}) {
      SCOPED_TRACE(d.str() + (bounded ? " λ=−5" : " softplus"));
      const int64_t Q = d.Q(), H = d.H, slots = 9, per_slot = H * d.dl * d.dl;
      const std::vector<int32_t> slot = {7, 2, 5, -1, 0, 8, 3, 1};  // row 3 is skipped
      const int64_t B = static_cast<int64_t>(slot.size());
      const Layer L = make_layer(d, bounded, 41);
      const Raw raw = make_raw(d, B, 42);
      std::vector<float> window(static_cast<size_t>((d.K - 1) * d.C()), 0.0f);
      const Prepared p = prepare_ref(d, L, raw, B, window);  // B rows = B tokens of realistic inputs
      const std::vector<float> pool0 = random_state(d, slots, 43);
      std::vector<float> ref_pool = pool0, want(static_cast<size_t>(B * Q), 0.0f);
      for (int64_t b = 0; b < B; ++b) {
        if (slot[b] < 0) continue;
        const float* q = p.qkv.data() + b * d.C();
        for (int64_t h = 0; h < H; ++h)
          kda_step(ref_pool.data() + slot[b] * per_slot + h * d.dl * d.dl, q + h * d.dl, q + Q + h * d.dl,
                   q + 2 * Q + h * d.dl, p.g.data() + b * Q + h * d.dl, p.beta[b * H + h], d.dl, d.dl,
                   want.data() + b * Q + h * d.dl);
      }
      DevBuf<float> dpool(pool0), dqkv(p.qkv), dg(p.g), dbeta(p.beta), dout(static_cast<size_t>(B * Q));
      DevBuf<int32_t> dslot(slot);
      kda_decode_step(dpool.get(), dslot.get(), dqkv.get(), d.C(), dg.get(), Q, dbeta.get(), H, B, d.shape(),
                      dout.get(), Q, nullptr);
      const std::vector<float> got = dout.download(), pool_got = dpool.download();
      for (int64_t b = 0; b < B; ++b) {
        const std::vector<float> gb(got.begin() + b * Q, got.begin() + (b + 1) * Q);
        if (slot[b] < 0) {
          EXPECT_EQ(count_nonfinite(gb), static_cast<size_t>(Q)) << "row " << b << " has slot −1 but was written";
          continue;
        }
        const std::string tag = "row " + std::to_string(b) + " (slot " + std::to_string(slot[b]) + ")";
        expect_close(gb, std::vector<float>(want.begin() + b * Q, want.begin() + (b + 1) * Q), 1e-5, tag + " output",
                     at_row_channel(Q, d.dl));
        const auto s0 = pool_got.cbegin() + slot[b] * per_slot;
        const auto r0 = ref_pool.cbegin() + slot[b] * per_slot;
        expect_close(std::vector<float>(s0, s0 + per_slot), std::vector<float>(r0, r0 + per_slot), 1e-5, tag + " state",
                     at_state(d.dl, all_heads(d)));
      }
      // Slots 4 and 6 belong to no row: untouched.
      for (int64_t s : {4, 6})
        expect_bits(std::vector<float>(pool_got.begin() + s * per_slot, pool_got.begin() + (s + 1) * per_slot),
                    std::vector<float>(pool0.begin() + s * per_slot, pool0.begin() + (s + 1) * per_slot),
                    "unused slot " + std::to_string(s));
      // Row 4 alone gives the bits it had among the other seven (output and state).
      const int64_t b1 = 4, s1 = slot[b1];
      DevBuf<float> dpool1(pool0), dout1(static_cast<size_t>(Q));
      DevBuf<int32_t> dslot1(std::vector<int32_t>{static_cast<int32_t>(s1)});
      kda_decode_step(dpool1.get(), dslot1.get(), dqkv.get() + b1 * d.C(), d.C(), dg.get() + b1 * Q, Q,
                      dbeta.get() + b1 * H, H, 1, d.shape(), dout1.get(), Q, nullptr);
      expect_bits(dout1.download(), std::vector<float>(got.begin() + b1 * Q, got.begin() + (b1 + 1) * Q),
                  "row 4 alone vs among others: output");
      const std::vector<float> p1 = dpool1.download();
      expect_bits(std::vector<float>(p1.begin() + s1 * per_slot, p1.begin() + (s1 + 1) * per_slot),
                  std::vector<float>(pool_got.begin() + s1 * per_slot, pool_got.begin() + (s1 + 1) * per_slot),
                  "row 4 alone vs among others: state");
    }
}

// ---------------------------------------------------------------- 3b. chunked prefill

struct PrefillResult {
  std::vector<float> o, state;  // [n][Q], [H][dl][dl]
};

// The GPU prefill of prepared inputs from `state0` (qkv and g are copied: the call clobbers them).
PrefillResult gpu_prefill(const Dims& d, const Prepared& p, int64_t row0, int64_t t0, int64_t n,
                          const std::vector<float>& state0) {
  const int64_t Q = d.Q(), C = d.C(), H = d.H;
  DevBuf<float> dstate(state0);
  DevBuf<float> dqkv(std::vector<float>(p.qkv.begin() + row0 * C, p.qkv.begin() + (row0 + n) * C));
  DevBuf<float> dg(std::vector<float>(p.g.begin() + row0 * Q, p.g.begin() + (row0 + n) * Q));
  DevBuf<float> dbeta(std::vector<float>(p.beta.begin() + row0 * H, p.beta.begin() + (row0 + n) * H));
  DevBuf<float> dout(static_cast<size_t>(n * Q));
  DevBuf<float> ws((kda_chunked_prefill_workspace_bytes(t0, n, d.shape()) + 3) / 4);
  kda_chunked_prefill(dstate.get(), t0, n, dqkv.get(), C, dg.get(), Q, dbeta.get(), H, d.shape(), dout.get(), Q,
                      ws.get(), nullptr);
  return {n > 0 ? dout.download() : std::vector<float>{}, dstate.download()};
}

struct PrefillCheck {
  double out_rel = 0, state_rel = 0;
};

// One prefill call at (t0, n) against the token loop, from a zero state at t0 = 0 and a random
// one otherwise; the reference checks `heads`.
PrefillCheck check_prefill(const Dims& d, bool bounded, int64_t t0, int64_t n, const std::vector<int>& heads,
                           uint64_t seed) {
  const std::string tag =
      d.str() + (bounded ? " λ=−5" : " softplus") + " t0=" + std::to_string(t0) + " n=" + std::to_string(n);
  SCOPED_TRACE(tag);
  const Layer L = make_layer(d, bounded, seed);
  const Raw raw = make_raw(d, n, seed + 10);
  std::vector<float> window = randn(static_cast<size_t>((d.K - 1) * d.C()), seed + 20, 1.0f);
  const Prepared p = prepare_ref(d, L, raw, n, window);
  const std::vector<float> state0 =
      t0 == 0 ? std::vector<float>(static_cast<size_t>(d.H * d.dl * d.dl), 0.0f) : random_state(d, 1, seed + 30);
  std::vector<float> S = state0, o(static_cast<size_t>(n * d.Q()), 0.0f);
  recurrence_ref(d, p, n, heads, S, o);
  const PrefillResult got = gpu_prefill(d, p, 0, t0, n, state0);
  PrefillCheck r;
  r.out_rel = expect_close(head_cols(got.o, n, d.Q(), 0, d.dl, heads), head_cols(o, n, d.Q(), 0, d.dl, heads), 1e-5,
                           tag + ": outputs", at_row_channel(static_cast<int64_t>(heads.size()) * d.dl, d.dl));
  r.state_rel = expect_close(head_states(got.state, d.dl, heads), head_states(S, d.dl, heads), 1e-5,
                             tag + ": final state", at_state(d.dl, heads));
  EXPECT_EQ(count_nonfinite(got.o), 0u) << tag << ": non-finite outputs (heads not checked included)";
  EXPECT_EQ(count_nonfinite(got.state), 0u) << tag << ": non-finite state (heads not checked included)";
  return r;
}

void run_prefill_matrix(const Dims& d, bool bounded, const std::vector<std::pair<int64_t, int64_t>>& cases,
                        int check_heads) {
  PrefillCheck worst;
  uint64_t seed = 500 + d.dl + (bounded ? 1 : 0);
  for (const auto& [t0, n] : cases) {
    const PrefillCheck c = check_prefill(d, bounded, t0, n, spread_heads(d, check_heads), seed += 100);
    worst.out_rel = std::max(worst.out_rel, c.out_rel);
    worst.state_rel = std::max(worst.state_rel, c.state_rel);
  }
  std::printf("[ KDA      ] chunked prefill %s %s, %zu calls: max rel L2 outputs %.2e, state %.2e\n", d.str().c_str(),
              bounded ? "λ=−5" : "softplus", cases.size(), worst.out_rel, worst.state_rel);
}

std::vector<std::pair<int64_t, int64_t>> full_matrix() {
  std::vector<std::pair<int64_t, int64_t>> c;
  for (int64_t t0 : {0, 37, 64, 100})
    for (int64_t n : {1, 5, 63, 64, 65, 130, 300}) c.push_back({t0, n});
  return c;
}

TEST_F(KdaTest, ChunkedPrefillTinyMatchesTokenLoopBothGates) {
  for (bool bounded : {true, false}) run_prefill_matrix(kTiny, bounded, full_matrix(), 4);
}

TEST_F(KdaTest, ChunkedPrefillRealWidthsMatchesTokenLoopLowerBound) {
  run_prefill_matrix(kReal, true, {{0, 64}, {37, 130}, {100, 300}, {64, 65}, {37, 1}, {0, 5}, {64, 63}}, 12);
}

TEST_F(KdaTest, ChunkedPrefillRealWidthsMatchesTokenLoopSoftplus) {
  run_prefill_matrix(kReal, false, {{0, 65}, {37, 130}, {100, 300}, {64, 64}, {100, 1}, {37, 5}, {0, 63}}, 12);
}

TEST_F(KdaTest, ChunkedPrefillOtherHeadSizes) {
  for (int64_t dl : {32, 64})
    for (bool bounded : {true, false})
      run_prefill_matrix({3, dl, 4}, bounded, {{0, 130}, {37, 100}, {64, 1}, {100, 64}}, 3);
}

// The approximate exponential for the decay factors (kda_fast_exp): the same bounds against the
// token loop, short and long (2048 tokens, where most factors underflow), both gates.
TEST_F(KdaTest, ChunkedPrefillFastExpMatchesTokenLoop) {
  set_kda_fast_exp(2);
  run_prefill_matrix(kReal, true, {{0, 64}, {37, 130}, {100, 300}, {0, 2048}}, 6);
  run_prefill_matrix(kReal, false, {{0, 65}, {37, 130}, {64, 1}, {0, 2048}}, 6);
  run_prefill_matrix(kTiny, true, full_matrix(), 4);
  set_kda_fast_exp(1);
}

// 2048 tokens from zero: with λ = −5 (and more so with softplus) most channels decay by up to
// e^−5 per token, so e^{Γ} underflows to 0 within every chunk.
TEST_F(KdaTest, ChunkedPrefillLongRunWithUnderflowingDecaysLowerBound) {
  run_prefill_matrix(kReal, true, {{0, 2048}}, 4);
}
TEST_F(KdaTest, ChunkedPrefillLongRunWithUnderflowingDecaysSoftplus) {
  run_prefill_matrix(kReal, false, {{0, 2048}}, 4);
}

// Every token writes the same key with β ≈ 1 and almost no decay: (I + A) is then close to the
// all-ones lower triangle and U, W come from cancelling differences; the chunked form must stay
// as accurate as the token loop.
TEST_F(KdaTest, ChunkedPrefillRepeatedKeysStayAccurate) {
  for (const Dims& d : {kTiny, kReal}) {
    SCOPED_TRACE(d.str());
    const int64_t n = 130, Q = d.Q(), C = d.C(), H = d.H;
    const std::vector<int> heads = spread_heads(d, 4);
    Prepared p;
    p.qkv = fast_randn(static_cast<size_t>(n * C), 81, 1.0f);
    const std::vector<float> key = randn(static_cast<size_t>(2 * Q), 82, 1.0f);
    for (int64_t t = 0; t < n; ++t) {
      std::copy(key.begin(), key.end(), p.qkv.begin() + t * C);  // the same q and k for every token
      for (int64_t h = 0; h < H; ++h) {
        l2_normalize(p.qkv.data() + t * C + h * d.dl, d.dl, 1e-6f);
        l2_normalize(p.qkv.data() + t * C + Q + h * d.dl, d.dl, 1e-6f);
      }
    }
    p.g = randu(static_cast<size_t>(n * Q), 83, -1e-3f, 0.0f);
    p.beta.assign(static_cast<size_t>(n * H), sigmoid(10.0f));
    const std::vector<float> state0 = random_state(d, 1, 84);
    std::vector<float> S = state0, o(static_cast<size_t>(n * Q), 0.0f);
    recurrence_ref(d, p, n, heads, S, o);
    const PrefillResult got = gpu_prefill(d, p, 0, 37, n, state0);
    const int64_t hq = static_cast<int64_t>(heads.size()) * d.dl;
    expect_close(head_cols(got.o, n, Q, 0, d.dl, heads), head_cols(o, n, Q, 0, d.dl, heads), 1e-5, "outputs",
                 at_row_channel(hq, d.dl));
    expect_close(head_states(got.state, d.dl, heads), head_states(S, d.dl, heads), 1e-5, "final state",
                 at_state(d.dl, heads));
  }
}

struct Split {
  int64_t t0, n;
  std::vector<int64_t> cuts;  // absolute positions, multiples of 64
};

// One call vs calls cut at multiples of 64 (and the one call repeated): the same bits.
void check_split(const Dims& d, bool bounded, const Split& sp) {
  const std::string tag =
      d.str() + (bounded ? " λ=−5" : " softplus") + " t0=" + std::to_string(sp.t0) + " n=" + std::to_string(sp.n);
  SCOPED_TRACE(tag);
  const Layer L = make_layer(d, bounded, 900);
  const Raw raw = make_raw(d, sp.n, 901);
  std::vector<float> window(static_cast<size_t>((d.K - 1) * d.C()), 0.0f);
  const Prepared p = prepare_ref(d, L, raw, sp.n, window);
  const std::vector<float> state0 = random_state(d, 1, 902);
  const PrefillResult one = gpu_prefill(d, p, 0, sp.t0, sp.n, state0);
  std::vector<float> o_pieces, state = state0;
  int64_t pos = sp.t0;
  std::vector<int64_t> ends = sp.cuts;
  ends.push_back(sp.t0 + sp.n);
  for (int64_t end : ends) {
    const PrefillResult part = gpu_prefill(d, p, pos - sp.t0, pos, end - pos, state);
    o_pieces.insert(o_pieces.end(), part.o.begin(), part.o.end());
    state = part.state;
    pos = end;
  }
  expect_bits(o_pieces, one.o, tag + ": outputs, pieces vs one call");
  expect_bits(state, one.state, tag + ": final state, pieces vs one call");
  const PrefillResult again = gpu_prefill(d, p, 0, sp.t0, sp.n, state0);
  expect_bits(again.o, one.o, tag + ": outputs, repeated call");
  expect_bits(again.state, one.state, tag + ": state, repeated call");
}

TEST_F(KdaTest, ChunkedPrefillSplitAtMultiplesOf64IsBitIdentical) {
  const std::vector<Split> splits = {{37, 300, {64, 192}}, {0, 256, {64, 128, 192}}, {100, 200, {128}}, {63, 2, {64}}};
  for (const Dims& d : {kTiny, kReal})
    for (bool bounded : {true, false})
      for (const Split& sp : splits) check_split(d, bounded, sp);
}

TEST_F(KdaTest, ChunkedPrefillLongSplitIsBitIdentical) { check_split(kReal, true, {0, 2048, {640, 1024, 1088}}); }

TEST_F(KdaTest, ChunkedPrefillShapeErrorsThrow) {
  DevBuf<float> buf(1024);
  EXPECT_THROW(kda_chunked_prefill(buf.get(), 0, 4, buf.get(), 3 * 4 * 24, buf.get(), 4 * 24, buf.get(), 4,
                                   KdaShape{4, 24}, buf.get(), 4 * 24, buf.get(), nullptr),
               ft::Error);
  EXPECT_THROW(kda_chunked_prefill(buf.get(), 0, 4, buf.get(), 3 * 64 + 2, buf.get(), 64, buf.get(), 4, KdaShape{4, 16},
                                   buf.get(), 64, buf.get(), nullptr),
               ft::Error);
  EXPECT_THROW(kda_conv_prefill(buf.get(), buf.get(), 8, 1, buf.get(), 8, 9, buf.get(), 8, nullptr), ft::Error);
  // Head size 8 runs token by token, never chunked.
  EXPECT_THROW(kda_chunked_prefill(buf.get(), 0, 4, buf.get(), 3 * 4 * 8, buf.get(), 4 * 8, buf.get(), 4,
                                   KdaShape{4, 8}, buf.get(), 4 * 8, buf.get(), nullptr),
               ft::Error);
  EXPECT_FALSE(kda_chunked_head_dim(8));
}

// ---------------------------------------------------------------- 4. gated norm

TEST_F(KdaTest, GatedNormMatchesRmsNormTimesSigmoid) {
  for (const Dims& d : {kTiny8, kTiny, kReal})
    for (bool in_place : {false, true}) {
      SCOPED_TRACE(d.str() + (in_place ? " in place" : ""));
      const int64_t rows = 5, Q = d.Q(), ld_o = Q + 4, eps_rows = rows;
      const float eps = 1e-5f;
      const Layer L = make_layer(d, true, 61);
      std::vector<float> o = randn(static_cast<size_t>(rows * ld_o), 62, 0.3f);
      std::fill(o.begin() + ld_o + d.dl, o.begin() + ld_o + 2 * d.dl, 0.0f);  // row 1, head 1 is all zero
      const std::vector<float> gate = randn(static_cast<size_t>(rows * Q), 63, 2.0f);
      std::vector<float> want(static_cast<size_t>(rows * Q));
      for (int64_t t = 0; t < eps_rows; ++t)
        gated_norm_row(d, L, o.data() + t * ld_o, gate.data() + t * Q, all_heads(d), eps, want.data() + t * Q);
      DevBuf<float> dout(o), dgate(gate), dw(L.norm_w), dy(static_cast<size_t>(rows * Q));
      float* y = in_place ? dout.get() : dy.get();
      const int64_t ld_y = in_place ? ld_o : Q;
      kda_gated_norm(dout.get(), ld_o, dgate.get(), Q, dw.get(), rows, d.shape(), eps, y, ld_y, nullptr);
      const std::vector<float> raw = in_place ? dout.download() : dy.download();
      std::vector<float> got;
      for (int64_t t = 0; t < rows; ++t) got.insert(got.end(), raw.begin() + t * ld_y, raw.begin() + t * ld_y + Q);
      expect_close(got, want, 1e-6, "gated norm", at_row_channel(Q, d.dl));
    }
}

// ---------------------------------------------------------------- the pieces composed: prefill, continuation, decode

TEST_F(KdaTest, LayerPrefillContinuationAndDecodeMatchReferenceLoop) {
  for (const Dims& d : {kTiny, kReal})
    for (bool bounded : {true, false}) {
      SCOPED_TRACE(d.str() + (bounded ? " λ=−5" : " softplus"));
      const int64_t Q = d.Q(), C = d.C(), H = d.H, W = d.K - 1, slots = 3, slot = 1;
      const int64_t n1 = 100, n2 = 40, steps = 3, total = n1 + n2 + steps;
      const float eps = 1e-5f;
      const std::vector<int> heads = spread_heads(d, 8);
      const Layer L = make_layer(d, bounded, 71);
      const Raw raw = make_raw(d, total, 72);
      // Reference: the token loop of kda_layer's sequence mixing from a fresh sequence.
      std::vector<float> window(static_cast<size_t>(W * C), 0.0f), S(static_cast<size_t>(H * d.dl * d.dl), 0.0f);
      const Prepared p = prepare_ref(d, L, raw, total, window);
      std::vector<float> o(static_cast<size_t>(total * Q), 0.0f), want(static_cast<size_t>(total * Q), 0.0f);
      recurrence_ref(d, p, total, heads, S, o);
      for (int64_t t = 0; t < total; ++t)
        gated_norm_row(d, L, o.data() + t * Q, raw.gate.data() + t * Q, heads, eps, want.data() + t * Q);

      DevBuf<float> win_pool(std::vector<float>(static_cast<size_t>(slots * W * C), 0.0f));
      DevBuf<float> state_pool(std::vector<float>(static_cast<size_t>(slots * H * d.dl * d.dl), 0.0f));
      DevBuf<float> dz(raw.z), dr(raw.r), dbl(raw.bl), dgate(raw.gate), dw(L.conv_w), ddt(L.dt_bias), dalog(L.a_log),
          dnw(L.norm_w);
      DevBuf<float> zc(static_cast<size_t>(total * C)), g(static_cast<size_t>(total * Q)),
          beta(static_cast<size_t>(total * H)), out(static_cast<size_t>(total * Q)), y(static_cast<size_t>(total * Q));
      DevBuf<float> ws((kda_chunked_prefill_workspace_bytes(0, n1, d.shape()) + 3) / 4 + 64);
      float* const win = win_pool.get() + slot * W * C;
      float* const st = state_pool.get() + slot * H * d.dl * d.dl;
      // Two prefill calls: [0, n1) and [n1, n1 + n2) (the second starts inside a chunk).
      int64_t t0 = 0;
      for (int64_t n : {n1, n2}) {
        kda_conv_prefill(win, dz.get() + t0 * C, C, n, dw.get(), C, d.K, zc.get() + t0 * C, C, nullptr);
        kda_prepare(zc.get() + t0 * C, C, dr.get() + t0 * Q, Q, dbl.get() + t0 * H, H, n, ddt.get(), dalog.get(),
                    L.bound, d.shape(), g.get() + t0 * Q, Q, beta.get() + t0 * H, H, nullptr);
        ASSERT_LE(kda_chunked_prefill_workspace_bytes(t0, n, d.shape()), ws.size() * 4);
        kda_chunked_prefill(st, t0, n, zc.get() + t0 * C, C, g.get() + t0 * Q, Q, beta.get() + t0 * H, H, d.shape(),
                            out.get() + t0 * Q, Q, ws.get(), nullptr);
        kda_gated_norm(out.get() + t0 * Q, Q, dgate.get() + t0 * Q, Q, dnw.get(), n, d.shape(), eps, y.get() + t0 * Q,
                       Q, nullptr);
        t0 += n;
      }
      // Decode steps, one row each, through the slot pools.
      DevBuf<int32_t> dslot(std::vector<int32_t>{static_cast<int32_t>(slot)});
      for (int64_t s = 0; s < steps; ++s, ++t0) {
        kda_conv_decode(win_pool.get(), dslot.get(), dz.get() + t0 * C, C, 1, dw.get(), C, d.K, zc.get() + t0 * C, C,
                        nullptr);
        kda_prepare(zc.get() + t0 * C, C, dr.get() + t0 * Q, Q, dbl.get() + t0 * H, H, 1, ddt.get(), dalog.get(),
                    L.bound, d.shape(), g.get() + t0 * Q, Q, beta.get() + t0 * H, H, nullptr);
        kda_decode_step(state_pool.get(), dslot.get(), zc.get() + t0 * C, C, g.get() + t0 * Q, Q, beta.get() + t0 * H,
                        H, 1, d.shape(), out.get() + t0 * Q, Q, nullptr);
        kda_gated_norm(out.get() + t0 * Q, Q, dgate.get() + t0 * Q, Q, dnw.get(), 1, d.shape(), eps, y.get() + t0 * Q,
                       Q, nullptr);
      }
      const int64_t hq = static_cast<int64_t>(heads.size()) * d.dl;
      expect_close(head_cols(y.download(), total, Q, 0, d.dl, heads), head_cols(want, total, Q, 0, d.dl, heads), 1e-5,
                   "gated outputs of every token", at_row_channel(hq, d.dl));
      const std::vector<float> sp = state_pool.download();
      expect_close(head_states(std::vector<float>(sp.begin() + slot * H * d.dl * d.dl,
                                                  sp.begin() + (slot + 1) * H * d.dl * d.dl),
                               d.dl, heads),
                   head_states(S, d.dl, heads), 1e-5, "state after the last token", at_state(d.dl, heads));
      const std::vector<float> wp = win_pool.download();
      expect_bits(std::vector<float>(wp.begin() + slot * W * C, wp.begin() + (slot + 1) * W * C), window,
                  "conv window after the last token");
    }
}

}  // namespace
}  // namespace ft::cuda
