#pragma once
// Every device buffer one step uses, at fixed addresses for the engine's life (so decode steps
// can be captured into CUDA graphs and replayed): the step's row descriptors, the residual
// streams and sublayer activations of up to max_tokens rows, the fp16 staging of linear inputs,
// the selections handed from a full indexer layer to a shared one, the logits of up to
// max_logit_rows rows, and the per-layer scratch arena.
#include <cuda_fp16.h>

#include <cstdint>

#include "gpu-worker/backends/cuda/core/vram.h"
#include "gpu-worker/backends/cuda/engine/arena.h"
#include "gpu-worker/backends/cuda/engine/device_model.h"
#include "gpu-worker/backends/cuda/engine/linear_apply.h"
#include "shared/model/config.h"

namespace ft::cuda {

// Rows of the largest step whose independent launches run on a side stream (decode batches).
inline constexpr int64_t kSideRows = 32;

struct StepLimits {
  int64_t max_tokens = 0;      // rows of one step
  int64_t max_logit_rows = 0;  // rows whose logits one pass computes
  int64_t max_pools = 0;       // visible indexer pools of one row (context / κ)
};

struct StepBuffers {
  StepLimits lim;
  int32_t* tokens = nullptr;      // [T]
  int32_t* slot = nullptr;        // [T]
  int32_t* pos = nullptr;         // [T]
  int32_t* logit_rows = nullptr;  // [R]: token rows whose logits are computed
  float* X = nullptr;             // [T, HC, D]
  float* A = nullptr;             // [T, D]
  float* O = nullptr;             // [T, D]
  float* mix = nullptr;           // [T, NMIX]
  float* m_raw = nullptr;         // [T, NMIX]
  F16Staging staging;             // [T, W] halves + [T] scales
  // The side stream's own staging (side_stream.h), for steps of at most kSideRows rows: linears
  // running beside the main stream's must not share its fp16 input or EXL3 workspace.
  F16Staging side_staging;
  int32_t* sel_pools = nullptr;   // [T, Bp]
  int32_t* sel_count = nullptr;   // [T]
  // The last MoE layer's picks [rows][top_k] (scratch: valid until the next layer; layer probes).
  const int32_t* last_routes = nullptr;
  float* h_final = nullptr;       // [R, D]
  float* logits = nullptr;        // [R, V]
  void* exl3_moe_ws = nullptr;    // the grouped EXL3 experts' workspace (zeroed once)
  Arena scratch;

  // Allocates everything from `budget` (category Workspace).
  void allocate(const DeviceModel& m, const StepLimits& lim, VramBudget& budget);

 private:
  DeviceArray<uint8_t> mem_;
};

// Bytes allocate() takes for these limits (for planning the VRAM budget).
uint64_t step_buffer_bytes(const DeviceModel& m, const StepLimits& lim);

}  // namespace ft::cuda
