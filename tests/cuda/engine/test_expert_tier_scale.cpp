// The expert tier's cache invariants at the real widths and at a real cache size: once admissions
// are switched in, every table entry that points into VRAM names a slot holding exactly its
// expert's segment bytes, and every other entry names the segment itself — for cache slots past
// the first 4 GB too. The tiny fixture's tier tests use a cache of a few slots; the real-width
// tier panel (flashtier-bench-tiers, docs/gpu-runs.md session 10) found logits that differ
// between an engine with a cache and one without, and this pins down whether the slots' bytes or
// the table are at fault.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <unistd.h>

#include "gpu-worker/backends/cuda/engine/expert_tier.h"
#include "gpu-worker/backends/cuda/engine/synthetic_model.h"
#include "gpu-worker/tiers/synthetic_segment.h"
#include "shared/exl3/expert_block.h"
#include "shared/ipc/shm.h"
#include "tests/cuda/support/gpu_test.h"

namespace ft::cuda {
namespace {

class ExpertTierScale : public test::GpuTest {
 protected:
  void SetUp() override {
    test::GpuTest::SetUp();
    if (IsSkipped()) return;
    size_t free_b = 0, total_b = 0;
    FT_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    // 2 MoE layers × 288 experts of 9.5 MB: a 5.5 GB segment and a 6 GB cache.
    if (free_b < (uint64_t{8} << 30) || sysconf(_SC_PHYS_PAGES) * sysconf(_SC_PAGE_SIZE) < (int64_t{24} << 30))
      GTEST_SKIP() << "needs 8 GB of free VRAM and 24 GB of RAM";
    cfg_ = synthetic_config("\"n_routed_experts\": 288, \"num_hidden_layers\": 5");
    ASSERT_GE(cfg_.moe_layer_count(), 2);
    seg_name_ = "ft-tier-scale-" + std::to_string(getpid());
    tiers::SyntheticSegmentOptions so;
    so.name = seg_name_;
    so.threads = 8;
    info_ = tiers::build_synthetic_segment(cfg_, so);
  }
  void TearDown() override {
    if (!seg_name_.empty()) ipc::ShmMapping::remove(seg_name_);
  }
  ModelConfig cfg_;
  std::string seg_name_;
  tiers::SyntheticSegmentInfo info_;
};

// The device bytes at a device address (VRAM or the segment's mapped alias).
std::vector<uint8_t> read_device(const void* p, size_t n) {
  std::vector<uint8_t> h(n);
  FT_CUDA_CHECK(cudaMemcpy(h.data(), p, n, cudaMemcpyDeviceToHost));
  return h;
}

TEST_F(ExpertTierScale, CachedEntriesHoldTheirExpertsBytesPastFourGigabytes) {
  auto seg = ipc::ExpertSegment::attach(seg_name_, "", nullptr);
  ASSERT_TRUE(seg.has_value());
  const int n_moe = static_cast<int>(cfg_.moe_layer_count()), E = static_cast<int>(cfg_.n_routed_experts);
  const int TK = static_cast<int>(cfg_.num_experts_per_tok);
  const int64_t rows = E / TK;  // every expert of a layer picked once
  VramBudget budget(0);
  cudaStream_t s = nullptr;
  FT_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  ExpertTierOptions o;
  o.cache_bytes = uint64_t{6} << 30;
  o.admit_per_step = n_moe * E;
  o.max_tokens = rows;
  auto owned = std::make_unique<GpuExpertTier>(cfg_, std::move(*seg), o, budget, s);
  GpuExpertTier& tier = *owned;
  const ExpertTierStats st0 = tier.stats();
  ASSERT_GE(st0.slots, n_moe * E);
  ASSERT_GT(static_cast<uint64_t>(n_moe * E) * st0.slot_bytes, uint64_t{4} << 30);

  std::vector<int64_t> moe_layers;
  for (int64_t l = 0; l < cfg_.num_hidden_layers; ++l)
    if (tier.moe_index(l) >= 0) moe_layers.push_back(l);
  auto table_of = [&](int64_t l) {
    std::vector<Exl3ExpertPtrs> t(static_cast<size_t>(E));
    FT_CUDA_CHECK(cudaMemcpy(t.data(), tier.layer(l).table, t.size() * sizeof(Exl3ExpertPtrs), cudaMemcpyDeviceToHost));
    return t;
  };
  std::vector<std::vector<Exl3ExpertPtrs>> before;
  for (int64_t l : moe_layers) before.push_back(table_of(l));

  // One step that used every expert of every layer, then one that only switches the copies in.
  for (int64_t l : moe_layers) {
    int32_t* r = tier.route_buffer(l);
    for (int64_t i = 0; i < rows * TK; ++i) r[i] = static_cast<int32_t>(i);
  }
  tier.after_step(rows, true, s);
  FT_CUDA_CHECK(cudaDeviceSynchronize());
  tier.after_step(0, true, s);
  FT_CUDA_CHECK(cudaDeviceSynchronize());

  const ipc::ExpertSegment& sg = tier.segment();
  // Where an entry's block starts: its gate trellis less that trellis's offset in the block.
  auto block_base = [](const Exl3ExpertPtrs& p, const uint8_t* host_block) {
    const auto* h = reinterpret_cast<const exl3::ExpertBlockHeader*>(host_block);
    return reinterpret_cast<const uint8_t*>(p.trellis[0]) - h->proj[0].trellis_offset;
  };
  int in_vram = 0;
  uintptr_t lo = UINTPTR_MAX, hi = 0;  // the slots' span
  for (size_t li = 0; li < moe_layers.size(); ++li) {
    const int m = tier.moe_index(moe_layers[li]);
    const std::vector<Exl3ExpertPtrs> now = table_of(moe_layers[li]);
    for (int e = 0; e < E; ++e) {
      const ipc::BlockDesc& b = sg.block(m, static_cast<uint32_t>(e));
      const uint8_t* host = sg.block_data(b);
      const auto* h = reinterpret_cast<const exl3::ExpertBlockHeader*>(host);
      const Exl3ExpertPtrs& p = now[static_cast<size_t>(e)];
      const uint8_t* base = block_base(p, host);
      // The three projections' pointers are one block's layout from one base.
      for (int j = 0; j < 3; ++j) {
        EXPECT_EQ(reinterpret_cast<const uint8_t*>(p.trellis[j]), base + h->proj[j].trellis_offset) << m << "/" << e;
        EXPECT_EQ(reinterpret_cast<const uint8_t*>(p.suh[j]), base + h->proj[j].suh_offset) << m << "/" << e;
        EXPECT_EQ(reinterpret_cast<const uint8_t*>(p.svh[j]), base + h->proj[j].svh_offset) << m << "/" << e;
      }
      const bool vram = tier.in_vram(m, e);
      in_vram += vram;
      if (!vram) {
        EXPECT_EQ(p.trellis[0], before[li][static_cast<size_t>(e)].trellis[0]) << "a zero-copy entry moved: " << m << "/" << e;
        continue;
      }
      EXPECT_NE(p.trellis[0], before[li][static_cast<size_t>(e)].trellis[0]) << m << "/" << e;
      const std::vector<uint8_t> got = read_device(base, b.bytes);
      EXPECT_EQ(std::memcmp(got.data(), host, b.bytes), 0) << "slot bytes of expert " << m << "/" << e << " differ";
      lo = std::min(lo, reinterpret_cast<uintptr_t>(base));
      hi = std::max(hi, reinterpret_cast<uintptr_t>(base));
    }
  }
  // Every expert was admitted (the cache holds them all), and the zero-copy alias reads the
  // segment's bytes too.
  EXPECT_EQ(in_vram, n_moe * E);
  for (int e : {0, E - 1}) {
    const int m = tier.moe_index(moe_layers.back());
    const ipc::BlockDesc& b = sg.block(m, static_cast<uint32_t>(e));
    const uint8_t* zc = block_base(before.back()[static_cast<size_t>(e)], sg.block_data(b));
    const std::vector<uint8_t> got = read_device(zc, b.bytes);
    EXPECT_EQ(std::memcmp(got.data(), sg.block_data(b), b.bytes), 0) << "zero-copy bytes of expert " << m << "/" << e;
  }
  EXPECT_GE(hi - lo, uintptr_t{4} << 30) << "no slot past the first 4 GB was checked";
  owned.reset();
  FT_CUDA_CHECK(cudaStreamDestroy(s));
}

}  // namespace
}  // namespace ft::cuda
