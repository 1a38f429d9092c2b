#include "gpu-worker/backends/cuda/engine/expert_tier.h"

#include <algorithm>
#include <iostream>

#include "gpu-worker/backends/cuda/core/cuda_check.h"
#include "shared/core/error.h"

namespace ft::cuda {

GpuExpertTier::GpuExpertTier(const ModelConfig& c, ipc::ExpertSegment seg, const ExpertTierOptions& o,
                             VramBudget& budget, cudaStream_t compute)
    : cfg_(c), seg_(std::move(seg)), o_(o), n_moe_(static_cast<int>(c.moe_layer_count())), E_(static_cast<int>(c.n_routed_experts)),
      TK_(static_cast<int>(c.num_experts_per_tok)), cache_(n_moe_, E_, 0) {
  // A throw part-way (a bad segment, no room for the slots, a CUDA error) must not leave the
  // segment registered or the streams and events alive: the destructor does not run then.
  try {
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
    table_h_ = PinnedArray<Exl3ExpertPtrs>(table_.size());
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
    FT_CUDA_CHECK(cudaMemcpy(table_.get(), table_h_.get(), table_.bytes(), cudaMemcpyHostToDevice));
    size_t ws = 0;
    for (const Exl3MoeLayer& L : layers_) ws = std::max(ws, exl3_moe_workspace_bytes(L, o.max_tokens, TK_));
    ws_ = DeviceArray<uint8_t>(budget, ws, VramCategory::Workspace, "zero-copy expert workspace");
    exl3_moe_workspace_init(ws_.get(), ws, compute);
    // Mapped: the tier split's stream writes a step's picks here itself (host_publish.h).
    routes_h_ = PinnedArray<int32_t>(static_cast<size_t>(n_moe_) * o.max_tokens * TK_, PinnedKind::Mapped);
    compute_ = compute;
    if (o.forced_routes) {
      forced_ = DeviceArray<int32_t>(budget, static_cast<size_t>(n_moe_) * o.max_tokens * TK_, VramCategory::Workspace,
                                     "forced routes");
      forced_h_ = PinnedArray<int32_t>(forced_.size());
    }
    // The cache takes what is left once the tier's own buffers are in (cache_bytes, or, when 0,
    // 90% of what the budget holds beyond keep_free — the engine's sequence states, full-context
    // KV cache and reserve), so the allocations after it always find their room.
    const uint64_t avail = budget.available();
    uint64_t cache_bytes = o.cache_bytes;
    if (cache_bytes == 0 && o.auto_cache) cache_bytes = avail > o.keep_free ? (avail - o.keep_free) / 10 * 9 : 0;
    if (avail < o.keep_free + cache_bytes) cache_bytes = avail > o.keep_free ? avail - o.keep_free : 0;
    const int slots = slot_bytes_ ? static_cast<int>(cache_bytes / slot_bytes_) : 0;
    cache_ = tiers::ExpertCache(n_moe_, E_, slots, o_.cache_policy);
    if (slots > 0)
      slots_mem_ = DeviceArray<uint8_t>(budget, static_cast<size_t>(slots) * slot_bytes_, VramCategory::ExpertCache,
                                        "expert cache slots");
    FT_CUDA_CHECK(cudaStreamCreateWithFlags(&copy_, cudaStreamNonBlocking));
    FT_CUDA_CHECK(cudaEventCreateWithFlags(&tables_written_, cudaEventDisableTiming));
    in_vram_.assign(static_cast<size_t>(n_moe_) * E_, 0);
    slot_copies_.assign(static_cast<size_t>(slots), 0);
    if (!o.warm_counts.empty() && slots > 0) {
      // Copied in now on the copy stream; each table entry switches to VRAM at the first step after
      // its copy is done, as an admission's does.
      const auto placed = cache_.warm_start(o.warm_counts);
      for (const auto& [slot, me] : placed) copy_in(me.first, me.second, slot);
      std::cerr << "expert cache: warm start from " << o.warm_source << ": " << placed.size() << " of " << slots
                << " slots" << std::endl;
    }
    // By default two layers' worth, so a chunk stages every expert of a layer it does not find in
    // VRAM: an expert left out is read zero-copy once per 32-row batch of its picks (many reads of
    // its bytes in a large chunk instead of one copy). At most three quarters of the cache (half
    // left ~255 slots per buffer at 24 GB, short of a layer's 288: docs/perf.md, session 12); the
    // other quarter keeps its experts through the prefill.
    staging_slots_ = o.staging_slots >= 0 ? std::min(o.staging_slots, slots) : std::min(2 * E_, slots / 4 * 3);
    // Decode steps (graph-captured, at most a few dozen rows) must never stage.
    o_.staging_min_rows = std::max<int64_t>(o_.staging_min_rows, 65);
    staging_slots_ -= staging_slots_ % 2;
    if (staging_slots_ > 0) {
      stage_h_ = PinnedArray<Exl3ExpertPtrs>(static_cast<size_t>(n_moe_) * E_);
      stage_table_ = DeviceArray<Exl3ExpertPtrs>(budget, static_cast<size_t>(2) * E_, VramCategory::ExpertCache,
                                                 "staging tables");
      stage_layers_ = layers_;
      for (int m = 0; m < n_moe_; ++m) stage_layers_[m].table = stage_table_.get() + (m % 2) * E_;
      for (int b = 0; b < 2; ++b) {
        FT_CUDA_CHECK(cudaEventCreateWithFlags(&stage_ready_[b], cudaEventDisableTiming));
        FT_CUDA_CHECK(cudaEventCreateWithFlags(&stage_free_[b], cudaEventDisableTiming));
      }
    }
    FT_CUDA_CHECK(cudaStreamSynchronize(compute));
  } catch (...) {
    release();
    throw;
  }
}

GpuExpertTier::~GpuExpertTier() { release(); }

void GpuExpertTier::release() noexcept {
  if (copy_) cudaStreamSynchronize(copy_);
  for (Pending& p : pending_) cudaEventDestroy(p.done);
  for (cudaEvent_t e : free_events_) cudaEventDestroy(e);
  if (tables_written_) cudaEventDestroy(tables_written_);
  for (int b = 0; b < 2; ++b) {
    if (stage_ready_[b]) cudaEventDestroy(stage_ready_[b]);
    if (stage_free_[b]) cudaEventDestroy(stage_free_[b]);
  }
  if (copy_) cudaStreamDestroy(copy_);
  if (seg_dev_) cudaHostUnregister(const_cast<uint8_t*>(seg_.data()));
  pending_.clear();
  free_events_.clear();
  tables_written_ = nullptr;
  stage_ready_[0] = stage_ready_[1] = stage_free_[0] = stage_free_[1] = nullptr;
  copy_ = nullptr;
  seg_dev_ = nullptr;
}

const Exl3MoeLayer& GpuExpertTier::layer(int64_t l) const { return layers_.at(static_cast<size_t>(moe_of_layer_.at(l))); }

int32_t* GpuExpertTier::route_buffer(int64_t l) {
  return routes_h_.get() + static_cast<int64_t>(moe_of_layer_.at(l)) * o_.max_tokens * TK_;
}

int32_t* GpuExpertTier::route_buffer_device(int64_t l) {
  return routes_h_.device() + static_cast<int64_t>(moe_of_layer_.at(l)) * o_.max_tokens * TK_;
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
  in_vram_[m * E_ + e] = p.trellis[0] != segment_entry(m, e).trellis[0];
  FT_CUDA_CHECK(cudaMemcpyAsync(table_.get() + m * E_ + e, table_h_.get() + m * E_ + e, sizeof(Exl3ExpertPtrs),
                                cudaMemcpyHostToDevice, s));
}

void GpuExpertTier::after_step(int64_t n, bool admit, cudaStream_t s) {
  // 1. Copies that finished: their experts now read from VRAM.
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (cudaEventQuery(it->done) == cudaSuccess) {
      if (cache_.owner(it->slot) == std::make_pair(it->moe, it->expert) &&
          it->seq == slot_copies_[static_cast<size_t>(it->slot)])
        write_entry(it->moe, it->expert, slot_entry(it->moe, it->expert, it->slot), s);
      free_events_.push_back(it->done);
      it = pending_.erase(it);
    } else {
      (void)cudaGetLastError();
      ++it;
    }
  }
  if (cache_.slots() == 0 || n <= 0) return;
  // 2. The policy sees what the step used; admissions are capped per step and go round the
  // layers (tiers::admit_step), so a budget smaller than the misses reaches every layer in turn.
  cache_.begin_step(admit);
  // Each layer's distinct experts, ascending: a mark per expert, not a sort of the picks (an
  // 8k-token chunk leaves 65,536 picks per layer; sorting them took ~100 ms of host time per
  // step, docs/perf.md session 17).
  const int64_t picks = std::min<int64_t>(n, o_.max_tokens) * TK_;
  std::vector<std::vector<int32_t>> used(static_cast<size_t>(n_moe_));
  std::vector<uint8_t> seen(static_cast<size_t>(E_));
  for (int m = 0; m < n_moe_; ++m) {
    const int32_t* r = routes_h_.get() + static_cast<int64_t>(m) * o_.max_tokens * TK_;
    std::fill(seen.begin(), seen.end(), uint8_t{0});
    for (int64_t i = 0; i < picks; ++i)
      if (r[i] >= 0 && r[i] < E_) seen[static_cast<size_t>(r[i])] = 1;
    std::vector<int32_t>& u = used[static_cast<size_t>(m)];
    for (int32_t e = 0; e < E_; ++e)
      if (seen[static_cast<size_t>(e)]) u.push_back(e);
  }
  const std::vector<tiers::Admission> admitted = tiers::admit_step(cache_, used, o_.admit_per_step, &admit_from_);
  cache_.end_step();
  // The evicted experts read from the segment again before their slots are overwritten; a copy
  // still in flight into such a slot is superseded (its switch is dropped above: not the slot's
  // latest copy).
  for (const tiers::Admission& a : admitted) {
    const auto [em, ee] = a.evicted;
    if (em >= 0) write_entry(em, ee, segment_entry(em, ee), s);
  }
  if (admitted.empty()) return;
  // 3. Copies start once the table writes that release their slots are done.
  FT_CUDA_CHECK(cudaEventRecord(tables_written_, s));
  FT_CUDA_CHECK(cudaStreamWaitEvent(copy_, tables_written_, 0));
  for (const tiers::Admission& a : admitted) copy_in(a.layer, a.expert, a.slot);
}

