#include "gpu-worker/backends/cuda/engine/expert_tier.h"

#include <algorithm>

#include "gpu-worker/backends/cuda/core/cuda_check.h"
#include "shared/core/error.h"

namespace ft::cuda {

namespace {
int moe_layers(const ModelConfig& c) {
  int n = 0;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) n += c.is_moe(l);
  return n;
}
}  // namespace

GpuExpertTier::GpuExpertTier(const ModelConfig& c, ipc::ExpertSegment seg, const ExpertTierOptions& o,
                             VramBudget& budget, cudaStream_t compute)
    : cfg_(c), seg_(std::move(seg)), o_(o), n_moe_(moe_layers(c)), E_(static_cast<int>(c.n_routed_experts)),
      TK_(static_cast<int>(c.num_experts_per_tok)), cache_(n_moe_, E_, 0) {
  const ipc::SegmentHeader& h = seg_.header();
  if (static_cast<int>(h.n_moe_layers) != n_moe_ || static_cast<int>(h.n_experts) != E_)
    throw Error("expert segment " + seg_.name() + " holds " + std::to_string(h.n_moe_layers) + " MoE layers × " +
                std::to_string(h.n_experts) + " experts; the model has " + std::to_string(n_moe_) + " × " +
                std::to_string(E_));
  moe_of_layer_.assign(static_cast<size_t>(c.num_hidden_layers), -1);
  int k = 0;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l)
    if (c.is_moe(l)) moe_of_layer_[l] = k++;
  uint64_t max_block = 0;
  for (int m = 0; m < n_moe_; ++m)
    for (int e = 0; e < E_; ++e) {
      const ipc::BlockDesc& b = seg_.block(m, static_cast<uint32_t>(e));
      if (b.format != static_cast<uint32_t>(ipc::BlockFormat::Exl3))
        throw Error("expert segment " + seg_.name() + ": layer " + std::to_string(b.layer) +
                    " holds dense experts; GPU reads from the segment need EXL3 blocks");
      max_block = std::max(max_block, b.bytes);
    }
  slot_bytes_ = (max_block + 4095) / 4096 * 4096;
  // Zero-copy: the whole segment, read-only, seen by the GPU at seg_dev_.
  seg_dev_ = exl3_map_host_experts(const_cast<uint8_t*>(seg_.data()), static_cast<size_t>(seg_.size()));
  table_ = DeviceArray<Exl3ExpertPtrs>(budget, static_cast<size_t>(n_moe_) * E_, VramCategory::ExpertCache,
                                       "expert tables");
  FT_CUDA_CHECK(cudaMallocHost(&table_h_, table_.bytes()));
  layers_.resize(static_cast<size_t>(n_moe_));
  for (int m = 0; m < n_moe_; ++m) {
    const uint8_t* first = seg_.block_data(seg_.block(m, 0));
    layers_[m] = exl3_moe_geometry(first, E_);
    for (int e = 0; e < E_; ++e) {
      const uint8_t* blk = seg_.block_data(seg_.block(m, static_cast<uint32_t>(e)));
      exl3_moe_check_block(layers_[m], blk, e);
      table_h_[m * E_ + e] = segment_entry(m, e);
    }
    layers_[m].table = table_.get() + m * E_;
  }
  FT_CUDA_CHECK(cudaMemcpy(table_.get(), table_h_, table_.bytes(), cudaMemcpyHostToDevice));
  const int slots = slot_bytes_ ? static_cast<int>(o.cache_bytes / slot_bytes_) : 0;
  cache_ = tiers::ExpertCache(n_moe_, E_, slots);
  if (slots > 0)
    slots_mem_ = DeviceArray<uint8_t>(budget, static_cast<size_t>(slots) * slot_bytes_, VramCategory::ExpertCache,
                                      "expert cache slots");
  size_t ws = 0;
  for (const Exl3MoeLayer& L : layers_) ws = std::max(ws, exl3_moe_workspace_bytes(L, o.max_tokens, TK_));
  ws_ = DeviceArray<uint8_t>(budget, ws, VramCategory::Workspace, "zero-copy expert workspace");
  exl3_moe_workspace_init(ws_.get(), ws, compute);
  FT_CUDA_CHECK(cudaMallocHost(&routes_h_, static_cast<size_t>(n_moe_) * o.max_tokens * TK_ * sizeof(int32_t)));
  FT_CUDA_CHECK(cudaStreamCreateWithFlags(&copy_, cudaStreamNonBlocking));
  FT_CUDA_CHECK(cudaEventCreateWithFlags(&tables_written_, cudaEventDisableTiming));
  FT_CUDA_CHECK(cudaStreamSynchronize(compute));
}

GpuExpertTier::~GpuExpertTier() {
  if (copy_) cudaStreamSynchronize(copy_);
  for (Pending& p : pending_) cudaEventDestroy(p.done);
  for (cudaEvent_t e : free_events_) cudaEventDestroy(e);
  if (tables_written_) cudaEventDestroy(tables_written_);
  if (copy_) cudaStreamDestroy(copy_);
  if (seg_dev_) cudaHostUnregister(const_cast<uint8_t*>(seg_.data()));
  if (routes_h_) cudaFreeHost(routes_h_);
  if (table_h_) cudaFreeHost(table_h_);
}

