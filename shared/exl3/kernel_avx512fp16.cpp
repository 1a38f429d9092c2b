// AVX-512 + AVX512-FP16 path (Sapphire Rapids and later Xeons), MUL1 only: other codebooks run the
// Avx512 kernels. The integer part works on 32 word lanes, two steps per vector (PairFusedKernel),
// and the GPU's own fp16 fma rounds the value, so per 32 weights:
//   vpmultishiftqb                       both steps' 16-bit states, one per word
//   vpmullw, vpmulhuw, vpmullw, vpaddw   state · 0x83DCD12D mod 2^32 as low and high words
//   2 vpmaddubsw, vpaddw                 byte sum s (0 … 1020) per word
//   vfmadd213ph                          w/2 = RNE_f16((1774·s − 905216)/2^19), one rounding
//   vpmaddwd / vpsrad, 2 vpternlogd      w/2 of the low / high words as fp32 (integer rebuild)
//   2 vfmadd231ps                        accumulate (batch 1)
// 15 uops on the two 512-bit ports against 18 for the Avx512 path (see docs/perf.md).
#include <immintrin.h>

#include "shared/exl3/kernel_body.h"
#include "shared/exl3/kernels.h"

namespace ft::exl3::detail {

namespace {

struct V512h {
  using I = __m512i;
  using F = __m512;
  static constexpr int kPrefetchSteps = 16;

  static I load(const uint32_t* p) { return _mm512_load_si512(p); }
  static void prefetch(const uint32_t* p) { _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T0); }
  static I prev(I w) {
    return _mm512_permutexvar_epi32(_mm512_setr_epi32(7, 0, 1, 2, 3, 4, 5, 6, 15, 8, 9, 10, 11, 12, 13, 14), w);
  }
  template <int R>
  static I funnel(I a, I b) {  // (a << R) | (b >> (32 − R))
    return _mm512_shldi_epi32(a, b, R);
  }
  // Low word of each dword = (v >> S0) & 0xFFFF, high word = (v >> S1) & 0xFFFF, in one shuffle.
  template <int S0, int S1>
  static I window2(I v) {
    constexpr uint64_t d = uint64_t(S0) | uint64_t(S0 + 8) << 8 | uint64_t(S1) << 16 | uint64_t(S1 + 8) << 24;
    return _mm512_multishift_epi64_epi8(_mm512_set1_epi64(static_cast<long long>(d | (d + 0x20202020u) << 32)), v);
  }

  // Word lanes hold states; w0 gets the low words' weights, w1 the high words', each as w/2 in fp32.
  static void decode_pair(I st, F& w0, F& w1) {
    const I mlo = _mm512_set1_epi16(static_cast<short>(kMul1Mult & 0xFFFFu));
    const I mhi = _mm512_set1_epi16(static_cast<short>(kMul1Mult >> 16));
    const I lo = _mm512_mullo_epi16(st, mlo);
    const I hi = _mm512_add_epi16(_mm512_mulhi_epu16(st, mlo), _mm512_mullo_epi16(st, mhi));
    const I ones = _mm512_set1_epi8(1);
    const I s = _mm512_add_epi16(_mm512_maddubs_epi16(lo, ones), _mm512_maddubs_epi16(hi, ones));
    // s read as fp16 bits is the subnormal s·2^-24, which FP16 arithmetic takes exactly (no DAZ).
    // fma(s·2^-24, 0x7AEE = 56768 = 1774·2^5, 0xBEE8 = −1.7265625 = −905216/2^19) rounds the exact
    // (1774·s − 905216)/2^19 once: the GPU's value halved (all halves are normal fp16).
    const __m512h h = _mm512_fmadd_ph(_mm512_castsi512_ph(s), _mm512_castsi512_ph(_mm512_set1_epi16(0x7AEE)),
                                      _mm512_castsi512_ph(_mm512_set1_epi16(static_cast<short>(0xBEE8))));
    const I x = _mm512_castph_si512(h);
    // fp16 → fp32 for |v| < 2 (exponent field ≤ 15): sign to bit 31, exponent and mantissa to bits
    // 13-27, rebias by OR-ing 112 into the exponent. vpmaddwd by (8192, 0) is the low word << 13,
    // sign-extended; vpsrad by 3 is the high word << 13 (over junk that the mask clears).
    const I mask = _mm512_set1_epi32(static_cast<int>(0x8FFFE000u)), expo = _mm512_set1_epi32(0x38000000);
    w0 = _mm512_castsi512_ps(_mm512_ternarylogic_epi32(_mm512_madd_epi16(x, _mm512_set1_epi32(8192)), mask, expo, 0xEA));
    w1 = _mm512_castsi512_ps(_mm512_ternarylogic_epi32(_mm512_srai_epi32(x, 3), mask, expo, 0xEA));
  }

