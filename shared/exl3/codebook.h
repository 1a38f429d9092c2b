#pragma once
// EXL3 codebooks (spec exl3-format §5): a pure function from a 16-bit trellis state to an fp16
// weight. These scalar versions are the reference every SIMD decoder is tested against.
#include <cstdint>
#include <string>

namespace ft::exl3 {

enum class Codebook : uint8_t { Inst3 = 0, Mcg = 1, Mul1 = 2 };

// Marker values stored in `<name>.mcg` / `<name>.mul1` (int32 scalars). They double as the
// multipliers of the codebooks.
constexpr uint32_t kMcgMult = 0xCBAC1FEDu;
constexpr uint32_t kMul1Mult = 0x83DCD12Du;
constexpr uint32_t kInst3Mult = 89226354u;
constexpr uint32_t kInst3Add = 64248484u;

const char* codebook_name(Codebook cb);  // "3inst", "mcg", "mul1"

// fp16 bits of the codebook value of `state` (only the low 16 bits are used).
uint16_t codebook_value_f16(uint32_t state, Codebook cb);
float codebook_value(uint32_t state, Codebook cb);

// MUL1 value as a function of the byte sum s of state·kMul1Mult (0 … 1020). The GPU defines it as
// fp16 fma((1024+s), 0x1EEE, 0xC931), which equals RNE_f16((1774·s − 905216) / 2^18) exactly.
uint16_t mul1_from_bytesum_f16(uint32_t s);

}  // namespace ft::exl3
