// AVX-512 path (F/BW/VL/DQ + VNNI + VBMI/VBMI2: Ice Lake, Sapphire Rapids, Zen 4 and later):
// one zmm covers the two tiles of a pair (lanes 0-7 and 8-15); up to 4 rows decode straight into
// register accumulators, more rows sweep a decoded panel in blocks of 8.
#include <immintrin.h>

#include "shared/exl3/kernel_body.h"
#include "shared/exl3/kernels.h"

namespace ft::exl3::detail {

namespace {

struct V512 {
  using I = __m512i;
  using F = __m512;
  static constexpr int kPrefetchSteps = 16;  // ~3 KB ahead at K = 3: covers DRAM latency with every core streaming

  static I load(const uint32_t* p) { return _mm512_load_si512(p); }
  static void prefetch(const uint32_t* p) { _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T0); }
  static I prev(I w) {
    return _mm512_permutexvar_epi32(_mm512_setr_epi32(7, 0, 1, 2, 3, 4, 5, 6, 15, 8, 9, 10, 11, 12, 13, 14), w);
  }
  static I mid(I a, I b) { return _mm512_shldi_epi32(a, b, 16); }  // (a << 16) | (b >> 16)
  // (v >> S) & 0xFFFF per dword in one shuffle-port op: each dword's two state bytes are picked
  // at bit offsets S and S + 8 from its qword, the other two bytes zeroed.
  template <int S>
  static I window(I v) {
    constexpr uint64_t c = uint64_t(S) | uint64_t(S + 8) << 8 | uint64_t(32 + S) << 32 | uint64_t(40 + S) << 40;
    return _mm512_maskz_multishift_epi64_epi8(0x3333333333333333ull, _mm512_set1_epi64(static_cast<long long>(c)), v);
  }

  // fp32 → nearest fp16 value, as fp32. Veltkamp's split with 2^13+1 keeps 11 significant bits;
  // on every value the codebooks can produce it equals RNE (checked exhaustively by the tests).
  static F round_f16(F v) {
    const F c = _mm512_mul_ps(v, _mm512_set1_ps(8193.0f));
    return _mm512_sub_ps(c, _mm512_sub_ps(c, v));
  }

  template <Codebook CB>
  static F decode(I st) {
    if constexpr (CB == Codebook::Mul1) {
      const I p = _mm512_mullo_epi32(st, _mm512_set1_epi32(static_cast<int>(kMul1Mult)));
      // Byte sum s added to the bits of 2^23, giving the float 2^23 + s; the fma then yields the
      // exact (1774·s − 905216)/2^18 (all operands and the result are exact in fp32).
      const I sm = _mm512_dpbusd_epi32(_mm512_set1_epi32(0x4B000000), p, _mm512_set1_epi32(0x01010101));
      const F v = _mm512_fmadd_ps(_mm512_castsi512_ps(sm), _mm512_set1_ps(1774.0f * 0x1p-18f),
                                  _mm512_set1_ps(-(905216.0f + 1774.0f * 0x1p23f) * 0x1p-18f));
      return round_f16(v);
    } else {
      I x = _mm512_mullo_epi32(st, _mm512_set1_epi32(static_cast<int>(CB == Codebook::Mcg ? kMcgMult : kInst3Mult)));
      if constexpr (CB == Codebook::Inst3) x = _mm512_add_epi32(x, _mm512_set1_epi32(static_cast<int>(kInst3Add)));
      return two_halves(x);
    }
  }

