#pragma once
// Fills the expert segment (format: shared/ipc/expert_segment.h) from a model folder, or
// re-attaches to the one a previous worker left when it is complete and made from the same model.
#include <atomic>
#include <cstdint>
#include <string>

#include "shared/ipc/expert_segment.h"
#include "shared/model/config.h"

namespace ft::cew {

// Shared with the gRPC Info answer while a build runs.
struct LoadProgress {
  std::atomic<uint64_t> done{0}, total{0};
};

struct SegmentOptions {
  std::string name = "flashtier-experts";
  int threads = 1;                             // copy / pack threads
  bool force_rebuild = false;
  const std::atomic<bool>* cancel = nullptr;  // set during a build: stop, remove the partial segment
  double progress_every_s = 1.0;               // progress log period
};

struct OpenedSegment {
  ipc::ExpertSegment segment;
  bool reattached = false;
  double seconds = 0;           // attach or build time
  uint64_t bytes_copied = 0;    // 0 after a re-attach
  std::string rebuild_reason;   // why an existing segment was not reused; "" when there was none
};

// Throws ft::Error naming the tensor for unusable expert weights (dtype, shape, missing tensor),
// when /dev/shm is too small, or when another live process is building the same segment.
OpenedSegment open_or_build_segment(const std::string& model_dir, const ModelConfig& cfg,
                                    const std::string& fingerprint, const SegmentOptions& opts,
                                    LoadProgress* progress = nullptr);

// Bytes the experts of `model_dir` take in a segment (for planning, and the progress total).
uint64_t segment_bytes(const std::string& model_dir, const ModelConfig& cfg);

}  // namespace ft::cew
