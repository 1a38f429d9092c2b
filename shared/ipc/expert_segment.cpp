#include "shared/ipc/expert_segment.h"

#include <cstring>

#include "shared/core/error.h"

namespace ft::ipc {

const char* encoding_name(ProjEncoding e) {
  switch (e) {
    case ProjEncoding::F32: return "f32";
    case ProjEncoding::BF16: return "bf16";
    case ProjEncoding::F16: return "f16";
    case ProjEncoding::Exl3: return "exl3";
  }
  return "?";
}

ExpertSegment::ExpertSegment(ShmMapping m) : shm_(std::move(m)) {
  const SegmentHeader& h = header();
  moe_index_.assign(h.n_layers, -1);
  for (uint32_t i = 0; i < h.n_moe_layers && i < kSegmentMaxMoeLayers; ++i)
    if (h.moe_layers[i] < h.n_layers) moe_index_[h.moe_layers[i]] = static_cast<int>(i);
}

std::string segment_problem(const SegmentHeader& h, uint64_t mapped_size, const std::string& fingerprint) {
  if (mapped_size < sizeof(SegmentHeader)) return "too small to hold a header";
  if (std::memcmp(h.magic, kSegmentMagic, 8) != 0) return "not an expert segment (bad magic)";
  if (h.layout_version != kSegmentLayoutVersion)
    return "layout version " + std::to_string(h.layout_version) + ", this build uses " +
           std::to_string(kSegmentLayoutVersion);
  if (h.complete.load(std::memory_order_acquire) != 1) return "incomplete (its build was interrupted)";
  // A segment named by a path (hugetlbfs) is its size rounded up to the filesystem's page (at most
  // 1 GiB); a /dev/shm object is exactly its size. Smaller is a truncated segment.
  if (h.total_bytes > mapped_size || mapped_size - h.total_bytes >= (uint64_t{1} << 30))
    return "size " + std::to_string(mapped_size) + " differs from its header's " + std::to_string(h.total_bytes);
  const std::string fp(h.fingerprint, strnlen(h.fingerprint, sizeof h.fingerprint));
  if (!fingerprint.empty() && fp != fingerprint) return "made from another model (fingerprint " + fp + ")";
  if (h.n_moe_layers > kSegmentMaxMoeLayers ||
      h.table_offset + uint64_t{h.n_moe_layers} * h.n_experts * sizeof(BlockDesc) > h.total_bytes)
    return "corrupt block table";
  return "";
}

std::optional<ExpertSegment> ExpertSegment::attach(const std::string& name, const std::string& fingerprint,
                                                   std::string* why) {
  auto m = ShmMapping::open(name, false);
  if (!m) {
    if (why) *why = "no segment named " + name;
    return std::nullopt;
  }
  const std::string problem =
      segment_problem(*reinterpret_cast<const SegmentHeader*>(m->data()), m->size(), fingerprint);
  if (!problem.empty()) {
    if (why) *why = "segment " + name + ": " + problem;
    return std::nullopt;
  }
  return ExpertSegment(std::move(*m));
}

int ExpertSegment::moe_index(uint32_t layer) const {
  return layer < moe_index_.size() ? moe_index_[layer] : -1;
}

const BlockDesc& ExpertSegment::block(int moe_index, uint32_t expert) const {
  const SegmentHeader& h = header();
  const auto* table = reinterpret_cast<const BlockDesc*>(shm_.data() + h.table_offset);
  return table[static_cast<uint64_t>(moe_index) * h.n_experts + expert];
}

}  // namespace ft::ipc
