#pragma once
// Routed-expert compute of the cpu-expert-worker: clamped SwiGLU experts
//   out[t] += Σ_k w_k · down_k( silu(min(gate_k·x_t, L)) ⊙ clamp(up_k·x_t, −L, L) )
// on packed EXL3 blocks (expert_block.h), all threads of the pool on one batch.
//
// Work is split into items of 128 output columns (one Hadamard block) per expert and projection,
// so an item computes its block's output transform on its own; the last of an expert's gate/up
// items of a block applies SwiGLU and the down projection's input transform to that block, and
// the last down item of a column block sums the experts' outputs for it in task order. Three
// pool jobs per batch: input transforms, gate/up, down.
#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "shared/exl3/exl3_linear.h"
#include "shared/exl3/kernels.h"
#include "shared/exl3/operands.h"
#include "shared/exl3/thread_pool.h"

namespace ft::exl3 {

// One expert of the batch and the rows of x it serves.
struct ExpertTask {
  const uint8_t* block = nullptr;   // packed expert (pack_expert_block), 64-byte aligned
  const int32_t* rows = nullptr;    // token rows of x, each in [0, T)
  const float* weights = nullptr;   // routing weight per row; nullptr means 1
  int n = 0;
};

class ExpertRunner {
 public:
  explicit ExpertRunner(ThreadPool& pool, float swiglu_limit = 10.0f, SimdPath path = best_simd_path());
  ~ExpertRunner();

  // x: [T][D] with D = the experts' hidden size; out: [T][D], overwritten: Σ over tasks (in task
  // order) of weight · expert(x[row]); rows no task names get 0 (with no tasks at all, out is left
  // alone: D is unknown). All tasks must share D and the intermediate size. One call at a time per
  // runner (and per pool); a row's result has the same bits whatever else is in the batch.
  // operands: how each projection's transformed input enters its matmul (operands.h); F16Rows
  // gives the GPU grouped kernel's sums up to accumulation order.
  void forward(const ExpertTask* tasks, int ntasks, const float* x, int64_t T, float* out,
               Operands operands = Operands::F32);

  SimdPath path() const { return path_; }

 private:
  struct Plan;
  ThreadPool& pool_;
  float limit_;
  SimdPath path_;
  std::unique_ptr<Plan> plan_;
};

// One expert on n rows (weight 1): out[n][D] = expert(x[n][D]).
void expert_forward(const uint8_t* block, const float* x, int n, float* out, ThreadPool& pool, float swiglu_limit,
                    SimdPath path = best_simd_path());

// Reference: the same expert from its three linears with forward_reference, for tests.
void expert_forward_reference(const Exl3Linear& gate, const Exl3Linear& up, const Exl3Linear& down, int64_t hidden,
                              int64_t inter, float swiglu_limit, const float* x, int n, float* out,
                              Operands operands = Operands::F32);

}  // namespace ft::exl3