  static F fmadd(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  static F bcast(float x) { return _mm512_set1_ps(x); }
  static F zero() { return _mm512_setzero_ps(); }
  static F loadf(const F* p) { return _mm512_load_ps(reinterpret_cast<const float*>(p)); }
  static void storef(F* p, F v) { _mm512_store_ps(reinterpret_cast<float*>(p), v); }
  // Sums of w/2 · x: ×2 on the way out, ×1/2 on the way back in (exact; the same bits as the
  // unscaled sums of the Avx512 path unless a product or partial sum is below 2^-125).
  static F load_acc(const float* z, int h) {
    const F v =
        _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_loadu_ps(z + h * 8)), _mm256_loadu_ps(z + 16 + h * 8), 1);
    return _mm512_mul_ps(v, _mm512_set1_ps(0.5f));
  }
  static void store_acc(float* z, int h, F acc) {
    acc = _mm512_add_ps(acc, acc);
    _mm256_storeu_ps(z + h * 8, _mm512_castps512_ps256(acc));
    _mm256_storeu_ps(z + 16 + h * 8, _mm512_extractf32x8_ps(acc, 1));
  }
};

template <int K, int NR>
void pair_block(const uint32_t* base, int64_t A, const float* xh, int64_t xs, float* z, int64_t zs) {
  PairFusedKernel<V512h, K, NR>::run(base, A, xh, xs,
                                     [&](int r, int h, __m512 acc) { V512h::store_acc(z + r * zs, h, acc); });
}

template <int K>
void run_pairs(const PackedProj& w, int64_t p0, int64_t npairs, const float* xh, int64_t xs, int n, float* z,
               int64_t zs) {
  const int64_t A = w.tile_rows();
  for (int64_t p = p0; p < p0 + npairs; ++p) {
    const uint32_t* base = w.pair(p);
    float* zp = z + (p - p0) * 32;
    if (n > 4) {
      panel_matmul_with<V512h, PairPanelDecoder<V512h, K>, K, 8>(base, A, xh, xs, n, zp, zs);
      continue;
    }
    for_row_blocks(n, [&]<int NR>(int r) { pair_block<K, NR>(base, A, xh + r * xs, xs, zp + r * zs, zs); });
  }
}

}  // namespace

void matmul_pairs_avx512fp16(const PackedProj& w, int64_t p0, int64_t npairs, const float* xh, int64_t xs, int n,
                             float* z, int64_t zs) {
  if (w.codebook != Codebook::Mul1) return matmul_pairs_avx512(w, p0, npairs, xh, xs, n, z, zs);
  with_k(w.K, [&]<int K>() { run_pairs<K>(w, p0, npairs, xh, xs, n, z, zs); });
}

void codebook_values_avx512fp16(Codebook cb, const uint32_t* states, int64_t n, float* out) {
  if (cb != Codebook::Mul1) return codebook_values_avx512(cb, states, n, out);
  alignas(64) uint16_t in[32];
  alignas(64) float res[2][16];
  for (int64_t i = 0; i < n; i += 32) {
    const int64_t m = n - i < 32 ? n - i : 32;
    for (int j = 0; j < 32; ++j) in[j] = j < m ? static_cast<uint16_t>(states[i + j]) : 0;
    __m512 w0, w1;
    V512h::decode_pair(_mm512_load_si512(in), w0, w1);
    _mm512_store_ps(res[0], _mm512_add_ps(w0, w0));
    _mm512_store_ps(res[1], _mm512_add_ps(w1, w1));
    for (int j = 0; j < m; ++j) out[i + j] = res[j & 1][j >> 1];
  }
}

}  // namespace ft::exl3::detail
