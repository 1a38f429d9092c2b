#pragma once
// A synthetic EXL3 expert segment for the expert-tier benchmark: the real model's 42 × 288 expert
// identities, each a full-size packed block (shared/exl3/expert_block.h) with random trellises,
// in the cpu-expert-worker's segment layout (shared/ipc/expert_segment.h), so the gpu-worker's
// tier attaches and serves it like a real one. The host rarely has RAM for all 114 GB: identities
// map onto a pool of as many distinct blocks as `pool_bytes` holds (identity i → block i mod n),
// the block table simply repeating offsets. Reads then see real addresses over a pool many times
// the CPU's caches; a VRAM cache still counts every identity separately.
#include <cstdint>
#include <string>

#include "shared/exl3/codebook.h"
#include "shared/model/config.h"

namespace ft::tiers {

struct SyntheticSegmentOptions {
  std::string name;            // /dev/shm/<name>; an existing one is replaced
  int K = 3;                   // bits per weight of every projection
  exl3::Codebook codebook = exl3::Codebook::Mul1;
  uint64_t pool_bytes = 0;     // distinct block bytes at most (0: one block per identity)
  int threads = 8;             // fill threads
  uint64_t seed = 1;
};

struct SyntheticSegmentInfo {
  uint64_t identities = 0, distinct_blocks = 0, block_bytes = 0, total_bytes = 0;
  double build_seconds = 0;
};

// Builds the segment for `c`'s MoE layers (every one EXL3 with the options' K and codebook).
// Throws ft::Error when the pool cannot hold one block or /dev/shm has no room.
SyntheticSegmentInfo build_synthetic_segment(const ModelConfig& c, const SyntheticSegmentOptions& o);

// The distinct block that identity (moe_index, expert) of a segment with `distinct` blocks reads.
inline uint64_t synthetic_block_of(int moe_index, int expert, int n_experts, uint64_t distinct) {
  return (static_cast<uint64_t>(moe_index) * static_cast<uint64_t>(n_experts) + static_cast<uint64_t>(expert)) % distinct;
}

}  // namespace ft::tiers