  // (x & 0x8FFF8FFF) ^ 0x3B603B60, then each fp16 half (normal, exponent 12..15) rebuilt as
  // fp32 with integer ops, summed exactly and rounded once.
  static F two_halves(I x) {
    const I mant = _mm512_set1_epi32(0x07FFE000), expo = _mm512_set1_epi32(0x38000000);
    const I sign = _mm512_set1_epi32(static_cast<int>(0x80000000u));
    x = _mm512_ternarylogic_epi32(x, _mm512_set1_epi32(static_cast<int>(0x8FFF8FFFu)), _mm512_set1_epi32(0x3B603B60),
                                  0x6A);  // (a & b) ^ c
    I lo = _mm512_ternarylogic_epi32(_mm512_slli_epi32(x, 13), mant, expo, 0xEA);  // (a & b) | c
    lo = _mm512_ternarylogic_epi32(lo, _mm512_slli_epi32(x, 16), sign, 0xF8);     // a | (b & c)
    I hi = _mm512_ternarylogic_epi32(_mm512_srli_epi32(x, 3), mant, expo, 0xEA);
    hi = _mm512_ternarylogic_epi32(hi, x, sign, 0xF8);
    return round_f16(_mm512_add_ps(_mm512_castsi512_ps(lo), _mm512_castsi512_ps(hi)));
  }

  static F fmadd(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  static F bcast(float x) { return _mm512_set1_ps(x); }
  static F zero() { return _mm512_setzero_ps(); }
  static F loadf(const F* p) { return _mm512_load_ps(reinterpret_cast<const float*>(p)); }
  static void storef(F* p, F v) { _mm512_store_ps(reinterpret_cast<float*>(p), v); }
  // Accumulator lanes 0-7 are columns h·8 … h·8+7 of the pair's first tile, lanes 8-15 those of
  // its second tile (16 columns further).
  static F load_acc(const float* z, int h) {
    return _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_loadu_ps(z + h * 8)), _mm256_loadu_ps(z + 16 + h * 8), 1);
  }
  static void store_acc(float* z, int h, F acc) {
    _mm256_storeu_ps(z + h * 8, _mm512_castps512_ps256(acc));
    _mm256_storeu_ps(z + 16 + h * 8, _mm512_extractf32x8_ps(acc, 1));
  }
};

template <int K, Codebook CB, int NR>
void pair_block(const uint32_t* base, int64_t A, const float* xh, int64_t xs, float* z, int64_t zs) {
  FusedKernel<V512, K, CB, NR>::run(base, A, xh, xs, [&](int r, int h, __m512 acc) { V512::store_acc(z + r * zs, h, acc); });
}

template <int K, Codebook CB>
void run_pairs(const PackedProj& w, int64_t p0, int64_t npairs, const float* xh, int64_t xs, int n, float* z,
               int64_t zs) {
  const int64_t A = w.tile_rows();
  for (int64_t p = p0; p < p0 + npairs; ++p) {
    const uint32_t* base = w.pair(p);
    float* zp = z + (p - p0) * 32;
    if (n > 4) {  // past 4 rows one decode per step and a sweep of the rows beat decoding per block
      panel_matmul<V512, K, CB, 8>(base, A, xh, xs, n, zp, zs);
      continue;
    }
    for_row_blocks(n, [&]<int NR>(int r) { pair_block<K, CB, NR>(base, A, xh + r * xs, xs, zp + r * zs, zs); });
  }
}

}  // namespace

void matmul_pairs_avx512(const PackedProj& w, int64_t p0, int64_t npairs, const float* xh, int64_t xs, int n, float* z,
                         int64_t zs) {
  with_k(w.K, [&]<int K>() {
    with_codebook(w.codebook, [&]<Codebook CB>() { run_pairs<K, CB>(w, p0, npairs, xh, xs, n, z, zs); });
  });
}

void codebook_values_avx512(Codebook cb, const uint32_t* states, int64_t n, float* out) {
  alignas(64) uint32_t in[16];
  alignas(64) float res[16];
  for (int64_t i = 0; i < n; i += 16) {
    const int64_t m = n - i < 16 ? n - i : 16;
    for (int j = 0; j < 16; ++j) in[j] = j < m ? states[i + j] & 0xFFFFu : 0;
    const __m512i st = _mm512_load_si512(in);
    with_codebook(cb, [&]<Codebook CB>() { _mm512_store_ps(res, V512::decode<CB>(st)); });
    for (int j = 0; j < m; ++j) out[i + j] = res[j];
  }
}

}  // namespace ft::exl3::detail
