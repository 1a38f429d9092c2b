#pragma once
// The model's weights on the GPU, grouped by layer and op as the CUDA forward pass consumes them
// (the GPU twin of shared/engine/weights.h). Linears that read the same input are fused into one
// fp16 linear where every part is dense (their outputs land side by side in one row), so a layer
// runs few, wide matmuls; quantized (EXL3) parts run one by one into their columns.
#include <cuda_fp16.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gpu-worker/backends/cuda/core/vram.h"
#include "gpu-worker/backends/cuda/exl3/exl3_linear.h"
#include "gpu-worker/backends/cuda/exl3/moe.h"
#include "gpu-worker/backends/cuda/ops/embed.h"
#include "gpu-worker/backends/cuda/ops/linear.h"
#include "gpu-worker/backends/cuda/ops/mhc.h"
#include "gpu-worker/backends/cuda/ops/moe.h"
#include "gpu-worker/backends/cuda/ops/router.h"
#include "shared/engine/weights.h"

namespace ft::cuda {


// One linear in whichever form the checkpoint holds: quantized (EXL3), or dense as an fp16
// linear (fp16 precision) or an fp32 one (fp32 precision).
struct GpuLinear {
  int64_t out = 0, in = 0;
  LinearF16 dense;                        // when exl3 is null and !fp32
  LinearF32 exact;                        // when fp32
  bool fp32 = false;
  const Exl3LinearGpu* exl3 = nullptr;
};

// Linears over one input whose outputs are written side by side: part i fills columns
// [offset[i], offset[i] + parts[i].out) of a row `out` wide.
struct LinearGroup {
  int64_t in = 0, out = 0;
  std::vector<GpuLinear> parts;
  std::vector<int64_t> offset;
  bool all_dense() const;
  bool any_f16() const;  // a dense fp16 part (reads the fp16 staging)
  int64_t max_in_pad() const;  // fp16 staging width the dense parts need
};

struct KdaLayerGpu {
  // input → [q | k | v | f_a | b | g_a] (3Q + dl + H + dl columns)
  LinearGroup in;
  int64_t col_q = 0, col_fa = 0, col_b = 0, col_ga = 0;
  LinearGroup f_b, g_b;      // [Q, dl] each
  const float* conv = nullptr;     // [3Q, K]
  const float* dt_bias = nullptr;  // [Q]
  const float* a_log = nullptr;    // [H]
  const float* o_norm = nullptr;   // [dl]
  LinearGroup o;                   // [D, Q]
};

struct MlaLayerGpu {
  // input → [q_a | kv_a | wk | gate] (Rq + Rkv (+ ID + ID on own-indexer layers)), biases folded in
  LinearGroup in;
  int64_t col_kv = 0, col_wk = 0, col_gate = 0;
  const float* q_a_norm = nullptr;   // [Rq]
  const float* kv_a_norm = nullptr;  // [Rkv]
  // q_res → [q (NH·dqk) | qI (IH·ID)]
  LinearGroup q_b;
  int64_t col_qI = 0;
  // per-head absorption and value expansion from kv_b: W_kb,hᵀ [Rkv, dn] and W_vb,h [dv, Rkv]
  LinearF16 kb_t, vb;
  int64_t kb_t_stride = 0, vb_stride = 0;  // halves between heads
  std::vector<LinearF32> kb_heads, vb_heads;  // fp32 precision: per head, in place of kb_t / vb
  LinearGroup o;                           // [D, NH·dv] (+ bias)
  bool own_indexer = false;
  LinearF32 weights_proj;             // [IH, D] fp32 (ω)
  const float* k_norm_w = nullptr;    // [ID]
  const float* k_norm_b = nullptr;
  const float* ape = nullptr;         // [κ, ID]
};

struct MlpGpu {
  LinearGroup gate_up;  // [2I, D]: gate rows then up rows
  LinearGroup down;     // [D, I]
  int64_t inter = 0;
};

struct MoeLayerGpu {
  LinearF32 router;                       // [E, D] fp32
  const float* correction_bias = nullptr; // [E]
  MlpGpu shared;
  // Routed experts resident in VRAM (when the model's experts are loaded here): dense fp16, or
  // EXL3 expert blocks (the cpu-expert-worker's layout) read by the grouped EXL3 kernel.
  const DenseExpert* dense_experts = nullptr;       // device array [E] (fp16 precision)
  const DenseExpertMaps* dense_expert_maps = nullptr;  // [E], where the sorted-row prefill form runs
  const DenseExpertF32* dense_experts32 = nullptr;  // device array [E] (fp32 precision)
  std::optional<Exl3MoeLayer> exl3_experts;
  bool local_experts = false;
};

struct LayerGpu {
  MhcSite attn_site, ffn_site;
  LinearF32 attn_fn, ffn_fn;  // [NMIX, HC·D] fp32 (bf16 storage when exact)
  std::optional<KdaLayerGpu> kda;
  std::optional<MlaLayerGpu> mla;
  std::optional<MlpGpu> dense;
  std::optional<MoeLayerGpu> moe;
};

struct DeviceModel {
  ModelConfig cfg;
  // fp32 precision: every dense linear, MLA's per-head products and the dense routed experts in
  // fp32 (activations and FMAs), the sparse caches in fp32 — the reference engine's arithmetic,
  // so routing and sparse selections agree with it. Otherwise fp16 operands, fp32 accumulation.
  bool fp32 = false;
  EmbedTable embed;  // [V, D] in the checkpoint's precision (bf16 when exact, else fp32)
  const float* final_norm = nullptr;
  LinearGroup lm_head;  // [V, D]
  std::vector<LayerGpu> layers;
  int64_t max_linear_in = 0;  // widest input of any dense linear (fp16 staging columns)
  std::vector<const Exl3LinearDev*> exl3_linears;  // every quantized linear (workspace sizing)
  uint64_t bytes = 0;         // weight bytes on the GPU

  // Keeps every allocation alive.
  std::vector<DeviceArray<uint8_t>> storage;
  std::vector<std::unique_ptr<Exl3LinearGpu>> exl3_storage;
};

// Uploads `w` (the fp32 host weights; EXL3 linears kept quantized) to the GPU, every byte from
// `budget` (category Weights), for fp32 or fp16 precision (DeviceModel::fp32). Routed experts
// are uploaded when `w` holds them.
std::unique_ptr<DeviceModel> upload_model(const ModelWeights& w, VramBudget& budget, bool fp32 = false);

}  // namespace ft::cuda