void GpuExpertTier::copy_in(int m, int e, int slot) {
  const ipc::BlockDesc& b = seg_.block(m, static_cast<uint32_t>(e));
  FT_CUDA_CHECK(cudaMemcpyAsync(slots_mem_.get() + static_cast<uint64_t>(slot) * slot_bytes_, seg_.block_data(b),
                                b.bytes, cudaMemcpyHostToDevice, copy_));
  cudaEvent_t ev;
  if (!free_events_.empty()) {
    ev = free_events_.back();
    free_events_.pop_back();
  } else {
    FT_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  }
  FT_CUDA_CHECK(cudaEventRecord(ev, copy_));
  pending_.push_back({m, e, slot, ++slot_copies_[static_cast<size_t>(slot)], ev});
  ++copied_;
}

void GpuExpertTier::begin_step(int64_t rows, cudaStream_t s) {
  staged_ = false;
  if (staging_slots_ == 0) return;
  const bool stage_this = rows >= o_.staging_min_rows;
  if (!stage_this) {
    if (cache_.lent() == 0) return;
    // Back from a prefill: the lent slots take their old experts again (copied in as admissions
    // are: the table switches once each copy is done).
    const int first = cache_.first_lent_slot();
    const auto back = cache_.give_back();
    FT_CUDA_CHECK(cudaEventRecord(tables_written_, s));
    FT_CUDA_CHECK(cudaStreamWaitEvent(copy_, tables_written_, 0));
    int slot = first;
    for (const auto& [m, e] : back) {
      while (slot < cache_.slots() && cache_.owner(slot).first >= 0) ++slot;
      if (slot >= cache_.slots() || !cache_.restore(slot, m, e)) break;
      copy_in(m, e, slot);
    }
    return;
  }
  if (cache_.lent() == 0) {
    // The lent slots' experts read from the segment again before staging overwrites them. A copy
    // still in flight into a lent slot precedes the staging copies on the same stream; it is
    // forgotten, so its completion can never switch a table entry to a slot staging reuses (or
    // that give_back later refills with the same expert under a new copy).
    for (const auto& [m, e] : cache_.lend(staging_slots_)) write_entry(m, e, segment_entry(m, e), s);
    for (auto it = pending_.begin(); it != pending_.end();) {
      if (it->slot >= cache_.first_lent_slot()) {
        free_events_.push_back(it->done);
        it = pending_.erase(it);
      } else {
        ++it;
      }
    }
    FT_CUDA_CHECK(cudaEventRecord(tables_written_, s));
    FT_CUDA_CHECK(cudaStreamWaitEvent(copy_, tables_written_, 0));
  }
  staged_ = true;
  ++staged_steps_;
  // The buffers are free once the previous staged step's kernels are done (stage_free_ events;
  // recorded by it, or never recorded: an unrecorded event counts as complete).
  stage(0);
  if (n_moe_ > 1) stage(1);
}