const Exl3MoeLayer& GpuExpertTier::layer(int64_t l) const { return layers_.at(static_cast<size_t>(moe_of_layer_.at(l))); }

int32_t* GpuExpertTier::route_buffer(int64_t l) {
  return routes_h_ + static_cast<int64_t>(moe_of_layer_.at(l)) * o_.max_tokens * TK_;
}

Exl3ExpertPtrs GpuExpertTier::segment_entry(int m, int e) const {
  const ipc::BlockDesc& b = seg_.block(m, static_cast<uint32_t>(e));
  return exl3_expert_ptrs(seg_.block_data(b), static_cast<const uint8_t*>(seg_dev_) + b.offset);
}

Exl3ExpertPtrs GpuExpertTier::slot_entry(int m, int e, int slot) const {
  const ipc::BlockDesc& b = seg_.block(m, static_cast<uint32_t>(e));
  return exl3_expert_ptrs(seg_.block_data(b), slots_mem_.get() + static_cast<uint64_t>(slot) * slot_bytes_);
}

void GpuExpertTier::write_entry(int m, int e, const Exl3ExpertPtrs& p, cudaStream_t s) {
  // The pinned mirror entry is rewritten only after a later step's synchronisation, so the copy
  // reads it intact.
  table_h_[m * E_ + e] = p;
  FT_CUDA_CHECK(cudaMemcpyAsync(table_.get() + m * E_ + e, table_h_ + m * E_ + e, sizeof(Exl3ExpertPtrs),
                                cudaMemcpyHostToDevice, s));
}

void GpuExpertTier::after_step(int64_t n, bool admit, cudaStream_t s) {
  // 1. Copies that finished: their experts now read from VRAM.
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (cudaEventQuery(it->done) == cudaSuccess) {
      if (cache_.owner(it->slot) == std::make_pair(it->moe, it->expert))
        write_entry(it->moe, it->expert, slot_entry(it->moe, it->expert, it->slot), s);
      free_events_.push_back(it->done);
      it = pending_.erase(it);
    } else {
      (void)cudaGetLastError();
      ++it;
    }
  }
  if (cache_.slots() == 0 || n <= 0) return;
  // 2. The policy sees what the step used; admissions are capped per step.
  cache_.begin_step(admit);
  struct Copy {
    int moe, expert, slot;
  };
  std::vector<Copy> copies;
  int budget = o_.admit_per_step;
  const int64_t picks = std::min<int64_t>(n, o_.max_tokens) * TK_;
  std::vector<int32_t> used;
  for (int m = 0; m < n_moe_; ++m) {
    const int32_t* r = routes_h_ + static_cast<int64_t>(m) * o_.max_tokens * TK_;
    used.assign(r, r + picks);
    std::sort(used.begin(), used.end());
    used.erase(std::unique(used.begin(), used.end()), used.end());
    for (int32_t e : used) {
      if (e < 0 || e >= E_) continue;
      if (cache_.lookup(m, e)) continue;
      if (budget <= 0) continue;
      std::pair<int, int> ev;
      const std::optional<int> slot = cache_.admit(m, e, &ev);
      if (!slot) continue;
      --budget;
      // The evicted expert reads from the segment again before its slot is overwritten; a copy
      // still in flight into this slot is superseded (its switch is dropped above by the owner check).
      if (ev.first >= 0) write_entry(ev.first, ev.second, segment_entry(ev.first, ev.second), s);
      copies.push_back({m, e, *slot});
    }
  }
  cache_.end_step();
  if (copies.empty()) return;
  // 3. Copies start once the table writes that release their slots are done.
  FT_CUDA_CHECK(cudaEventRecord(tables_written_, s));
  FT_CUDA_CHECK(cudaStreamWaitEvent(copy_, tables_written_, 0));
  for (const Copy& c : copies) {
    const ipc::BlockDesc& b = seg_.block(c.moe, static_cast<uint32_t>(c.expert));
    FT_CUDA_CHECK(cudaMemcpyAsync(slots_mem_.get() + static_cast<uint64_t>(c.slot) * slot_bytes_, seg_.block_data(b),
                                  b.bytes, cudaMemcpyHostToDevice, copy_));
    cudaEvent_t ev;
    if (!free_events_.empty()) {
      ev = free_events_.back();
      free_events_.pop_back();
    } else {
      FT_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    }
    FT_CUDA_CHECK(cudaEventRecord(ev, copy_));
    pending_.push_back({c.moe, c.expert, c.slot, ev});
    ++copied_;
  }
}

ExpertTierStats GpuExpertTier::stats() const {
  ExpertTierStats s;
  s.cache = cache_.totals();
  s.slots = cache_.slots();
  s.slot_bytes = slot_bytes_;
  s.pending = pending_.size();
  s.copied_blocks = copied_;
  return s;
}

}  // namespace ft::cuda
