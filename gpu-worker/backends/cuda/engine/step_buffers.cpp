#include "gpu-worker/backends/cuda/engine/step_buffers.h"

#include <algorithm>

#include "gpu-worker/backends/cuda/core/cuda_check.h"
#include "gpu-worker/backends/cuda/engine/scratch_plan.h"
#include "gpu-worker/backends/cuda/ops/mhc.h"

namespace ft::cuda {

namespace {

// The fp16 staging width: the widest dense linear input, and MLA's per-token rows of every
// head's query (NH·dn) and attended latent (NH·Rkv) — those only in fp16 precision (fp32 reads
// them as they are).
int64_t staging_cols(const DeviceModel& m) {
  const ModelConfig& c = m.cfg;
  int64_t w = m.max_linear_in;
  if (c.num_attention_heads > 0 && !m.fp32) {
    w = std::max(w, c.num_attention_heads * c.qk_nope_head_dim + 8);
    w = std::max(w, c.num_attention_heads * c.kv_lora_rank + 8);
  }
  return (w + 7) / 8 * 8;
}

struct Layout {
  size_t bytes = 0;
  size_t at(size_t n) {
    const size_t a = (bytes + 255) & ~size_t{255};
    bytes = a + n;
    return a;
  }
};

// The EXL3 kernels' workspaces: the largest any quantized linear / MoE layer needs.
size_t exl3_linear_ws(const DeviceModel& m, int64_t rows) {
  size_t b = 0;
  for (const Exl3LinearDev* L : m.exl3_linears) b = std::max(b, exl3_linear_workspace_bytes(*L, rows));
  return b;
}
size_t exl3_moe_ws(const DeviceModel& m, int64_t tokens) {
  size_t b = 0;
  for (const LayerGpu& L : m.layers)
    if (L.moe && L.moe->exl3_experts)
      b = std::max(b, exl3_moe_workspace_bytes(*L.moe->exl3_experts, tokens, static_cast<int>(m.cfg.num_experts_per_tok)));
  return b;
}

template <class F>
void lay_out(const DeviceModel& m, const StepLimits& lim, F&& put) {
  const ModelConfig& c = m.cfg;
  const int64_t T = lim.max_tokens, R = lim.max_logit_rows, D = c.hidden_size, HC = c.hc_mult;
  const int64_t nmix = mhc_nmix(HC), W = staging_cols(m);
  const int64_t rows16 = T * std::max<int64_t>(c.num_attention_heads, 1);  // per-(row, head) scales
  put("tokens", T * 4);
  put("slot", T * 4);
  put("pos", T * 4);
  put("logit_rows", R * 4);
  put("X", T * HC * D * 4);
  put("A", T * D * 4);
  put("O", T * D * 4);
  put("mix", T * nmix * 4);
  put("m_raw", T * nmix * 4);
  put("xh", std::max(T, R) * W * 2);
  put("xscale", std::max(rows16, R) * 4);
  put("sel_pools", T * std::max<int64_t>(c.index_pool_budget(), 1) * 4);
  put("sel_count", T * 4);
  put("h_final", R * D * 4);
  put("logits", R * c.vocab_size * 4);
  put("exl3_ws", static_cast<int64_t>(exl3_linear_ws(m, std::max(T, R))));
  put("exl3_moe_ws", static_cast<int64_t>(exl3_moe_ws(m, T)));
  const int64_t S = std::min(T, kSideRows);
  put("xh_side", S * W * 2);
  put("xscale_side", S * 4);
  put("exl3_ws_side", static_cast<int64_t>(exl3_linear_ws(m, S)));
  bool dense_experts = false, sorted_rows = false;
  for (const LayerGpu& L : m.layers) {
    dense_experts |= L.moe && L.moe->local_experts && !L.moe->exl3_experts;
    sorted_rows |= L.moe && L.moe->dense_expert_maps;
  }
  put("scratch", static_cast<int64_t>(scratch_needs(c, T, lim.max_pools, dense_experts, m.fp32, sorted_rows).max()));
}

}  // namespace

uint64_t step_buffer_bytes(const DeviceModel& m, const StepLimits& lim) {
  Layout l;
  lay_out(m, lim, [&](const char*, int64_t n) { l.at(static_cast<size_t>(n)); });
  return l.bytes;
}

void StepBuffers::allocate(const DeviceModel& m, const StepLimits& limits, VramBudget& budget) {
  lim = limits;
  mem_ = DeviceArray<uint8_t>(budget, step_buffer_bytes(m, lim), VramCategory::Workspace, "step buffers");
  uint8_t* base = mem_.get();
  Layout l;
  size_t scratch_at = 0, scratch_bytes = 0;
  size_t ws_at = 0, ws_bytes = 0, moe_at = 0, moe_bytes = 0, side_ws_at = 0, side_ws_bytes = 0;
  lay_out(m, lim, [&](const char* name, int64_t n) {
    const size_t at = l.at(static_cast<size_t>(n));
    void* p = base + at;
    const std::string s = name;
    if (s == "tokens") tokens = static_cast<int32_t*>(p);
    else if (s == "slot") slot = static_cast<int32_t*>(p);
    else if (s == "pos") pos = static_cast<int32_t*>(p);
    else if (s == "logit_rows") logit_rows = static_cast<int32_t*>(p);
    else if (s == "X") X = static_cast<float*>(p);
    else if (s == "A") A = static_cast<float*>(p);
    else if (s == "O") O = static_cast<float*>(p);
    else if (s == "mix") mix = static_cast<float*>(p);
    else if (s == "m_raw") m_raw = static_cast<float*>(p);
    else if (s == "xh") staging.xh = static_cast<__half*>(p);
    else if (s == "xscale") staging.scale = static_cast<float*>(p);
    else if (s == "sel_pools") sel_pools = static_cast<int32_t*>(p);
    else if (s == "sel_count") sel_count = static_cast<int32_t*>(p);
    else if (s == "h_final") h_final = static_cast<float*>(p);
    else if (s == "logits") logits = static_cast<float*>(p);
    else if (s == "scratch") scratch_at = at, scratch_bytes = static_cast<size_t>(n);
    else if (s == "exl3_ws") ws_at = at, ws_bytes = static_cast<size_t>(n);
    else if (s == "exl3_moe_ws") moe_at = at, moe_bytes = static_cast<size_t>(n);
    else if (s == "xh_side") side_staging.xh = static_cast<__half*>(p);
    else if (s == "xscale_side") side_staging.scale = static_cast<float*>(p);
    else if (s == "exl3_ws_side") side_ws_at = at, side_ws_bytes = static_cast<size_t>(n);
  });
  if (ws_bytes) {
    staging.exl3_ws = base + ws_at;
    exl3_linear_workspace_init(staging.exl3_ws, ws_bytes, nullptr);
  }
  if (side_ws_bytes) {
    side_staging.exl3_ws = base + side_ws_at;
    exl3_linear_workspace_init(side_staging.exl3_ws, side_ws_bytes, nullptr);
  }
  if (moe_bytes) {
    exl3_moe_ws = base + moe_at;
    exl3_moe_workspace_init(exl3_moe_ws, moe_bytes, nullptr);
  }
  FT_CUDA_CHECK(cudaDeviceSynchronize());  // the zeroing above ran on the legacy stream
  const int64_t W = staging_cols(m);
  staging.max_rows = std::max(lim.max_tokens, lim.max_logit_rows);
  staging.max_cols = W;
  side_staging.max_rows = std::min(lim.max_tokens, kSideRows);
  side_staging.max_cols = W;
  scratch.init(base + scratch_at, scratch_bytes);
}

}  // namespace ft::cuda
