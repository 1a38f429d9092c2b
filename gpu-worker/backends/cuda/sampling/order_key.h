#pragma once
// Candidate order as integers: the sampler and the logprobs rank tokens by logit, highest first,
// ties to the lower id (shared/sampling). desc_key maps a float to a uint32 whose ascending order
// is the float's descending order (−0 and +0 are one value, as float comparison has them), and
// candidate_key appends the id, so "better candidate" is plain `<` on one unique uint64 and every
// selection is exact whatever order the threads meet the tokens in. A NaN logit sorts after
// every number (it is never the argmax and, having no softmax weight, never drawn).
#include <cstdint>
#include <cstring>

#include "gpu-worker/backends/cuda/sampling/philox.h"  // FT_HOST_DEVICE

namespace ft::cuda {

FT_HOST_DEVICE inline uint32_t float_bits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  uint32_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
#endif
}
FT_HOST_DEVICE inline float bits_float(uint32_t b) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(b);
#else
  float x;
  std::memcpy(&x, &b, sizeof x);
  return x;
#endif
}

// Ascending key = descending value: positives map below 0x80000000 (larger value, smaller key),
// negatives above it (more negative, larger key).
FT_HOST_DEVICE inline uint32_t desc_key(float x) {
  if (x != x) return 0xFFFFFFFFu;
  const uint32_t b = float_bits(x == 0.0f ? 0.0f : x);
  return (b & 0x80000000u) ? b : (~b & 0x7FFFFFFFu);
}
FT_HOST_DEVICE inline float desc_key_value(uint32_t k) { return bits_float((k & 0x80000000u) ? k : (~k & 0x7FFFFFFFu)); }

FT_HOST_DEVICE inline uint64_t candidate_key(uint32_t key, uint32_t id) { return (static_cast<uint64_t>(key) << 32) | id; }
FT_HOST_DEVICE inline uint32_t candidate_id(uint64_t ck) { return static_cast<uint32_t>(ck); }
FT_HOST_DEVICE inline float candidate_value(uint64_t ck) { return desc_key_value(static_cast<uint32_t>(ck >> 32)); }

}  // namespace ft::cuda
