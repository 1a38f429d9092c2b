// The VRAM budget: categories add up, the cap is enforced with a clear error, the card's own
// refusal is an error too, and releasing makes room again.
#include "gpu-worker/backends/cuda/core/vram.h"

#include "tests/cuda/support/gpu_test.h"

namespace ft::cuda {
namespace {

class VramTest : public test::GpuTest {};

TEST_F(VramTest, CountsPerCategoryAndReleases) {
  VramBudget b(64ull << 20);
  void* w = b.allocate(8 << 20, VramCategory::Weights, "w");
  void* k = b.allocate(4 << 20, VramCategory::KvCache, "kv");
  EXPECT_EQ(b.used(VramCategory::Weights), 8u << 20);
  EXPECT_EQ(b.used(VramCategory::KvCache), 4u << 20);
  EXPECT_EQ(b.used(), 12u << 20);
  EXPECT_EQ(b.available(), (64u - 12u) << 20);
  b.release(w);
  EXPECT_EQ(b.used(VramCategory::Weights), 0u);
  b.release(k);
  EXPECT_EQ(b.used(), 0u);
}

TEST_F(VramTest, RefusesPastTheBudgetNamingTheAllocation) {
  VramBudget b(16ull << 20);
  DeviceArray<float> a(b, (12 << 20) / 4, VramCategory::Workspace, "first");
  try {
    DeviceArray<float> c(b, (8 << 20) / 4, VramCategory::KvCache, "kv block pool");
    FAIL() << "allocation past the budget succeeded";
  } catch (const VramExhausted& e) {
    EXPECT_NE(std::string(e.what()).find("kv block pool"), std::string::npos) << e.what();
  }
  // The failed request left nothing behind.
  EXPECT_EQ(b.used(), 12u << 20);
}

TEST_F(VramTest, CardRefusalIsAnErrorNotACrash) {
  VramBudget b(1ull << 62);  // a budget far beyond the card: cudaMalloc itself fails
  EXPECT_THROW(b.allocate(1ull << 60, VramCategory::Weights, "huge"), VramExhausted);
  // The context is still usable afterwards.
  void* p = b.allocate(1 << 20, VramCategory::Weights, "small");
  EXPECT_NE(p, nullptr);
  FT_CUDA_CHECK(cudaMemset(p, 0, 1 << 20));
  FT_CUDA_CHECK(cudaDeviceSynchronize());
  b.release(p);
}

}  // namespace
}  // namespace ft::cuda