void GpuExpertTier::stage(int m) {
  const int b = m % 2, per = staging_slots_ / 2;
  const int first = cache_.first_lent_slot() + b * per;
  FT_CUDA_CHECK(cudaStreamWaitEvent(copy_, stage_free_[b], 0));
  Exl3ExpertPtrs* t = stage_h_.get() + static_cast<size_t>(m) * E_;
  int used = 0;
  for (int e = 0; e < E_; ++e) {
    t[e] = table_h_[m * E_ + e];
    if (in_vram_[m * E_ + e] || used >= per) continue;
    const ipc::BlockDesc& blk = seg_.block(m, static_cast<uint32_t>(e));
    uint8_t* dst = slots_mem_.get() + static_cast<uint64_t>(first + used) * slot_bytes_;
    FT_CUDA_CHECK(cudaMemcpyAsync(dst, seg_.block_data(blk), blk.bytes, cudaMemcpyHostToDevice, copy_));
    t[e] = exl3_expert_ptrs(seg_.block_data(blk), dst);
    ++used;
  }
  staged_blocks_ += static_cast<uint64_t>(used);
  // Each layer has its own pinned table, so enqueuing the next use of this buffer never rewrites
  // bytes a queued copy has yet to read.
  FT_CUDA_CHECK(cudaMemcpyAsync(stage_table_.get() + b * E_, t, static_cast<size_t>(E_) * sizeof(Exl3ExpertPtrs),
                                cudaMemcpyHostToDevice, copy_));
  FT_CUDA_CHECK(cudaEventRecord(stage_ready_[b], copy_));
}

