#include "gpu-worker/backends/cuda/engine/sequence_pool.h"

#include <algorithm>

#include "gpu-worker/backends/cuda/core/cuda_check.h"
#include "shared/engine/engine.h"

namespace ft::cuda {

namespace {
int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
}  // namespace

uint64_t SequencePool::block_bytes(const ModelConfig& c, bool fp32) {
  const int64_t bt = kPoolsPerBlock * c.index_kpool;
  const uint64_t e = fp32 ? 4 : 2;  // bytes of a token entry
  uint64_t b = 0;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    if (!c.is_sparse(l)) continue;
    b += static_cast<uint64_t>(bt * c.kv_lora_rank) * e;
    if (c.has_indexer(l))
      b += static_cast<uint64_t>(bt * c.index_head_dim) * e * 2 + static_cast<uint64_t>(kPoolsPerBlock * c.index_head_dim) * 4;
  }
  return b;
}

uint64_t SequencePool::slot_bytes(const ModelConfig& c) {
  uint64_t b = 0;
  const int64_t H = c.linear_num_heads, dl = c.linear_head_dim, Q = c.linear_dim();
  for (int64_t l = 0; l < c.num_hidden_layers; ++l)
    if (!c.is_sparse(l)) b += static_cast<uint64_t>(H * dl * dl + (c.linear_conv_kernel_dim - 1) * 3 * Q) * 4;
  return b;
}

SequencePool::SequencePool(const ModelConfig& c, int slots, int64_t n_blocks, int64_t context_size, VramBudget& budget,
                           bool fp32)
    : cfg_(c), slots_(static_cast<size_t>(slots)), context_size_(context_size) {
  const uint64_t e = fp32 ? 4 : 2;
  geom_.latent = c.kv_lora_rank;
  geom_.index_dim = c.index_head_dim;
  geom_.kpool = static_cast<int>(c.index_kpool);
  geom_.max_blocks_per_seq = ceil_div(context_size, geom_.block_tokens());
  const int64_t H = c.linear_num_heads, dl = c.linear_head_dim, Q = c.linear_dim(), K = c.linear_conv_kernel_dim;
  state_stride_ = H * dl * dl;
  window_stride_ = std::max<int64_t>(K - 1, 0) * 3 * Q;
  kda_state_.assign(c.num_hidden_layers, nullptr);
  conv_window_.assign(c.num_hidden_layers, nullptr);
  sparse_.assign(c.num_hidden_layers, {});
  auto take = [&](uint64_t bytes, VramCategory cat, const std::string& what) {
    storage_.emplace_back(budget, bytes, cat, what);
    return storage_.back().get();
  };
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string n = "layer " + std::to_string(l);
    if (!c.is_sparse(l)) {
      kda_state_[l] = reinterpret_cast<float*>(
          take(static_cast<uint64_t>(slots * state_stride_) * 4, VramCategory::KdaState, n + " KDA states"));
      if (window_stride_ > 0)
        conv_window_[l] = reinterpret_cast<float*>(
            take(static_cast<uint64_t>(slots * window_stride_) * 4, VramCategory::KdaState, n + " conv windows"));
      continue;
    }
    has_sparse_ = true;
    if (n_blocks <= 0) continue;
    const int64_t bt = geom_.block_tokens();
    SparseCacheLayer& s = sparse_[l];
    void* lat = take(static_cast<uint64_t>(n_blocks * bt * c.kv_lora_rank) * e, VramCategory::KvCache, n + " latent cache");
    if (fp32) s.latent32 = static_cast<float*>(lat);
    else s.latent = static_cast<__half*>(lat);
    if (c.has_indexer(l)) {
      const uint64_t kb = static_cast<uint64_t>(n_blocks * bt * c.index_head_dim) * e;
      void* key = take(kb, VramCategory::KvCache, n + " indexer keys");
      void* gate = take(kb, VramCategory::KvCache, n + " indexer gates");
      if (fp32) {
        s.key32 = static_cast<float*>(key);
        s.gate32 = static_cast<float*>(gate);
      } else {
        s.key = static_cast<__half*>(key);
        s.gate = static_cast<__half*>(gate);
      }
      s.pool_keys = reinterpret_cast<float*>(take(static_cast<uint64_t>(n_blocks * kPoolsPerBlock * c.index_head_dim) * 4,
                                                  VramCategory::KvCache, n + " pool keys"));
    }
  }
  if (!has_sparse_) n_blocks = 0;
  total_blocks_ = n_blocks;
  for (int64_t b = n_blocks - 1; b >= 0; --b) free_.push_back(static_cast<int32_t>(b));
  unreserved_ = n_blocks;
  const int64_t cols = std::max<int64_t>(geom_.max_blocks_per_seq, 1);
  table_h_.assign(static_cast<size_t>(slots * cols), 0);
  table_d_ = DeviceArray<int32_t>(budget, table_h_.size(), VramCategory::KvCache, "block tables");
  FT_CUDA_CHECK(cudaMemset(table_d_.get(), 0, table_d_.bytes()));
}

