#include "shared/exl3/codebook.h"

#include "shared/core/half.h"

namespace ft::exl3 {

const char* codebook_name(Codebook cb) {
  switch (cb) {
    case Codebook::Inst3: return "3inst";
    case Codebook::Mcg: return "mcg";
    case Codebook::Mul1: return "mul1";
  }
  return "?";
}

uint16_t mul1_from_bytesum_f16(uint32_t s) {
  // |1774·s − 905216| < 2^21, so the numerator and the scaled value are exact in fp32 and the
  // single RNE to fp16 reproduces the GPU's fp16 fma bit for bit.
  const int32_t num = 1774 * static_cast<int32_t>(s) - 905216;
  return f32_to_f16(static_cast<float>(num) * 0x1p-18f);
}

namespace {

// 3INST and MCG: two fp16 halves, both normal with magnitude in [0.125, 2); their fp32 sum is
// exact, so one RNE to fp16 equals CUDA's __hadd.
uint16_t two_halves_f16(uint32_t x) {
  x = (x & 0x8FFF8FFFu) ^ 0x3B603B60u;
  const float lo = f16_to_f32(static_cast<uint16_t>(x & 0xFFFFu));
  const float hi = f16_to_f32(static_cast<uint16_t>(x >> 16));
  return f32_to_f16(lo + hi);
}

}  // namespace

uint16_t codebook_value_f16(uint32_t state, Codebook cb) {
  const uint32_t s = state & 0xFFFFu;
  switch (cb) {
    case Codebook::Inst3: return two_halves_f16(s * kInst3Mult + kInst3Add);
    case Codebook::Mcg: return two_halves_f16(s * kMcgMult);
    case Codebook::Mul1: {
      const uint32_t x = s * kMul1Mult;
      return mul1_from_bytesum_f16((x & 0xFFu) + ((x >> 8) & 0xFFu) + ((x >> 16) & 0xFFu) + (x >> 24));
    }
  }
  return 0;
}

float codebook_value(uint32_t state, Codebook cb) { return f16_to_f32(codebook_value_f16(state, cb)); }

}  // namespace ft::exl3