const Exl3MoeLayer& GpuExpertTier::layer_for_step(int64_t l, cudaStream_t s) {
  if (!staged_) return layer(l);
  const int m = moe_of_layer_.at(static_cast<size_t>(l));
  FT_CUDA_CHECK(cudaStreamWaitEvent(s, stage_ready_[m % 2], 0));
  return stage_layers_[m];
}

void GpuExpertTier::layer_done(int64_t l, cudaStream_t s) {
  if (!staged_) return;
  const int m = moe_of_layer_.at(static_cast<size_t>(l));
  FT_CUDA_CHECK(cudaEventRecord(stage_free_[m % 2], s));
  if (m + 2 < n_moe_) stage(m + 2);
}

ExpertTierStats GpuExpertTier::stats() const {
  ExpertTierStats s;
  s.cache = cache_.totals();
  s.slots = cache_.slots();
  s.slot_bytes = slot_bytes_;
  s.pending = pending_.size();
  s.copied_blocks = copied_;
  s.staging_slots = staging_slots_;
  s.staged_steps = staged_steps_;
  s.staged_blocks = staged_blocks_;
  s.resident = static_cast<uint64_t>(std::count(in_vram_.begin(), in_vram_.end(), uint8_t{1}));
  return s;
}

void GpuExpertTier::set_forced_routes(const int32_t* host, int64_t rows) {
  if (!forced_.get()) throw Error("expert tier: routes are not forced (ExpertTierOptions::forced_routes)");
  if (rows < 1 || rows > o_.max_tokens)
    throw Error("expert tier: " + std::to_string(rows) + " forced rows, at most " + std::to_string(o_.max_tokens));
  for (int64_t i = 0; i < static_cast<int64_t>(n_moe_) * rows * TK_; ++i)
    if (host[i] < 0 || host[i] >= E_) throw Error("expert tier: forced route " + std::to_string(host[i]) + " out of range");
  // On the compute stream from pinned memory, so the next step's kernels read these routes. A
  // synchronous copy from pageable memory is no such guarantee: it may return before its DMA is
  // done, and the legacy stream it runs on does not order the engine's non-blocking stream: with
  // the cache's block copies queued on the copy engines, a step may start on the previous step's
  // routes (the likely cause of the real-width panel's cache-dependent logits, docs/perf.md
  // session 10). The staging is rewritten only between steps, and every step ends synchronised.
  const size_t n = static_cast<size_t>(rows * TK_), pitch = static_cast<size_t>(o_.max_tokens * TK_);
  for (int m = 0; m < n_moe_; ++m)
    std::copy(host + m * n, host + (m + 1) * n, forced_h_.get() + m * pitch);
  FT_CUDA_CHECK(cudaMemcpy2DAsync(forced_.get(), pitch * sizeof(int32_t), forced_h_.get(), pitch * sizeof(int32_t),
                                  n * sizeof(int32_t), static_cast<size_t>(n_moe_), cudaMemcpyHostToDevice, compute_));
}

const int32_t* GpuExpertTier::forced_routes(int64_t layer) const {
  if (!forced_.get()) return nullptr;
  const int m = moe_of_layer_.at(static_cast<size_t>(layer));
  return m < 0 ? nullptr : forced_.get() + static_cast<size_t>(m) * o_.max_tokens * TK_;
}

void GpuExpertTier::write_stats(const std::string& path) const { tiers::write_routing_stats(path, cache_.use_counts()); }

}  // namespace ft::cuda
