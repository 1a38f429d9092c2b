#pragma once
// Computes expert batches from the segment on a thread pool. Whatever the transport (shm ring,
// gRPC), a batch ends here.
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cpu-expert-worker/dense_kernel.h"
#include "shared/core/fifo_mutex.h"
#include "shared/exl3/expert_forward.h"
#include "shared/exl3/kernels.h"
#include "shared/exl3/thread_pool.h"
#include "shared/ipc/expert_batch.h"
#include "shared/ipc/expert_segment.h"

namespace ft::cew {

class ExpertEngine {
 public:
  virtual ~ExpertEngine() = default;
  virtual const ipc::TierInfo& info() const = 0;
  // out: [n_tokens, hidden]. Throws ft::Error for a malformed batch (wrong layer, expert id out of
  // range, wrong hidden size). Safe to call from several threads (batches run one at a time, in
  // the order they arrive).
  virtual void compute(const ipc::ExpertBatch& b, float* out) = 0;
  virtual int threads() const = 0;
};

// out[t] = Σ_k w[t,k]·Expert_{ids[t,k]}(x[t]), the clamped SwiGLU of spec §3.4, accumulated per token
// in ascending expert id order exactly as shared/engine/local_experts.cpp does. Work is split by
// expert and output rows, never across a dot product, so a token's result is the same bits whatever
// else is in the batch. Dense layers run the kernels of dense_kernel.h; EXL3 layers the exl3 area's
// ExpertRunner on its packed blocks (tasks in ascending expert order, which is its summation order),
// with the GPU's fp16 operand rounding when the batch carries ipc::kBatchF16Operands (dense layers
// have no such mode: the flag does not change them).
class SegmentExperts : public ExpertEngine {
 public:
  // `threads` participants in the pool (the calling thread included).
  SegmentExperts(const ipc::ExpertSegment& seg, float swiglu_limit, int threads);
  ~SegmentExperts() override;

  const ipc::TierInfo& info() const override { return info_; }
  void compute(const ipc::ExpertBatch& b, float* out) override;
  int threads() const override { return pool_.size(); }

  // Which kernels run (for logs and benchmarks).
  std::string kernels() const;

 private:
  struct Pair {
    uint32_t token, expert, slot;
    float w;
  };
  struct Group {  // one expert's rows in the pair order
    uint32_t expert;
    int p0, n;
    const ipc::BlockDesc* block;
  };
  struct Item {
    int group;
    int64_t c0, c1;
  };

  void validate(const ipc::ExpertBatch& b) const;
  void plan(const ipc::ExpertBatch& b, int moe);
  void compute_dense(const ipc::ExpertBatch& b, float* out);
  void compute_exl3(const ipc::ExpertBatch& b, float* out);
  void up_phase(int item);
  void down_phase(int item);
  void project(const ipc::ProjDesc& pd, const uint8_t* blk, int64_t c0, int64_t c1, const float* x, int64_t xs,
               int n, float* y, int64_t ys);
  std::vector<Item> split(int64_t (*cols)(const ipc::BlockDesc&)) const;

  const ipc::ExpertSegment& seg_;
  ipc::TierInfo info_;
  float limit_;
  DenseSimd dense_simd_;
  exl3::SimdPath exl3_simd_;
  exl3::ThreadPool pool_;
  exl3::ExpertRunner runner_;
  FifoMutex mu_;  // batches one at a time, in arrival order whatever client sent them

  // Per-batch state (guarded by mu_), reused between batches.
  std::vector<Pair> pairs_;
  std::vector<Group> groups_;
  std::vector<Item> items_;
  std::vector<std::vector<int>> token_pairs_;
  int64_t xs_ = 0, gs_ = 0, ys_ = 0;  // row strides of the scratch matrices (multiples of 16 floats)
  std::vector<exl3::ExpertTask> tasks_;
  std::vector<int32_t> task_rows_;
  std::vector<float> task_weights_;
  struct Aligned {
    float* p = nullptr;
    size_t cap = 0;
    float* get(size_t n);
    ~Aligned();
  };
  Aligned X_, G_, U_, Y_;
  bool exl3_layer_ = false;
};

}  // namespace ft::cew
