#pragma once
// The expert segment: every routed expert of a model in one named POSIX shared-memory object,
// written once by the cpu-expert-worker and mapped by anyone on the host who needs the weights (the
// worker after a restart, a gpu-worker that registers it with CUDA for zero-copy reads).
//
//   [SegmentHeader, 4 KiB][BlockDesc table, n_moe_layers × n_experts, 4 KiB aligned][blocks…]
//
// One block per (MoE layer, expert), 4 KiB aligned (pages: cudaHostRegister, hugepage-friendly),
// holding gate, up and down next to each other. The block format tag says what a block is:
//  * Dense: the three weights exactly as on disk (F32/BF16/F16, row-major [out, in]), each 64-byte
//    aligned; ProjDesc gives encoding, shape and offset.
//  * Exl3: the exl3 area's packed expert block (shared/exl3/expert_block.h: its own header, the
//    three packed trellises, fp16 suh/svh), read by its kernels; ProjDesc mirrors that header.
// All experts of one MoE layer share a format.
//
// The header is valid only when `complete` == 1, written last by the builder; a segment whose
// magic, layout version or model fingerprint differ from what a worker expects is rebuilt.
#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "shared/ipc/shm.h"

namespace ft::ipc {

inline constexpr char kSegmentMagic[8] = {'F', 'T', 'E', 'X', 'P', 'S', 'E', 'G'};
inline constexpr uint32_t kSegmentLayoutVersion = 2;  // 2: EXL3 blocks in the exl3 area's layout
inline constexpr uint64_t kSegmentAlign = 4096;
inline constexpr uint32_t kSegmentMaxMoeLayers = 512;

enum class ProjEncoding : uint32_t { F32 = 0, BF16 = 1, F16 = 2, Exl3 = 3 };
enum class BlockFormat : uint32_t { Dense = 1, Exl3 = 2 };
enum ProjIndex : int { kGate = 0, kUp = 1, kDown = 2 };

const char* encoding_name(ProjEncoding e);

struct ProjDesc {
  uint32_t encoding;  // ProjEncoding
  uint32_t out, in;   // logical shape of the nn.Linear weight [out, in]
  // EXL3 only: bits per weight, codebook (shared/exl3/codebook.h), padded sizes.
  uint32_t exl3_k, exl3_codebook, in_p, out_p, reserved;
  uint64_t offset, bytes;           // weights (EXL3: packed trellis), from the block start
  uint64_t suh_offset, svh_offset;  // EXL3 only: fp16 [in_p] / [out_p], from the block start
};
static_assert(sizeof(ProjDesc) == 64);

struct BlockDesc {
  uint64_t offset, bytes;  // from the segment start
  uint32_t layer, expert;  // model layer index, expert id
  uint32_t format, reserved;
  ProjDesc proj[3];  // gate, up, down
};
static_assert(sizeof(BlockDesc) == 224);

struct SegmentHeader {
  char magic[8];
  uint32_t layout_version;
  uint32_t header_bytes;
  char fingerprint[96];
  uint64_t total_bytes, table_offset, data_offset, data_bytes;
  uint32_t hidden, intermediate, n_layers, n_experts, top_k, n_moe_layers;
  uint32_t moe_layers[kSegmentMaxMoeLayers];
  uint64_t build_id;        // random per build: the same id after a restart proves no reload
  uint64_t built_unix_ms;
  double build_seconds;
  std::atomic<uint32_t> builder_pid;
  std::atomic<uint32_t> complete;  // 1 once every block is written
};
static_assert(sizeof(SegmentHeader) <= kSegmentAlign);

// A mapped segment (read-only unless it is being built).
class ExpertSegment {
 public:
  ExpertSegment() = default;
  // Takes a mapping whose header is filled in (the table may still be in progress).
  explicit ExpertSegment(ShmMapping m);

  // Maps segment `name` read-only if it is complete and of this layout version (and of
  // `fingerprint` unless empty). nullopt with the reason in *why otherwise.
  static std::optional<ExpertSegment> attach(const std::string& name, const std::string& fingerprint,
                                             std::string* why = nullptr);

  const SegmentHeader& header() const { return *reinterpret_cast<const SegmentHeader*>(shm_.data()); }
  SegmentHeader& mutable_header() { return *reinterpret_cast<SegmentHeader*>(shm_.data()); }
  // Index among MoE layers of model layer `layer`, or −1.
  int moe_index(uint32_t layer) const;
  const BlockDesc& block(int moe_index, uint32_t expert) const;
  const uint8_t* block_data(const BlockDesc& b) const { return shm_.data() + b.offset; }
  const uint8_t* data() const { return shm_.data(); }
  uint8_t* mutable_data() { return shm_.data(); }
  uint64_t size() const { return shm_.size(); }
  const std::string& name() const { return shm_.name(); }
  bool valid() const { return shm_.valid(); }

 private:
  ShmMapping shm_;
  std::vector<int> moe_index_;  // by model layer
};

// Checks a header against this build's expectations; "" when it is usable.
std::string segment_problem(const SegmentHeader& h, uint64_t mapped_size, const std::string& fingerprint);

}  // namespace ft::ipc
