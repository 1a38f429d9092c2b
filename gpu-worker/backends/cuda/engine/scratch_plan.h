#pragma once
// How much per-layer scratch the forward pass takes for a step of `tokens` rows: the largest
// over the layer kinds of the model, counted exactly as forward.cpp takes it (each take is
// rounded up to 256 bytes by the arena).
#include <cstddef>
#include <cstdint>

#include "shared/model/config.h"

namespace ft::cuda {

struct ScratchNeeds {
  size_t kda = 0, mla = 0, dense_mlp = 0, moe = 0, mhc = 0;
  size_t max() const;
};

// Rows per pass of the MLA attention and indexer selection (their workspaces hold this many
// rows; longer steps run in passes).
constexpr int64_t kSparseRowsPerPass = 256;
// Rows per pass of MLA's per-row chain (queries → absorption → attention → values → o_proj):
// its wide buffers hold this many rows, not a whole prefill chunk.
constexpr int64_t kMlaRowsPerPass = 1024;

// dense_experts: the routed experts run through the dense grouped kernel (its workspace is taken
// only then).
// fp32: the engine runs fp32 precision (its dense experts take moe_dense_experts_f32's workspace).
// sorted_rows: the dense experts have tensor maps (ops/moe.h: the sorted-row prefill form's rows).
ScratchNeeds scratch_needs(const ModelConfig& c, int64_t tokens, int64_t max_pools, bool dense_experts = true,
                           bool fp32 = false, bool sorted_rows = false);

// Shapes the sparse kernels are called with (also used by forward.cpp).
struct MlaAttendShape;
struct IndexerShape;
MlaAttendShape mla_shape(const ModelConfig& c);
IndexerShape indexer_shape(const ModelConfig& c, int64_t max_pools);

}  // namespace ft::cuda
