#include "shared/exl3/hadamard.h"

namespace ft::exl3 {

void hadamard128(float* v) {
  for (int w = 1; w < kHad; w *= 2)
    for (int i = 0; i < kHad; i += 2 * w)
      for (int j = i; j < i + w; ++j) {
        const float a = v[j], b = v[j + w];
        v[j] = a + b;
        v[j + w] = a - b;
      }
  for (int i = 0; i < kHad; ++i) v[i] *= kHadScale;
}

void hadamard_blocks(float* v, int64_t n) {
  for (int64_t i = 0; i < n; i += kHad) hadamard128(v + i);
}

}  // namespace ft::exl3