int64_t SequencePool::max_tokens_per_sequence() const {
  if (!has_sparse_) return context_size_;
  return std::min(context_size_, total_blocks_ * geom_.block_tokens());
}

int SequencePool::open(int64_t max_tokens, cudaStream_t stream) {
  if (max_tokens > max_tokens_per_sequence())
    throw EngineFull("a sequence of " + std::to_string(max_tokens) + " tokens does not fit (at most " +
                     std::to_string(max_tokens_per_sequence()) + " tokens per sequence on this worker)");
  const int64_t need = has_sparse_ ? ceil_div(std::max<int64_t>(max_tokens, 1), geom_.block_tokens()) : 0;
  int slot = -1;
  for (size_t i = 0; i < slots_.size(); ++i)
    if (!slots_[i].open) {
      slot = static_cast<int>(i);
      break;
    }
  if (slot < 0) throw EngineFull("all " + std::to_string(slots_.size()) + " sequence slots are in use");
  if (need > unreserved_)
    throw EngineFull("the KV cache has room for " + std::to_string(unreserved_ * geom_.block_tokens()) +
                     " more tokens now; this sequence may need " + std::to_string(max_tokens));
  Slot& s = slots_[slot];
  s.open = true;
  s.length = 0;
  s.reserved = need;
  s.blocks.clear();
  unreserved_ -= need;
  for (int64_t l = 0; l < cfg_.num_hidden_layers; ++l) {
    if (kda_state_[l]) FT_CUDA_CHECK(cudaMemsetAsync(kda_state_of(l, slot), 0, state_stride_ * 4, stream));
    if (conv_window_[l]) FT_CUDA_CHECK(cudaMemsetAsync(conv_window_of(l, slot), 0, window_stride_ * 4, stream));
  }
  return slot;
}

void SequencePool::close(int slot) {
  Slot& s = slots_.at(static_cast<size_t>(slot));
  if (!s.open) return;
  for (int32_t b : s.blocks) free_.push_back(b);
  unreserved_ += s.reserved;
  s = Slot{};
}

void SequencePool::cover(int slot, int64_t n_tokens, cudaStream_t stream) {
  Slot& s = slots_.at(static_cast<size_t>(slot));
  if (!has_sparse_) return;
  const int64_t need = ceil_div(n_tokens, geom_.block_tokens());
  if (need > s.reserved)
    throw EngineFull("sequence in slot " + std::to_string(slot) + " grew past the " +
                     std::to_string(s.reserved * geom_.block_tokens()) + " tokens it reserved");
  if (static_cast<int64_t>(s.blocks.size()) >= need) return;
  const int64_t first = static_cast<int64_t>(s.blocks.size());
  while (static_cast<int64_t>(s.blocks.size()) < need) {
    s.blocks.push_back(free_.back());  // a reservation guarantees one is free
    free_.pop_back();
  }
  const int64_t cols = geom_.max_blocks_per_seq;
  int32_t* row = table_h_.data() + slot * cols;
  for (int64_t j = first; j < need; ++j) row[j] = s.blocks[static_cast<size_t>(j)];
  FT_CUDA_CHECK(cudaMemcpyAsync(table_d_.get() + slot * cols + first, row + first, (need - first) * sizeof(int32_t),
                                cudaMemcpyHostToDevice, stream));
}

}  // namespace ft::cuda
