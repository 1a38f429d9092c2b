#pragma once
// What crosses the expert tier boundary, whatever the transport (shm ring or gRPC): one MoE layer
// of one step, every token's MLP-site input with its routed experts and weights. The answer is
// out[t] = Σ_k w[t,k]·Expert_{ids[t,k]}(x[t]), summed in ascending expert id order.
#include <cstdint>
#include <string>
#include <vector>

namespace ft::ipc {

// ExpertBatch::flags
constexpr uint32_t kBatchF16Operands = 1u;  // EXL3 layers: round each projection's transformed input
                                            // as the GPU's kernels do (shared/exl3/operands.h F16Rows)
constexpr uint32_t kBatchKnownFlags = kBatchF16Operands;

struct ExpertBatch {
  uint32_t layer = 0;     // model layer index (not the index among MoE layers)
  uint32_t n_tokens = 0;
  uint32_t slots = 0;     // experts per token; unused slots hold id −1
  uint32_t hidden = 0;
  const float* x = nullptr;             // [n_tokens, hidden]
  const int32_t* expert_ids = nullptr;  // [n_tokens, slots]
  const float* weights = nullptr;       // [n_tokens, slots]
  uint32_t flags = 0;                   // kBatch*: 0 is the fp32 reference math
};

// What a client must know about the tier before sending batches.
struct TierInfo {
  uint32_t hidden = 0, intermediate = 0, n_layers = 0, n_experts = 0, top_k = 0;
  std::vector<uint32_t> moe_layers;
  std::string fingerprint;  // of the model folder the experts come from
  std::string segment;      // name of the expert segment
};

}  // namespace ft::ipc
