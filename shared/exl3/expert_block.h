#pragma once
// One routed expert (gate, up, down) as a single block of the cpu-expert-worker's shared-memory
// segment: a 4096-byte aligned block, the three packed trellises first (packed.h), then the fp16
// suh/svh vectors exactly as stored in the checkpoint. The kernels read the trellises front to
// back; the block is page-aligned for cudaHostRegister and holds no pointers, so any process may
// map it anywhere.
#include <cstdint>

#include "shared/exl3/codebook.h"
#include "shared/exl3/exl3_linear.h"
#include "shared/exl3/packed.h"
#include "shared/model/safetensors.h"

namespace ft::exl3 {

constexpr uint32_t kExpertBlockMagic = 0x33584546u;  // "FEX3"
constexpr uint32_t kExpertBlockVersion = 1;
constexpr uint64_t kExpertBlockAlign = 4096;
constexpr uint64_t kExpertHeaderBytes = 256;

enum ExpertProj : int { kGate = 0, kUp = 1, kDown = 2 };

struct ProjHeader {
  uint32_t K;
  uint32_t codebook;        // Codebook value
  uint64_t in_p, out_p;     // padded sizes
  uint64_t trellis_offset;  // bytes from the block start, 64-byte aligned
  uint64_t suh_offset;      // fp16 [in_p]
  uint64_t svh_offset;      // fp16 [out_p]
};

struct ExpertBlockHeader {
  uint32_t magic;
  uint32_t version;
  uint64_t hidden, inter;  // logical D and moe_intermediate
  uint64_t block_bytes;    // multiple of kExpertBlockAlign
  ProjHeader proj[3];      // gate, up, down
};
static_assert(sizeof(ExpertBlockHeader) <= kExpertHeaderBytes);

// What decides the block's size: widths and each projection's K and codebook.
struct ExpertGeometry {
  int64_t hidden = 0, inter = 0;
  int K[3] = {0, 0, 0};
  Codebook codebook[3] = {Codebook::Mul1, Codebook::Mul1, Codebook::Mul1};
};

ExpertBlockHeader plan_expert_block(const ExpertGeometry& g);

// Writes the block for (gate, up, down) into dst (plan_expert_block(...).block_bytes bytes,
// 64-byte aligned at least). Throws ft::Error naming the tensor when a shape does not fit the
// widths or a projection carries a bias (routed experts have none).
void pack_expert_block(const Exl3Linear& gate, const Exl3Linear& up, const Exl3Linear& down, int64_t hidden,
                       int64_t inter, uint8_t* dst);

// The on-disk names of an expert's projections (`model.language_model.` or `model.` prefix).
std::string expert_proj_name(const TensorStore& store, int64_t layer, int64_t expert, ExpertProj p);
// Geometry of (layer, expert) read from the tensor shapes and markers.
ExpertGeometry expert_geometry(const TensorStore& store, int64_t layer, int64_t expert, int64_t hidden, int64_t inter);
// Loads and packs (layer, expert) from the checkpoint.
void pack_expert_from_store(const TensorStore& store, int64_t layer, int64_t expert, int64_t hidden, int64_t inter,
                            uint8_t* dst);

// Typed access to a packed block. Throws ft::Error for a wrong magic or version.
struct ExpertView {
  const ExpertBlockHeader* header = nullptr;
  PackedProj proj[3];
  const uint16_t* suh[3] = {};
  const uint16_t* svh[3] = {};
};
ExpertView view_expert_block(const uint8_t* block);

}  // namespace ft::exl3
